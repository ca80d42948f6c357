"""Dead letters: messages a consumer could not handle, kept in the database until purged.

The consumer records them here; operators list, edit, replay, redrive and purge them through the
same functions from the ``dead_letters`` command and the admin.

An edit never changes what was received: the dead letter keeps its body, and each edit is a row of
its own (``DeadLetterEdit``: who, when, from where, the diff). An edit is accepted only when the
edited message passes the checks its consumer makes before a handler (its schema for its version,
the upcasts, the envelope); its replay publishes the newest edit as a new message, through the one
replay path every dead letter takes (the producer check included).
"""

import json
import logging
import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.utils import timezone

from reliable_messaging import _broker as broker
from reliable_messaging import _claim_check as claim_check
from reliable_messaging import _metrics as metrics
from reliable_messaging import _registry as registry
from reliable_messaging._amqp_properties import COMPRESSED, OVERSIZED, UNDECODABLE
from reliable_messaging._conf import dead_letter_flood_limit, duration, max_message_bytes, queue_name, setting
from reliable_messaging._contracts import schemas, validation_error
from reliable_messaging._delivery_checks import Refused, prepare
from reliable_messaging._edge import MAX_COUNT, clamped_count
from reliable_messaging._envelope import ATTEMPT_HEADER, Envelope, InvalidMessage, encode_body, parse_incoming
from reliable_messaging._field_crypto import is_encrypted, without_encrypted
from reliable_messaging._masking import mask_sensitive, mask_text, mask_value, shown_encrypted
from reliable_messaging._producers import UNAUTHENTICATED, producer_refusal
from reliable_messaging._publisher import BatchPublisher
from reliable_messaging._telemetry import MAX_TRACESTATE
from reliable_messaging.models import DeadLetter, DeadLetterEdit, DeadLetterFlood, InboxMessage

logger = logging.getLogger("reliable_messaging.dead_letters")

# Broker properties worth keeping (the headers are kept apart). ``user_id`` is the producer
# RabbitMQ validated on the delivery that was dead-lettered: a replay is checked against it.
_KEPT_PROPERTIES = ("message_id", "correlation_id", "content_type", "content_encoding", "delivery_mode", "user_id")


# Reasons of refusals of hostile input, decided before any handler or transaction: beyond
# DEAD_LETTER_FLOOD_LIMIT per consumer and window, counted only. A reason a genuine message can have
# and an operator fixes by replaying it (unsupported_schema_version during a rollout, upcast_failed,
# a handler's failure, a broker's dead-lettering) is never in here: those are always stored.
HOSTILE_REFUSALS = frozenset(
    (
        "payload_too_large",
        "invalid_headers",
        "missing_message_id",
        "missing_event_type",
        "invalid_schema_version",
        "undecodable_body",
        "invalid_payload",
        UNAUTHENTICATED,
        "unknown_event_type",
        "invalid_claim_check",
        "claim_check_mismatch",
    )
)


@dataclass(frozen=True)
class Failed:
    """A message to keep as a dead letter (``dead_letters_record``)."""

    consumer: str
    body: bytes
    properties: dict[str, Any]
    headers: dict[str, Any]
    routing_key: str
    reason: str
    error: str = ""
    traceback: str = ""
    attempts: int = 1
    first_failed_at: datetime | None = None
    # Refused before any handler ran (``Decision.refused``): counted only beyond the flood limit
    # when its reason is in HOSTILE_REFUSALS.
    refused: bool = False

    @property
    def sampled(self) -> bool:
        return self.refused and self.reason in HOSTILE_REFUSALS


def dead_letter_record(
    *,
    consumer: str,
    body: bytes,
    properties: dict[str, Any],
    headers: dict[str, Any],
    routing_key: str,
    reason: str,
    error: str = "",
    traceback: str = "",
    attempts: int = 1,
    first_failed_at: datetime | None = None,
) -> DeadLetter:
    """Store one dead letter (never counted only: see ``dead_letters_record``)."""
    (letter,) = dead_letters_record(
        [Failed(consumer, body, properties, headers, routing_key, reason, error, traceback, attempts, first_failed_at)]
    )
    assert letter is not None  # not refused: always stored
    return letter


