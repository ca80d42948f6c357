"""The operator's overview page, linked from the admin index: what is waiting, and where.

Messaging's figures (outbox, dead letters of the consumers hosted here), then a section per
hosted context that registered one (``kernel.operations``).
"""

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils import timezone

from kernel.operations import overview_sections
from messaging.api import dead_letter_counts_by_state, local_consumers, outbox_backlog


def overview_view(request):
    now = timezone.now()
    letters = dead_letter_counts_by_state()
    context = {
        **admin.site.each_context(request),
        "title": "Saga overview",
        "now": now,
        "backlog": outbox_backlog(),
        "dead_letters": [
            {"consumer": c, "waiting": letters.get((c, "waiting"), 0), "replayed": letters.get((c, "replayed"), 0)}
            for c in local_consumers()
        ],
        "sections": [{"template": s.template, "data": s.context(now)} for s in overview_sections()],
    }
    return TemplateResponse(request, "admin/overview.html", context)
