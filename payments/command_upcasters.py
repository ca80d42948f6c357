"""Older versions of the orchestrator's commands payments obeys, brought to the newest before its
handler (declared under ``upcasters``; kernel/upcasters.py). A module of its own: the bus imports
it only where the orchestrator, their sender, is installed."""

from kernel.upcasters import producer_upcaster

payment_charge_v1_to_v2 = producer_upcaster("orchestrator.payment.charge", 1)
