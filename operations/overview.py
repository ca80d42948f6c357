"""The operator's overview page, linked from the admin index: what is waiting, and where.

Messaging's figures (outbox, dead letters of the consumers hosted here, and in a split where the
others' are: the command that lists them in their own deployment), then a section per hosted
context that registered one (``kernel.operations``).
"""

from dataclasses import dataclass

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.safestring import mark_safe
from reliable_messaging.operator import (
    command_in_deployment,
    dead_letter_counts_by_state,
    local_consumers,
    outbox_backlog,
    outbox_backlog_history,
    system_consumers,
)
from reliable_messaging.operator import installed_contexts as installed

from kernel.charts import horizontal_bars, line_chart
from kernel.operations import overview_sections

BACKLOG_COLORS = {"backlog": "#1565c0", "oldest pending": "#ef6c00"}
LETTER_COLORS = {"waiting": "#c62828", "replayed": "#90a4ae"}


def outbox_chart(now) -> str:
    history = outbox_backlog_history(until=now)
    return line_chart(
        buckets=[point.at for point in history],
        series={
            "backlog": [point.waiting for point in history],
            "oldest pending": [point.oldest_age for point in history],
        },
        colors=BACKLOG_COLORS,
        units={"backlog": "rows", "oldest pending": "s"},
        title="Outbox: rows waiting to be published, and the oldest one's age (last hour)",
    )


@dataclass(frozen=True)
class DeadLetterRow:
    """A consumer hosted here and its dead letters: waiting for an operator, and replayed."""

    consumer: str
    waiting: int
    replayed: int


def dead_letter_rows() -> list[DeadLetterRow]:
    letters = dead_letter_counts_by_state()
    return [
        DeadLetterRow(consumer=c, waiting=letters.get((c, "waiting"), 0), replayed=letters.get((c, "replayed"), 0))
        for c in local_consumers()
    ]


@dataclass(frozen=True)
class ElsewhereRow:
    """A consumer another deployment hosts: its dead letters are in that deployment's database."""

    consumer: str
    command: str


def dead_letters_elsewhere() -> list[ElsewhereRow]:
    here = local_consumers()
    contexts = {d.name for d in installed()}
    # The event log's consumer runs in the deployment of the context that declares it.
    event_log = next((d.name for d in installed() if d.event_log), None)
    rows = []
    for consumer in system_consumers():
        context = consumer if consumer in contexts else event_log
        if consumer not in here and context:
            rows.append(
                ElsewhereRow(consumer, command_in_deployment(context, "dead_letters", "list", "--consumer", consumer))
            )
    return rows


def dead_letters_chart(rows: list[DeadLetterRow]) -> str:
    return horizontal_bars(
        rows=[(row.consumer, {"waiting": row.waiting, "replayed": row.replayed}) for row in rows],
        colors=LETTER_COLORS,
        title="Dead letters by consumer",
    )


def overview_view(request):
    now = timezone.now()
    dead_letters = dead_letter_rows()
    context = {
        **admin.site.each_context(request),
        "title": "Saga overview",
        "now": now,
        "backlog": outbox_backlog(),
        "dead_letters": dead_letters,
        "dead_letters_elsewhere": dead_letters_elsewhere(),
        # kernel.charts escapes every text it draws.
        "outbox_chart": mark_safe(outbox_chart(now)),  # noqa: S308
        "dead_letters_chart": mark_safe(dead_letters_chart(dead_letters)),  # noqa: S308
        "sections": [{"template": s.template, "data": s.context(now)} for s in overview_sections()],
    }
    return TemplateResponse(request, "admin/overview.html", context)