def dead_letters_record(failed: list[Failed]) -> list[DeadLetter | None]:
    """Store dead letters, in one transaction (one commit for a consumer's batch); the same
    message dead-lettered again updates its row. ``attempts`` is clamped to what the column holds:
    a forged count must not make the row unstorable.

    A refusal of hostile input (``Failed.sampled``) beyond ``DEAD_LETTER_FLOOD_LIMIT`` of its
    consumer and reason in the current ``DEAD_LETTER_FLOOD_WINDOW`` is counted only
    (``DeadLetterFlood``, the metric ``messaging_dead_letters_not_stored_total``): None in its place.
    """
    now = timezone.now()
    stored: list[DeadLetter | None] = [None] * len(failed)
    with transaction.atomic():
        counted_only = _over_flood_limit(failed, now)
        keys = {(f.consumer, _text(f.properties.get("message_id"), 255)) for i, f in enumerate(failed)
                if i not in counted_only}  # fmt: skip
        existing = _existing(keys)
        created: list[DeadLetter] = []
        for i, f in enumerate(failed):
            if i in counted_only:
                continue
            message_id = _text(f.properties.get("message_id"), 255)
            fields = _fields(f, now)
            if (letter := existing.get((f.consumer, message_id)) if message_id else None) is not None:
                for name, value in fields.items():
                    setattr(letter, name, value)
                letter.attempts = min(letter.attempts + clamped_count(f.attempts), MAX_COUNT)
                if letter.pk is not None:
                    letter.save()
            else:
                letter = DeadLetter(consumer=f.consumer, message_id=message_id, attempts=clamped_count(f.attempts),
                                    first_failed_at=f.first_failed_at or now, **fields)  # fmt: skip
                created.append(letter)
                if message_id:  # the same message twice in one batch: one row
                    existing[f.consumer, message_id] = letter
            stored[i] = letter
        DeadLetter.objects.bulk_create(created)
    for f in (failed[i] for i in counted_only):
        metrics.dead_letter_not_stored(f.consumer, f.reason)
    for letter in {id(letter): letter for letter in stored if letter is not None}.values():
        _log_stored(letter)
    return stored


def _fields(f: Failed, now: datetime) -> dict[str, Any]:
    return {
        "event_type": _text(f.headers.get("event_type"), 200),
        "routing_key": _text(f.headers.get("x-original-routing-key") or f.routing_key, 255),
        "correlation_id": _text(f.properties.get("correlation_id"), 255),
        "reason": _text(f.reason, 100),
        "error": _text(f.error),
        "traceback": _text(f.traceback),
        "body": bytes(f.body),
        "headers": _json_safe(f.headers),
        "properties": {k: _json_safe(f.properties[k]) for k in _KEPT_PROPERTIES if f.properties.get(k) is not None},
        "last_failed_at": now,
        "replayed_at": None,  # failing again after a replay makes it a live dead letter again
    }


def _existing(keys: set[tuple[str, str]]) -> dict[tuple[str, str], DeadLetter]:
    """The dead letters already stored of these (consumer, message id), locked."""
    wanted = {key for key in keys if key[1]}
    if not wanted:
        return {}
    letters = DeadLetter.objects.select_for_update().filter(
        consumer__in={c for c, _ in wanted}, message_id__in={m for _, m in wanted}
    )
    # The oldest of a message's rows when it has several (of a release before this one).
    return {(letter.consumer, letter.message_id): letter for letter in letters.order_by("-id")}


def _log_stored(letter: DeadLetter) -> None:
    logger.error(
        "dead letter: %s",
        letter.reason,
        extra={
            "consumer": letter.consumer,
            "message_id": letter.message_id or "-",
            "event_type": letter.event_type,
            "correlation_id": letter.correlation_id,
            "dead_letter_id": letter.pk,
            "error": letter.error[:500],
        },
    )


# (consumer, reason, window start) of the windows this process saw fill up: their refusals are
# only counted, all of a batch's in one UPDATE, without reading the rows.
_full_windows: set[tuple[str, str, datetime]] = set()


