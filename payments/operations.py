"""Payments' gauges on ``/metrics``: the gateway worker serves no metrics of its own (it is not a
messaging loop), so the database says whether it keeps up.

Registered from ``PaymentsConfig.ready()`` through the kernel, so only a deployment that hosts
payments shows them.
"""

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from kernel.operations import register_database_gauges
from payments.monitoring import gateway_calls_summary


def gateway_call_gauges():
    calls = gateway_calls_summary(timezone.now())
    in_flight = GaugeMetricFamily(
        "payments_gateway_calls_in_flight",
        "Charges and refunds recorded in flight, waiting for the gateway worker or its answer.",
        labels=["kind"],
    )
    in_flight.add_metric(["charge"], calls.charging)
    in_flight.add_metric(["refund"], calls.refunding)
    yield in_flight
    yield GaugeMetricFamily(
        "payments_gateway_calls_failing",
        "Calls in flight whose last try failed and waits to be tried again (the payment's call_error says why).",
        value=calls.failing,
    )
    yield GaugeMetricFamily(
        "payments_gateway_call_oldest_overdue_seconds",
        "How long the call most past its due time has waited for a gateway worker (0 when none).",
        value=calls.oldest_overdue_seconds,
    )


def register() -> None:
    register_database_gauges("payments", gateway_call_gauges)
