"""What payments offers the fault tests (faultlib.steps): its gateway worker, one round at a time.
Test code: payments' production code never imports it."""

from django.utils import timezone

from payments.gateway_calls import run_due_calls
from payments.models import Payment


def gateway_calls_in_flight(order_ids) -> bool:
    return Payment.objects.filter(
        order_id__in=order_ids, status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING]
    ).exists()


def gateway_worker_step(order_ids) -> None:
    """Time runs forward to the calls' due time (a backoff, a lease); the worker makes them."""
    Payment.objects.filter(order_id__in=order_ids).update(call_due_at=timezone.now())
    run_due_calls(rounds=1)


# The orchestrator's charge command, which payments decides on only once the order's creation (and
# its token) has reached it: one delivered first is retried, and after its last attempt a dead
# letter saying WAITED_FOR_TOKEN (the saga's step deadline or orders' deadline then ends the order).
WAITS_FOR_TOKEN = frozenset({("payments", "orchestrator.payment.charge")})
WAITED_FOR_TOKEN = "before the order's payment token came here"