def flood_window_start(now: datetime) -> datetime:
    """The start of the ``DEAD_LETTER_FLOOD_WINDOW`` that ``now`` is in (windows from the epoch)."""
    seconds = duration("DEAD_LETTER_FLOOD_WINDOW").total_seconds()
    return datetime.fromtimestamp(now.timestamp() // seconds * seconds, tz=UTC)


def _over_flood_limit(failed: list[Failed], now: datetime) -> set[int]:
    """The indexes of ``failed`` counted only: every sampled refusal counted in its window's
    ``DeadLetterFlood`` row, those beyond ``DEAD_LETTER_FLOOD_LIMIT`` not stored (in the caller's
    transaction: the count commits with the dead letters)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(failed):
        if f.sampled:
            groups.setdefault((f.consumer, f.reason), []).append(i)
    if not groups:
        return set()
    start = flood_window_start(now)
    full = {key: len(groups[key]) for key in sorted(groups) if (*key, start) in _full_windows}
    counted = _counted_in_full_windows(full, start, now)
    counted_only = {i for key in counted for i in groups[key]}
    limit = dead_letter_flood_limit()
    for key in sorted(groups.keys() - set(counted)):
        allowed = _flood_count(*key, start, len(groups[key]), limit, now)
        counted_only.update(groups[key][allowed:])
    return counted_only


def _counted_in_full_windows(full: dict[tuple[str, str], int], start: datetime, now: datetime) -> list[tuple[str, str]]:
    """Add each (consumer, reason)'s count to its full window's row, in one statement; the keys
    whose row was there (a row deleted meanwhile is made again by ``_flood_count``)."""
    if not full:
        return []
    table = DeadLetterFlood._meta.db_table
    cases = " ".join("WHEN consumer = %s AND reason = %s THEN %s" for _ in full)
    keys = " OR ".join("(consumer = %s AND reason = %s)" for _ in full)
    at, window_start = (connection.ops.adapt_datetimefield_value(value) for value in (now, start))  # as the ORM
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET received = received + CASE {cases} ELSE 0 END, last_at = %s "  # noqa: S608 - names only
            f"WHERE window_start = %s AND ({keys}) RETURNING consumer, reason",
            [*(v for (c, r), n in full.items() for v in (c, r, n)), at, window_start, *(v for k in full for v in k)],
        )
        return [(consumer, reason) for consumer, reason in cursor.fetchall()]


def _flood_count(consumer: str, reason: str, start: datetime, count: int, limit: int, now: datetime) -> int:
    """Count ``count`` refusals in their window's row; how many of them may be stored in full."""
    window = DeadLetterFlood.objects.filter(consumer=consumer, reason=reason, window_start=start)
    DeadLetterFlood.objects.bulk_create(
        [DeadLetterFlood(consumer=consumer, reason=reason, window_start=start, last_at=now)], ignore_conflicts=True
    )
    stored = window.select_for_update().values_list("stored", flat=True).get()
    allowed = max(0, min(count, limit - stored))
    window.update(received=F("received") + count, stored=F("stored") + allowed, last_at=now)
    if allowed < count:
        _full_windows.difference_update({w for w in _full_windows if w[2] < start})  # past windows
        _full_windows.add((consumer, reason, start))
        logger.warning(
            "dead letters over DEAD_LETTER_FLOOD_LIMIT (%d per %s): more %s of %s counted, not stored, until %s",
            limit,
            duration("DEAD_LETTER_FLOOD_WINDOW"),
            reason,
            consumer,
            (start + duration("DEAD_LETTER_FLOOD_WINDOW")).isoformat(),
            extra={"consumer": consumer, "reason": reason},
        )
    return allowed


def dead_letters_not_stored() -> list[tuple[str, str, int]]:
    """(consumer, reason, how many) of the refusals counted but not stored, over every window kept."""
    rows = (
        DeadLetterFlood.objects.filter(received__gt=F("stored"))
        .values("consumer", "reason")
        .annotate(counted_only=Sum(F("received") - F("stored")))
        .order_by("consumer", "reason")
    )
    return [(row["consumer"], row["reason"], row["counted_only"]) for row in rows]


def _text(value: object, limit: int | None = None) -> str:
    """A text PostgreSQL can hold: no NUL (shown as ``\\x00``), at most ``limit`` characters.

    A dead letter is what a message that could not be handled leaves behind, whatever it holds:
    a value the database refused would leave it nowhere.
    """
    text = str(value or "").replace("\x00", "\\x00")
    return text[:limit] if limit else text


def _json_safe(value: object) -> Any:
    if isinstance(value, dict):
        return {_text(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return _text(value.decode("utf-8", errors="backslashreplace"))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN nor infinity (AMQP's doubles do)
    if value is None or isinstance(value, int | float | bool):
        return value
    return _text(value)


# --- operators: list, show, replay, purge ----------------------------------------------------

# The headers a replay carries of those its dead letter was stored with: the event's own, as the
# relay publishes them (``_envelope.envelope_for_outbox``), each checked again by the consumer as on
# arrival. Every other one is left out: a replay goes out under this deployment's own broker user
# and must not pass on what a publisher put there (the bus's retry and wait headers, an
# x-wait-until-ms holding it back for a day, an x-replay-of naming another message's stored
# payload, RabbitMQ's x-death, anything of its own); a replay starts afresh.
_EVENT_HEADERS = (
    "event_type",
    "schema_version",
    "occurred_at",
    "source",
    "causation_id",
    "traceparent",
    "tracestate",
    claim_check.HEADER,
)
# Marks of a body the consumer did not take whole (a prefix of an oversized one, a compressed one,
# undecodable properties): carried, so the replay is refused as the delivery was. An edited body is
# whole, and is the payload: its replay goes without them and without the claim check.
_BODY_MARKERS = (OVERSIZED, COMPRESSED, UNDECODABLE)
# On a replay published as a new message: the message id of the one it replays.
REPLAY_OF_HEADER = "x-replay-of"
# On the replay of an edited dead letter: the edit (``DeadLetterEdit``) it publishes.
EDIT_HEADER = "x-dead-letter-edit"


@dataclass(frozen=True)
class ReplayOutcome:
    dead_letter_id: int
    consumer: str
    message_id: str
    replayed: bool
    note: str = ""
    # Why it was not replayed, as a short code to count by (the note says it in full):
    # no_such_dead_letter, producer_not_accepted, no_message_id, already_handled, not_published.
    refusal: str = ""


def dead_letters_list(*, consumer: str | None = None, waiting: bool = False) -> QuerySet[DeadLetter]:
    """Dead letters by id; ``waiting``: only those not replayed since they failed."""
    letters = DeadLetter.objects.order_by("id")
    if waiting:
        letters = letters.filter(replayed_at__isnull=True)
    return letters.filter(consumer=consumer) if consumer else letters


def dead_letter_display_body(letter: DeadLetter) -> str:
    """The body for people: JSON pretty-printed with sensitive fields masked, else escaped text;
    for a payload that travelled apart, the payload as stored."""
    try:
        return _display(received_payload(letter))
    except InvalidMessage as exc:
        return f"{_display(bytes(letter.body))}\n(its payload travelled apart and cannot be read now: {exc.detail})"


def received_payload(letter: DeadLetter) -> bytes:
    """The body as received or, when it carried a claim check, the payload stored apart that it names
    (checked as a consumer checks it; ``InvalidMessage`` when the storage no longer gives it). It
    reads the storage: never call it inside a transaction."""
    reference = (letter.headers or {}).get(claim_check.HEADER)
    if reference is None:
        return bytes(letter.body)
    return claim_check.fetch(
        reference, event_type=letter.event_type, message_id=letter.message_id, headers=letter.headers
    )


def _display(raw: bytes) -> str:
    try:
        return json.dumps(mask_sensitive(json.loads(raw)), indent=2, sort_keys=True)
    except ValueError:
        return raw.decode("utf-8", errors="backslashreplace")


def _replay_message_id(letter: DeadLetter, new_id: bool, edit: DeadLetterEdit | None = None) -> str:
    if not new_id:
        return letter.message_id
    # Derived, not random: a replay interrupted before it was recorded reuses the same id, so
    # the inbox still stops a double effect; each completed --new-id replay gets a fresh one,
    # and so does each edit (the same id never carries two different payloads).
    key = f"dead-letter:{letter.pk}:{letter.message_id}:{letter.replay_count}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{key}:edit:{edit.pk}" if edit else key))


def recorded_producer(letter: DeadLetter) -> str | None:
    """The broker user that published the dead-lettered delivery, as RabbitMQ validated it;
    None when it had none or none was recorded (a row stored without its properties, or older)."""
    return letter.properties.get("user_id") or None


def _producer_refused(letter: DeadLetter) -> str | None:
    """Why replaying ``letter`` would pass off a producer its consumer does not accept, if so.

    A replay goes out under this deployment's own broker user, which the consumer's producer
    check accepts: so the check is made here, on the producer recorded when it was dead-lettered
    (a message forged into the queue, its delay queue or its dead-letter queue fails it)."""
    if refusal := producer_refusal(letter.event_type, recorded_producer(letter)):
        return f"its producer is not accepted: {refusal} (recorded when it was dead-lettered)"
    return None


def _replay_block(letter: DeadLetter, message_id: str, new_id: bool) -> tuple[str, str] | None:
    """Why a replay would do nothing or might do something twice, if so: (code, note)."""
    if refused := _producer_refused(letter):
        return "producer_not_accepted", refused
    if not message_id:
        return "no_message_id", "it has no message_id, so it cannot be deduplicated: replay it with --new-id"
    if new_id:
        return None
    handled = InboxMessage.objects.filter(consumer=letter.consumer, message_id=message_id).first()
    if handled:
        return "already_handled", (
            f"{letter.consumer} already handled this message at {handled.handled_at:%Y-%m-%d %H:%M:%S}: "
            "use --new-id to run it again"
        )
    return None


def latest_edit(letter: DeadLetter) -> DeadLetterEdit | None:
    """The edit a replay of ``letter`` publishes (its newest), if it was edited."""
    return DeadLetterEdit.objects.filter(dead_letter_id=letter.pk).order_by("-id").first()


def _replay_headers(letter: DeadLetter, *, edited: bool, new_message: bool) -> dict[str, Any]:
    """The headers of ``letter``'s replay: of those it was stored with, only ``_EVENT_HEADERS`` (and
    its ``_BODY_MARKERS`` unless edited), a ``tracestate`` within what the consumer passes on; then
    the replay's own."""
    kept = _EVENT_HEADERS if not edited else tuple(h for h in _EVENT_HEADERS if h != claim_check.HEADER)
    kept += () if edited else _BODY_MARKERS
    headers = {name: letter.headers[name] for name in kept if name in letter.headers}
    if len(str(headers.get("tracestate", ""))) > MAX_TRACESTATE:
        del headers["tracestate"]  # as the consumer does on arrival: the trace is kept
    headers.update({ATTEMPT_HEADER: 1, "x-replayed-from": letter.pk})
    if new_message and letter.message_id:
        headers[REPLAY_OF_HEADER] = letter.message_id
    if letter.routing_key:
        headers["x-original-routing-key"] = letter.routing_key
    return headers


@dataclass(frozen=True)
class _Plan:
    """What replaying one dead letter publishes, or why it does not."""

    letter: DeadLetter
    edit: DeadLetterEdit | None
    message_id: str
    new_message: bool
    blocked: tuple[str, str] | None

    def refused(self) -> ReplayOutcome:
        assert self.blocked is not None
        code, note = self.blocked
        return ReplayOutcome(self.letter.pk, self.letter.consumer, self.letter.message_id or "-", False, note, code)

    def envelope(self) -> Envelope:
        letter = self.letter
        headers = _replay_headers(letter, edited=self.edit is not None, new_message=self.new_message)
        if self.edit is not None:
            headers[EDIT_HEADER] = self.edit.pk
        return Envelope(
            message_id=self.message_id,
            exchange="",
            routing_key=queue_name(letter.consumer),
            body=bytes(self.edit.body if self.edit is not None else letter.body),
            correlation_id=str(letter.properties.get("correlation_id") or letter.correlation_id or ""),
            headers=headers,
        )


def _plan(letter: DeadLetter, new_id: bool) -> _Plan:
    """An edited dead letter is always replayed as a new message: its edit is another message."""
    edit = latest_edit(letter)
    new_message = new_id or edit is not None
    message_id = _replay_message_id(letter, new_message, edit)
    return _Plan(letter, edit, message_id, new_message, _replay_block(letter, message_id, new_message))


@contextmanager
def _replay_publisher() -> Iterator[BatchPublisher]:
    with broker.connect() as connection:
        connection.connect()
        broker.declare_topology(connection)
        publisher = BatchPublisher(connection, setting("RELAY_CONFIRM_TIMEOUT"))
        try:
            yield publisher
        finally:
            publisher.close()


def dead_letter_replay(*, ids: list[int], new_id: bool = False) -> list[ReplayOutcome]:
    """Republish dead letters to their own consumer's queue (never to the other contexts).

    By default the message keeps its ``message_id``, so the inbox still protects against a
    double effect; ``new_id`` makes it a new message that will run again. An edited dead letter
    publishes its newest edit, always as a new message.
    """
    letters = list(DeadLetter.objects.filter(pk__in=ids).order_by("id"))
    missing = sorted(set(ids) - {letter.pk for letter in letters})
    outcomes = [ReplayOutcome(i, "-", "-", False, "no such dead letter", "no_such_dead_letter") for i in missing]
    if not letters:
        return outcomes
    retention = duration("INBOX_RETENTION")
    with _replay_publisher() as publisher:
        for letter in letters:
            outcomes.append(_replay_one(letter, new_id, publisher, retention))
    return outcomes


def _replay_one(letter: DeadLetter, new_id: bool, publisher: BatchPublisher, retention: timedelta) -> ReplayOutcome:
    plan = _plan(letter, new_id)
    if plan.blocked:
        return plan.refused()
    message_id = plan.message_id
    result = publisher.publish([plan.envelope()])
    if result.failed:
        return ReplayOutcome(letter.pk, letter.consumer, message_id, False, result.failed[message_id], "not_published")
    now = timezone.now()
    with transaction.atomic():
        DeadLetter.objects.filter(pk=letter.pk).update(replayed_at=now, replay_count=letter.replay_count + 1)
        if plan.edit is not None:
            DeadLetterEdit.objects.filter(pk=plan.edit.pk).update(replayed_as=message_id, replayed_at=now)
    note = f"as a new message {message_id}" if plan.new_message else ""
    if plan.edit is not None:
        note = f"edited (edit #{plan.edit.pk}): {note}"
    elif not new_id and now - letter.first_failed_at > retention:
        note = (
            "older than INBOX_RETENTION: if this consumer handled it before and its inbox row is "
            "purged, it will be handled again"
        )
    logger.info(
        "dead letter replayed",
        extra={
            "dead_letter_id": letter.pk,
            "consumer": letter.consumer,
            "message_id": message_id,
            "edit_id": plan.edit.pk if plan.edit else None,
        },
    )
    return ReplayOutcome(letter.pk, letter.consumer, message_id, True, note)


def dead_letter_replay_all(*, consumer: str | None = None, new_id: bool = False) -> list[ReplayOutcome]:
    """Replay every dead letter not replayed since it last failed."""
    ids = list(dead_letters_list(consumer=consumer).filter(replayed_at__isnull=True).values_list("pk", flat=True))
    return dead_letter_replay(ids=ids, new_id=new_id)


def dead_letter_purge(*, ids: list[int]) -> int:
    """Delete dead letters (their edits go with them); the number of dead letters deleted."""
    deleted = DeadLetter.objects.filter(pk__in=ids).delete()[1]
    return deleted.get(DeadLetter._meta.label, 0)


# --- edit: a new payload, checked as its consumer will check it, with its audit record ---------


class EditRefused(Exception):
    """An edit that is not accepted (nothing was changed); the message says why, on one line."""


def dead_letter_payload_text(letter: DeadLetter) -> str:
    """The payload a replay would publish now (the newest edit, else the body as received), for
    an operator to edit: JSON pretty-printed with sensitive fields masked (an edit that leaves a
    masked value as it is shown keeps the value), else the body as escaped text."""
    edit = latest_edit(letter)
    return _display(bytes(edit.body) if edit else received_payload(letter))


def dead_letter_edit(dead_letter_id: int, payload_text: str, *, by: str, via: str) -> DeadLetterEdit:
    """Record ``payload_text`` (a JSON object) as the payload a replay of the dead letter publishes.

    Refused (``EditRefused``, nothing changed) unless the dead letter is waiting (not replayed
    since it failed) and the message it would then be passes every check its consumer makes before
    a handler runs: its schema for its version (the message names the field), the upcasts to the
    version its reader reads, the envelope, the size, the producer. A sensitive field left masked
    as ``dead_letter_payload_text`` showed it keeps its value."""
    payload = _parsed(payload_text)
    # The payload as received, read before the transaction (a claim check's storage may be remote; a
    # dead letter's body and headers never change). Unreadable, the edit replaces it: its diff is
    # against the body as it arrived.
    unlocked = DeadLetter.objects.filter(pk=dead_letter_id).first()
    try:
        received = received_payload(unlocked) if unlocked is not None else b""
    except InvalidMessage:
        received = bytes(unlocked.body) if unlocked is not None else b""
    with transaction.atomic():
        letter = DeadLetter.objects.select_for_update().filter(pk=dead_letter_id).first()
        if letter is None:
            raise EditRefused(f"no dead letter {dead_letter_id}")
        if letter.replayed_at is not None:
            raise EditRefused(
                f"dead letter {letter.pk} was replayed at {letter.replayed_at:%Y-%m-%d %H:%M:%S}: only a waiting one "
                "is edited (a replay that fails again is a dead letter of its own)"
            )
        previous_edit = latest_edit(letter)
        previous = _decoded(bytes(previous_edit.body) if previous_edit else received)
        payload = _restore_masked(payload, previous, set(setting("SENSITIVE_FIELDS")))
        if _same_json(previous, payload):
            raise EditRefused("the payload is unchanged: nothing to record")
        body = encode_body(payload)
        if refusal := edit_refusal(letter, body):
            raise EditRefused(refusal)
        edit = DeadLetterEdit.objects.create(
            dead_letter=letter,
            edited_by=_text(by, 150) or "unknown",
            via=_text(via, 20),
            body=body,
            diff=payload_diff(previous, payload),
        )
    logger.info(
        "dead letter edited",
        extra={"dead_letter_id": letter.pk, "consumer": letter.consumer, "edit_id": edit.pk, "edited_by": by},
    )
    return edit


def _parsed(text: str) -> dict[str, Any]:
    def non_finite(constant: str) -> Any:
        raise EditRefused(f"the payload is not JSON: {constant} is no JSON number")

    try:
        payload = json.loads(text, parse_constant=non_finite)
    except ValueError as exc:
        raise EditRefused(f"the payload is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise EditRefused(f"the payload is not a JSON object (an event's payload is one): {type(payload).__name__}")
    return payload


def _decoded(raw: bytes) -> Any:
    """The payload of a body, or ``_NotJson`` (with the text) when it is not JSON."""
    try:
        return json.loads(raw)
    except ValueError:
        return _NotJson(raw.decode("utf-8", errors="backslashreplace"))


@dataclass(frozen=True)
class _NotJson:
    text: str


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON: 1 and 1.0 and True are three values here."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _restore_masked(new: Any, old: Any, sensitive: set[str]) -> Any:
    """``new`` with each sensitive value that is still the mask ``old``'s was shown as put back,
    and each encrypted value still as it was shown (``encrypted for ...``)."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {
            key: (
                old[key]
                if (key in sensitive and key in old and old[key] and value == mask_value(old[key]))
                or (is_encrypted(old.get(key)) and value == shown_encrypted(old[key]))
                else _restore_masked(value, old.get(key), sensitive)
            )
            for key, value in new.items()
        }
    if isinstance(new, list) and isinstance(old, list):
        return [_restore_masked(value, old[i] if i < len(old) else None, sensitive) for i, value in enumerate(new)]
    return new


def edit_refusal(letter: DeadLetter, body: bytes) -> str | None:
    """Why ``body`` may not replace ``letter``'s payload: the checks its consumer makes before a
    handler, on the message its replay would be (None when it passes them all)."""
    if len(body) > (limit := max_message_bytes()):
        return f"payload_too_large: the payload is {len(body)} bytes, over MAX_MESSAGE_BYTES ({limit})"
    if UNDECODABLE in letter.headers:
        return f"its headers could not be decoded when it arrived ({letter.headers[UNDECODABLE]}): no edit can fix them"
    if refused := _producer_refused(letter):
        return f"{refused}: it could never be replayed"
    headers = _replay_headers(letter, edited=True, new_message=True)
    # A replay of an edit always has a new message id: any well-formed one stands for it here.
    properties = {**letter.properties, "message_id": str(uuid.UUID(int=0))}
    try:
        event = parse_incoming(body, properties, headers, letter.routing_key)
    except InvalidMessage as exc:
        return f"{exc.reason}: {exc.detail}"
    if (event.event_type, event.schema_version) not in schemas():
        return f"no schema of {event.event_type} v{event.schema_version} is known here: an edit of it cannot be checked"
    # an encrypted field is judged by its reader's checks below, once decrypted
    if error := validation_error(
        event.event_type, event.schema_version, without_encrypted(event.payload), decoded_json=True
    ):
        return f"invalid_payload: {error}"
    if registry.handler_for(letter.consumer, event.event_type) is not None:  # its reader is here: its checks too
        try:
            prepare(letter.consumer, body, properties, headers, letter.routing_key)
        except Refused as refused_delivery:
            decision = refused_delivery.decision
            return f"{decision.reason}: {decision.error}"
    return None


def payload_diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """The changes from ``old`` to ``new``: ``{"op": "add"|"remove"|"replace", "path": <JSON
    pointer>, "old": ..., "new": ...}`` in path order, sensitive values masked."""
    changes: list[dict[str, Any]] = []
    _diff(old, new, [], changes)
    return changes


def _diff(old: Any, new: Any, path: list[str], changes: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            if key not in new:
                changes.append(_change("remove", [*path, key], old=old[key]))
            elif key not in old:
                changes.append(_change("add", [*path, key], new=new[key]))
            else:
                _diff(old[key], new[key], [*path, key], changes)
    elif isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            if i >= len(new):
                changes.append(_change("remove", [*path, str(i)], old=old[i]))
            elif i >= len(old):
                changes.append(_change("add", [*path, str(i)], new=new[i]))
            else:
                _diff(old[i], new[i], [*path, str(i)], changes)
    elif not _same_json(old, new):
        changes.append(_change("replace", path, old=old, new=new))


_ABSENT = object()


def _change(op: str, path: list[str], *, old: Any = _ABSENT, new: Any = _ABSENT) -> dict[str, Any]:
    change: dict[str, Any] = {"op": op, "path": "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)}
    sensitive = set(setting("SENSITIVE_FIELDS"))
    for name, value in (("old", old), ("new", new)):
        if value is _ABSENT:
            continue
        if isinstance(value, _NotJson):
            change[name] = f"(not JSON) {mask_text(value.text)[:500]}"
        elif sensitive & set(path):
            change[name] = mask_value(value) if value else value
        else:
            change[name] = mask_sensitive(value)
    return change


def describe_change(change: dict[str, Any]) -> str:
    """One line of a diff: ``~ /text: "old" -> "new"``, ``+ /path: new``, ``- /path: old``."""
    path = change["path"] or "(the payload)"

    def shown(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)

    if change["op"] == "add":
        return f"+ {path}: {shown(change['new'])}"
    if change["op"] == "remove":
        return f"- {path}: {shown(change['old'])}"
    return f"~ {path}: {shown(change['old'])} -> {shown(change['new'])}"


# --- redrive: many at once, by consumer, reason, event type and time --------------------------

REDRIVE_BATCH = 200  # dead letters read (bodies and all) at a time


@dataclass(frozen=True)
class DeadLetterSelection:
    """The waiting dead letters of a consumer, reason, event type and time range (all that are
    given); ``since`` (inclusive) and ``until`` (exclusive) bound when they last failed."""

    consumer: str | None = None
    reason: str | None = None
    event_type: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def unfiltered(self) -> bool:
        return all(value is None for value in (self.consumer, self.reason, self.event_type, self.since, self.until))

    def waiting(self) -> QuerySet[DeadLetter]:
        letters = DeadLetter.objects.filter(replayed_at__isnull=True)
        for name in ("consumer", "reason", "event_type"):
            if (value := getattr(self, name)) is not None:
                letters = letters.filter(**{name: value})
        if self.since is not None:
            letters = letters.filter(last_failed_at__gte=self.since)
        if self.until is not None:
            letters = letters.filter(last_failed_at__lt=self.until)
        return letters


@dataclass(frozen=True)
class SelectedGroup:
    consumer: str
    reason: str
    event_type: str
    count: int


@dataclass
class RedriveReport:
    """What a redrive replayed (or, in a dry run, would replay) and refused, by the refusal's code."""

    dry_run: bool
    matched: int = 0
    groups: list[SelectedGroup] = field(default_factory=list)
    replayed: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def count(self, outcome: ReplayOutcome) -> None:
        if outcome.replayed:
            self.replayed += 1
        else:
            self.refused[outcome.refusal or "refused"] += 1


def dead_letter_redrive(
    selection: DeadLetterSelection,
    *,
    new_id: bool = False,
    dry_run: bool = False,
    on_outcome: Callable[[ReplayOutcome], None] | None = None,
    batch_size: int = REDRIVE_BATCH,
) -> RedriveReport:
    """Replay every waiting dead letter ``selection`` names, ``batch_size`` at a time, each
    through the path ``dead_letter_replay`` takes (its checks, its new message for an edited one).

    ``dry_run``: no broker, nothing changed; the letters are counted by group and put through the
    same checks (``replayed`` then counts those that would go). Dead letters that fail after the
    redrive started (a replay failing again) are not taken up again by it."""
    letters = selection.waiting()
    top = letters.aggregate(top=Max("pk"))["top"]
    report = RedriveReport(dry_run=dry_run)
    if top is None:
        return report
    letters = letters.filter(pk__lte=top)
    report.groups = [
        SelectedGroup(row["consumer"], row["reason"], row["event_type"], row["count"])
        for row in letters.values("consumer", "reason", "event_type")
        .annotate(count=Count("id"))
        .order_by("consumer", "reason", "event_type")
    ]
    report.matched = sum(group.count for group in report.groups)
    retention = duration("INBOX_RETENTION")
    publishing: AbstractContextManager[BatchPublisher | None] = nullcontext() if dry_run else _replay_publisher()
    with publishing as publisher:
        for batch in _batches(letters, batch_size):
            for letter in batch:
                if publisher is None:
                    plan = _plan(letter, new_id)
                    outcome = (
                        plan.refused()
                        if plan.blocked
                        else ReplayOutcome(letter.pk, letter.consumer, plan.message_id, True, "would be replayed")
                    )
                else:
                    outcome = _replay_one(letter, new_id, publisher, retention)
                report.count(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
    return report


def _batches(letters: QuerySet[DeadLetter], size: int) -> Iterator[list[DeadLetter]]:
    """``letters`` by id, ``size`` at a time (never all in memory at once)."""
    last = 0
    while batch := list(letters.filter(pk__gt=last).order_by("pk")[:size]):
        yield batch
        last = batch[-1].pk


# --- grouped: how many by reason and event type ---------------------------------------------------


@dataclass(frozen=True)
class DeadLetterGroup:
    reason: str
    event_type: str
    waiting: int
    replayed: int
    last_failed_at: datetime

    @property
    def total(self) -> int:
        return self.waiting + self.replayed


def dead_letter_groups(letters: QuerySet[DeadLetter] | None = None) -> list[DeadLetterGroup]:
    """Dead letters (all, or ``letters``) counted per (reason, event type), those with the most
    waiting first."""
    letters = DeadLetter.objects.all() if letters is None else letters
    rows = (
        letters.values("reason", "event_type")
        .annotate(
            waiting=Count("id", filter=Q(replayed_at__isnull=True)),
            replayed=Count("id", filter=Q(replayed_at__isnull=False)),
            last=Max("last_failed_at"),
        )
        .order_by("-waiting", "-replayed", "reason", "event_type")
    )
    return [DeadLetterGroup(r["reason"], r["event_type"], r["waiting"], r["replayed"], r["last"]) for r in rows]
