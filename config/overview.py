"""The operator's overview page, linked from the admin index: what is waiting, and where."""

from datetime import timedelta

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils import timezone

from messaging.api import CONSUMERS, dead_letter_counts_by_state, outbox_backlog
from orders.monitoring import orders_pending_longer_than, orders_status_counts

STUCK_AFTER = timedelta(minutes=1)
STUCK_LISTED = 50


def overview_view(request):
    now = timezone.now()
    letters = dead_letter_counts_by_state()
    stuck = orders_pending_longer_than(seconds=STUCK_AFTER.total_seconds())
    context = {
        **admin.site.each_context(request),
        "title": "Saga overview",
        "now": now,
        "backlog": outbox_backlog(),
        "dead_letters": [
            {"consumer": c, "waiting": letters.get((c, "waiting"), 0), "replayed": letters.get((c, "replayed"), 0)}
            for c in CONSUMERS
        ],
        "orders_last_hour": orders_status_counts(since=now - timedelta(hours=1)),
        "stuck_count": stuck.count(),
        "stuck_orders": [{"order": o, "age": (now - o.created_at).total_seconds()} for o in stuck[:STUCK_LISTED]],
        "stuck_after": int(STUCK_AFTER.total_seconds()),
    }
    return TemplateResponse(request, "admin/overview.html", context)
