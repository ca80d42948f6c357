"""Where a saga is waiting: read off a detailed timeline (``timeline_for(..., detailed=True)``).

Four places a message can wait: an outbox row not yet published, a parked outbox row, a
published message that a subscribed consumer has not handled yet, and a dead letter.

A deployment sees its own consumers' inboxes and dead letters only. A consumer hosted
elsewhere shows as having handled a message once an event it caused arrives (see
``selectors._add_handling``); until then this deployment cannot tell "not yet" from "handled
without publishing anything" (an ignored duplicate, a tombstone), so it says "elsewhere" and
counts it as waiting only when asked to (``expect_answers``: the saga is still running, and
every handler of a running saga answers with an event).
"""

import shlex
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from reliable_messaging._conf import contexts_dir, duration, folder, setting
from reliable_messaging._masking import mask_text
from reliable_messaging._registry import local_consumers
from reliable_messaging._timeline import TimelineEntry, WaitingPlace, YetToHandle
from reliable_messaging._topology import subscribers_of


def consumers_of(event_type: str) -> list[str]:
    """The consumers subscribed to ``event_type`` (the ``events`` log takes every event)."""
    return subscribers_of(event_type)


def command_in_deployment(context: str, *args: str) -> str:
    """``manage.py`` with ``args`` as it runs, pasted, in the deployment that hosts ``context``:
    that deployment's DATABASE_URL where this process was told it (else a placeholder), the
    broker where it cannot be derived from that database, and DEBUG=1 where this one has it.
    A RabbitMQ URL, or a database URL with a password, is never printed: a placeholder stands in."""
    url = setting("DEPLOYMENT_DATABASE_URLS").get(context)
    if url and urlsplit(url).password:
        url = None
    words = ["DEBUG=1"] if settings.DEBUG else []
    words += [f"CONTEXTS={context}", f"DATABASE_URL={shlex.quote(url) if url else f'<{context.upper()}_DATABASE_URL>'}"]
    if not setting("BROKER_URL").startswith("filesystem"):
        words.append("BROKER_URL=<BROKER_URL>")
    elif not (url and url.startswith("sqlite") and _broker_beside(url) == folder("FILESYSTEM_DIR").resolve()):
        words.append(f"BROKER_URL=filesystem://{setting('FILESYSTEM_DIR')}")
    python = ".venv/bin/python" if (contexts_dir() / ".venv" / "bin" / "python").exists() else "python"
    return " ".join([*words, python, "manage.py", *args])


def _broker_beside(sqlite_url: str) -> Path:
    """The broker folder a deployment on this SQLite database derives (config.settings)."""
    return Path(urlsplit(sqlite_url).path[1:]).resolve().parent / "broker"


def yet_to_handle(entries: list[TimelineEntry], *, now: datetime | None = None) -> dict[str, YetToHandle]:
    """For each entry, by message id, the subscribed consumers with no sign of having handled it;
    none for an entry not published, or published before the inbox's retention (past it "not
    handled" can no longer be told from "handled and purged")."""
    now = now or timezone.now()
    inbox_horizon = now - duration("INBOX_RETENTION")
    local = set(local_consumers())
    found: dict[str, YetToHandle] = {}
    for entry in entries:
        if entry.state != "published" or entry.published_at is None or entry.published_at < inbox_horizon:
            found[entry.message_id] = YetToHandle()
            continue
        answered = {h.consumer for h in entry.handled_by} | {d.consumer for d in entry.dead_letters}
        subscribers = [c for c in consumers_of(entry.event_type) if c not in answered]
        found[entry.message_id] = YetToHandle(
            awaiting=[c for c in subscribers if c in local], elsewhere=[c for c in subscribers if c not in local]
        )
    return found


def timeline_waiting(
    entries: list[TimelineEntry], *, now: datetime | None = None, expect_answers: bool = True
) -> list[WaitingPlace]:
    """One place per wait in the timeline, oldest first."""
    now = now or timezone.now()
    unanswered = yet_to_handle(entries, now=now)
    waiting: list[WaitingPlace] = []
    for entry in entries:

        def place(
            kind: str,
            since: datetime,
            detail: str,
            consumer: str | None = None,
            dead_letter_id: int | None = None,
            entry: TimelineEntry = entry,
            command: str = "",
        ) -> None:
            waiting.append(
                WaitingPlace(
                    kind=kind,
                    event_type=entry.event_type,
                    message_id=entry.message_id,
                    since=since,
                    age=max(0.0, (now - since).total_seconds()),
                    detail=mask_text(detail),
                    consumer=consumer,
                    dead_letter_id=dead_letter_id,
                    command=command,
                )
            )

        if entry.state == "pending":
            tried = f"{entry.attempts} refused attempt(s); last error: {entry.last_error}"
            place("pending", entry.occurred_at, tried if entry.attempts else "waiting for the relay")
            continue
        if entry.state == "parked":
            place("parked", entry.occurred_at, f"parked after {entry.attempts} attempts: {entry.last_error}")
            continue
        # When it was published; a scheduled entry, not due yet, has only its delivery time (a dead
        # letter may still carry its message id: a forged or refused message).
        published = entry.published_at or entry.occurred_at
        handled = {h.consumer for h in entry.handled_by}
        dead = {letter.consumer: letter for letter in entry.dead_letters}
        for consumer, letter in dead.items():
            if consumer in handled:
                continue  # replayed and handled since
            detail = f"{letter.reason}: {letter.error}" if letter.error else letter.reason
            if letter.replayed_at:
                detail = f"replayed at {letter.replayed_at:%Y-%m-%d %H:%M:%S}, not handled yet; {detail}"
            place("dead_letter", published, detail, consumer, letter.id)
        yet = unanswered[entry.message_id]
        for consumer in yet.awaiting:
            place("unhandled", published, f"published, not yet handled by {consumer}", consumer)
        for consumer in yet.elsewhere if expect_answers else ():
            detail = f"published; {consumer} runs in another deployment and no event it caused has arrived yet"
            look = command_in_deployment(consumer, "dead_letters", "list", "--consumer", consumer)
            place("elsewhere", published, detail, consumer, command=look)
    return sorted(waiting, key=lambda w: (w.since, w.message_id))
