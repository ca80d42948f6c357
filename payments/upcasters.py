"""Older versions of the events payments reads, brought to the newest before its handler sees
them (declared under ``upcasters``): its producers' own steps, kept beside their schemas and bound
here (kernel/upcasters.py); keep each as long as docs/evolving-events.md says."""

from kernel.upcasters import producer_upcaster

order_created_v1_to_v2 = producer_upcaster("orders.order.created", 1)
order_created_v2_to_v3 = producer_upcaster("orders.order.created", 2)
order_created_v3_to_v4 = producer_upcaster("orders.order.created", 3)
