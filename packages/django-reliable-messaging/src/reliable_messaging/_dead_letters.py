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
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q, QuerySet
from django.utils import timezone

from reliable_messaging import _broker as broker
from reliable_messaging import _registry as registry
from reliable_messaging._amqp_properties import COMPRESSED, OVERSIZED, UNDECODABLE
from reliable_messaging._conf import duration, max_message_bytes, queue_name, setting
from reliable_messaging._contracts import schemas, validation_error
from reliable_messaging._delivery_checks import Refused, prepare
from reliable_messaging._edge import MAX_COUNT, clamped_count
from reliable_messaging._envelope import ATTEMPT_HEADER, Envelope, InvalidMessage, encode_body, parse_incoming
from reliable_messaging._masking import mask_sensitive, mask_text, mask_value
from reliable_messaging._producers import producer_refusal
from reliable_messaging._publisher import BatchPublisher
from reliable_messaging.models import DeadLetter, DeadLetterEdit, InboxMessage

logger = logging.getLogger("reliable_messaging.dead_letters")

# Broker properties worth keeping (the headers are kept apart). ``user_id`` is the producer
# RabbitMQ validated on the delivery that was dead-lettered: a replay is checked against it.
_KEPT_PROPERTIES = ("message_id", "correlation_id", "content_type", "content_encoding", "delivery_mode", "user_id")


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
    """Store a dead letter; the same message dead-lettered again updates its row. ``attempts``
    is clamped to what the column holds: a forged count must not make the row unstorable."""
    now = timezone.now()
    attempts = clamped_count(attempts)
    message_id = _text(properties.get("message_id"), 255)
    fields: dict[str, Any] = {
        "event_type": _text(headers.get("event_type"), 200),
        "routing_key": _text(headers.get("x-original-routing-key") or routing_key, 255),
        "correlation_id": _text(properties.get("correlation_id"), 255),
        "reason": _text(reason, 100),
        "error": _text(error),
        "traceback": _text(traceback),
        "body": bytes(body),
        "headers": _json_safe(headers),
        "properties": {k: _json_safe(properties[k]) for k in _KEPT_PROPERTIES if properties.get(k) is not None},
        "last_failed_at": now,
        "replayed_at": None,  # failing again after a replay makes it a live dead letter again
    }
    with transaction.atomic():
        existing = (
            DeadLetter.objects.select_for_update().filter(consumer=consumer, message_id=message_id).first()
            if message_id
            else None
        )
        if existing:
            for name, value in fields.items():
                setattr(existing, name, value)
            existing.attempts = min(existing.attempts + attempts, MAX_COUNT)
            existing.save()
            letter = existing
        else:
            letter = DeadLetter.objects.create(
                consumer=consumer,
                message_id=message_id,
                attempts=attempts,
                first_failed_at=first_failed_at or now,
                **fields,
            )
    logger.error(
        "dead letter: %s",
        reason,
        extra={
            "consumer": consumer,
            "message_id": message_id or "-",
            "event_type": fields["event_type"],
            "correlation_id": fields["correlation_id"],
            "dead_letter_id": letter.pk,
            "error": error[:500],
        },
    )
    return letter


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

# Headers that describe a failed delivery, not the event: a replay starts afresh without them.
_DELIVERY_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason")
# Marks of a body the consumer did not take whole (a prefix of an oversized one, a compressed
# one): an edited body is whole, so its replay goes without them.
_BODY_MARKERS = (OVERSIZED, COMPRESSED)
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
    """The body for people: JSON pretty-printed with sensitive fields masked, else escaped text."""
    return _display(bytes(letter.body))


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
    dropped = _DELIVERY_HEADERS + (_BODY_MARKERS if edited else ())
    headers = {k: v for k, v in letter.headers.items() if k not in dropped}
    headers.update({ATTEMPT_HEADER: 1, "x-replayed-from": letter.pk})
    if new_message and letter.message_id:
        headers[REPLAY_OF_HEADER] = letter.message_id
    if letter.routing_key:
        headers.setdefault("x-original-routing-key", letter.routing_key)
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
    return _display(bytes(edit.body if edit else letter.body))


def dead_letter_edit(dead_letter_id: int, payload_text: str, *, by: str, via: str) -> DeadLetterEdit:
    """Record ``payload_text`` (a JSON object) as the payload a replay of the dead letter publishes.

    Refused (``EditRefused``, nothing changed) unless the dead letter is waiting (not replayed
    since it failed) and the message it would then be passes every check its consumer makes before
    a handler runs: its schema for its version (the message names the field), the upcasts to the
    version its reader reads, the envelope, the size, the producer. A sensitive field left masked
    as ``dead_letter_payload_text`` showed it keeps its value."""
    payload = _parsed(payload_text)
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
        previous = _decoded(bytes(previous_edit.body if previous_edit else letter.body))
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
    """``new`` with each sensitive value that is still the mask ``old``'s was shown as put back."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {
            key: (
                old[key]
                if key in sensitive and key in old and old[key] and value == mask_value(old[key])
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
    if error := validation_error(event.event_type, event.schema_version, event.payload, decoded_json=True):
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
