"""Messaging's tables: the outbox, the inbox, the event log, the dead letters and the sagas.

Contexts never touch these models directly; they go through ``reliable_messaging.api``.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from reliable_messaging._ids import new_event_id


class OutboxMessage(models.Model):
    """An event written in the same transaction as the change it describes.

    The relay publishes it (``event_id`` becomes the AMQP ``message_id``) and sets
    ``published_at`` once the broker has confirmed it. Rows the broker keeps refusing are
    parked after ``RELAY_MAX_ATTEMPTS`` and wait for an operator; none is ever dropped.
    """

    event_id = models.UUIDField(unique=True, default=new_event_id, editable=False)
    source = models.CharField(max_length=50, help_text="The context that produced the event.")
    aggregate_type = models.CharField(max_length=100)
    aggregate_id = models.CharField(max_length=100)
    event_type = models.CharField(max_length=200, help_text="Also the routing key.")
    schema_version = models.PositiveSmallIntegerField(default=1)
    correlation_id = models.CharField(
        max_length=100,
        help_text="Ties one saga's events together: an id its producer chose (an order id, a SKU).",
    )
    causation_id = models.CharField(max_length=255, blank=True, help_text="The message that caused this one.")
    traceparent = models.CharField(max_length=100, blank=True)
    # W3C tracestate of the span the event was written in (vendors' entries, up to 512 characters).
    tracestate = models.CharField(max_length=512, blank=True, db_default="")
    payload = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, help_text="When the event occurred.")
    published_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="Failed publication attempts.")
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    parked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "messaging_outbox"
        indexes = [
            # The relay's claim walks only this small index, however many published rows
            # the table keeps.
            models.Index(
                fields=["created_at", "id"],
                name="outbox_pending_idx",
                condition=Q(published_at__isnull=True, parked_at__isnull=True),
            ),
            models.Index(fields=["correlation_id", "created_at"], name="outbox_correlation_idx"),
            models.Index(fields=["published_at"], name="outbox_published_idx", condition=Q(published_at__isnull=False)),
            # Parked rows are few; without this, counting them (every /metrics scrape) scans the table.
            models.Index(
                fields=["created_at"],
                name="outbox_parked_idx",
                condition=Q(published_at__isnull=True, parked_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id}"

    @property
    def state(self) -> str:
        if self.published_at:
            return "published"
        if self.parked_at:
            return "parked"
        return "pending"


class ScheduledMessage(models.Model):
    """An event published now for delivery at or after ``deliver_at`` (``publish(deliver_at=...)``).

    Written in the publisher's transaction like an outbox row, and kept apart from the outbox so
    the relay's claim never walks past messages that are not due. Once due, the relay moves it
    into the outbox (same ``event_id``, one transaction: moved once, whichever relay does it),
    from where it is published as any other event, with ``deliver_at`` as its time of
    occurrence (a timer fires when it is due; the outbox's age and backlog then count from it).
    ``cancel_scheduled(event_id)`` deletes it while it is still here.
    """

    event_id = models.UUIDField(unique=True, editable=False)
    source = models.CharField(max_length=50)
    aggregate_type = models.CharField(max_length=100)
    aggregate_id = models.CharField(max_length=100)
    event_type = models.CharField(max_length=200)
    schema_version = models.PositiveSmallIntegerField(default=1)
    # The outbox's lengths exactly: a row accepted here is one the outbox accepts when it moves.
    correlation_id = models.CharField(max_length=100, db_index=True)
    causation_id = models.CharField(max_length=255, blank=True)
    traceparent = models.CharField(max_length=100, blank=True)
    tracestate = models.CharField(max_length=512, blank=True)
    payload = models.JSONField()
    created_at = models.DateTimeField(help_text="When it was scheduled.")
    deliver_at = models.DateTimeField(
        db_index=True, help_text="Published at or after this time, which becomes its occurred_at."
    )

    class Meta:
        db_table = "messaging_scheduled"
        ordering = ["deliver_at"]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} at {self.deliver_at:%Y-%m-%d %H:%M:%S}"


class InboxMessage(models.Model):
    """A message a consumer has handled, written in the same transaction as the handling."""

    consumer = models.CharField(max_length=50)
    message_id = models.CharField(max_length=255)
    event_type = models.CharField(max_length=200, blank=True)
    correlation_id = models.CharField(max_length=100, blank=True)
    handled_at = models.DateTimeField(default=timezone.now)
    # sha256 of what was handled (``IncomingEvent.content_hash``): the same id arriving with other
    # content is a reused id, not a duplicate (seed 003's request hash). "" for rows of older releases.
    content_hash = models.CharField(max_length=64, blank=True, db_default="")

    class Meta:
        db_table = "messaging_inbox"
        constraints = [models.UniqueConstraint(fields=["consumer", "message_id"], name="inbox_consumer_message_uniq")]
        indexes = [
            models.Index(fields=["message_id"], name="inbox_message_idx"),
            models.Index(fields=["correlation_id"], name="inbox_correlation_idx"),
            models.Index(fields=["handled_at"], name="inbox_handled_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.consumer}: {self.message_id}"


class EventLogEntry(models.Model):
    """Every event seen on the bus, recorded by the ``events`` consumer for the timeline.

    Kept longer than the outbox; ``SENSITIVE_FIELDS`` are stored masked.
    """

    message_id = models.CharField(max_length=255, unique=True)
    event_type = models.CharField(max_length=200)
    schema_version = models.PositiveSmallIntegerField(default=1)
    correlation_id = models.CharField(max_length=100, blank=True)
    causation_id = models.CharField(max_length=255, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)
    payload = models.JSONField(default=dict)

    class Meta:
        db_table = "messaging_event_log"
        verbose_name = "event log entry"
        verbose_name_plural = "event log entries"
        indexes = [
            models.Index(fields=["correlation_id", "occurred_at"], name="eventlog_correlation_idx"),
            models.Index(fields=["recorded_at"], name="eventlog_recorded_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id}"


class DeadLetter(models.Model):
    """A message a consumer could not handle, kept (with its reason) until an operator purges it."""

    consumer = models.CharField(max_length=50)
    message_id = models.CharField(max_length=255, blank=True)
    event_type = models.CharField(max_length=200, blank=True)
    routing_key = models.CharField(max_length=255, blank=True)
    correlation_id = models.CharField(max_length=255, blank=True)
    reason = models.CharField(max_length=100)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    body = models.BinaryField()
    headers = models.JSONField(default=dict)
    properties = models.JSONField(default=dict)
    attempts = models.PositiveIntegerField(default=1)
    first_failed_at = models.DateTimeField(default=timezone.now)
    last_failed_at = models.DateTimeField(default=timezone.now)
    replayed_at = models.DateTimeField(null=True, blank=True)
    replay_count = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "messaging_dead_letter"
        indexes = [
            models.Index(fields=["consumer", "last_failed_at"], name="deadletter_consumer_idx"),
            models.Index(fields=["correlation_id"], name="deadletter_correlation_idx"),
            models.Index(fields=["message_id"], name="deadletter_message_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.consumer}: {self.reason} ({self.message_id or '-'})"


class DeadLetterEdit(models.Model):
    """An operator's edit of a dead letter's payload, and its audit record.

    The dead letter keeps the body it was received with; its newest edit is what a replay
    publishes, as a new message (``replayed_as``). ``diff`` lists the changes from the payload
    before this edit (sensitive fields masked); ``body`` is the edited payload exactly as it was
    validated and as it is published. Deleted with its dead letter.
    """

    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.CASCADE, related_name="edits")
    edited_by = models.CharField(max_length=150, help_text="The admin user, or the OS user (or --by) of the command.")
    via = models.CharField(max_length=20, help_text="admin or command")
    edited_at = models.DateTimeField(default=timezone.now)
    body = models.BinaryField(help_text="The edited payload, as validated and as a replay publishes it.")
    diff = models.JSONField(default=list, help_text="The changes, as JSON pointers: op, path, old, new (masked).")
    replayed_as = models.CharField(
        max_length=255, blank=True, help_text="The message id its replay was published with."
    )
    replayed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "messaging_dead_letter_edit"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"edit #{self.pk} of dead letter #{self.dead_letter_id} by {self.edited_by}"


class DeadLetterFlood(models.Model):
    """Refusals of hostile input counted per consumer, reason and window (``DEAD_LETTER_FLOOD_WINDOW``).

    The first ``DEAD_LETTER_FLOOD_LIMIT`` of a window are stored in full as dead letters; the
    others only add to ``received``: a flood of bogus messages leaves a bounded table, and a count
    of every message it held.
    """

    consumer = models.CharField(max_length=50)
    reason = models.CharField(max_length=100)
    window_start = models.DateTimeField()
    received = models.PositiveBigIntegerField(default=0, help_text="Refusals of this window, stored or not.")
    stored = models.PositiveBigIntegerField(default=0, help_text="Of those, stored in full as dead letters.")
    last_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "messaging_dead_letter_flood"
        constraints = [
            models.UniqueConstraint(fields=["consumer", "reason", "window_start"], name="deadletter_flood_window_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.consumer}: {self.reason} from {self.window_start:%Y-%m-%d %H:%M}"

    @property
    def not_stored(self) -> int:
        return self.received - self.stored


class SagaInstance(models.Model):
    """One run of a saga definition (reliable_messaging.sagas): its state, moved only by a
    conditional update on ``version``, and the definition version it started with."""

    id = models.UUIDField(primary_key=True, default=new_event_id, editable=False)
    name = models.CharField(max_length=100, help_text="The definition's name.")
    key = models.CharField(max_length=100, help_text="The host's id of what it runs for; also its correlation id.")
    definition_version = models.PositiveIntegerField(help_text="The definition it keeps while in flight.")
    state = models.CharField(max_length=100)
    version = models.PositiveIntegerField(default=1)
    # The step waiting for a reply: how many times its command was sent, and its deadline's
    # scheduled message (cancelled when the reply comes).
    attempt = models.PositiveSmallIntegerField(default=0)
    deadline_id = models.UUIDField(null=True, blank=True)
    step_keys = models.JSONField(default=dict, help_text="One idempotency key per command, made at the start.")
    data = models.JSONField(default=dict, help_text="What the host's commands are built from.")
    failure_reason = models.CharField(max_length=100, blank=True)
    step_since = models.DateTimeField(default=timezone.now, help_text="When it entered its state (not by a retry).")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "messaging_saga"
        constraints = [models.UniqueConstraint(fields=["name", "key"], name="messaging_saga_key_uniq")]
        indexes = [models.Index(fields=["name", "state", "step_since"], name="messaging_saga_state_idx")]

    def __str__(self) -> str:
        return f"{self.name} {self.key}: {self.state}"


class SagaTransition(models.Model):
    """One move of a saga: from, to, the message that caused it and the version it produced."""

    saga = models.ForeignKey(SagaInstance, related_name="transitions", on_delete=models.CASCADE)
    from_state = models.CharField(max_length=100)
    to_state = models.CharField(max_length=100)
    cause = models.CharField(max_length=255, help_text="The message or deadline that moved it.")
    version = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "messaging_saga_transition"
        ordering = ["saga", "version"]
        constraints = [models.UniqueConstraint(fields=["saga", "version"], name="messaging_saga_move_uniq")]

    def __str__(self) -> str:
        return f"{self.from_state} -> {self.to_state}"


class StepKey(models.Model):
    """A saga command's step key as a participant handled it first: a command arriving again with
    that key (another message id: sent again after its deadline) runs no handler; what the first
    caused is published again."""

    event_type = models.CharField(max_length=200)
    key = models.CharField(max_length=100)
    message_id = models.CharField(max_length=255, help_text="The command first handled with this key.")
    handled_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "messaging_step_key"
        constraints = [models.UniqueConstraint(fields=["event_type", "key"], name="messaging_step_key_uniq")]
        indexes = [models.Index(fields=["handled_at"], name="messaging_step_key_at_idx")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.key}"


class SubjectKey(models.Model):
    """A data subject's own key, for the fields contexts declare ``[personal]``
    (reliable_messaging._subject_keys): created by the first ``publish`` about the subject,
    stored wrapped under ``ENCRYPTION_KEYS``, found by a keyed digest of the subject (never the
    subject in clear). ``erase_subject`` blanks the key and the digest and keeps the id, so every
    copy of what it sealed is unreadable and a message naming it is refused as erased."""

    key_id = models.CharField(max_length=40, primary_key=True)
    subject_digest = models.CharField(max_length=64, unique=True, null=True, help_text="HMAC-SHA256 of the subject.")
    wrapped = models.TextField(
        blank=True, help_text="The key, sealed under ENCRYPTION_KEYS[wrap_kid]; empty once erased."
    )
    wrap_kid = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "messaging_subject_key"

    def __str__(self) -> str:
        return f"{self.key_id}{' (erased)' if self.erased_at else ''}"
