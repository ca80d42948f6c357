"""Running saga instances, a run of starts or replies at a time (a handler's run; one message is
a run of one): the run's instances read in one statement, and its moves written together, in the
caller's transaction: one conditional UPDATE on (id, version) for them all and a history row
each. The loser of a race raises ``TransientError`` and its messages are read again, each alone.
A reply moves an instance only from the step that expects it; any other (a duplicate, a late or
reordered reply) changes nothing."""

import logging
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from reliable_messaging._decisions import TransientError
from reliable_messaging._outbox import event_row, publish
from reliable_messaging._runs import Turn
from reliable_messaging._saga_definitions import Definition, definition
from reliable_messaging._saga_steps import STEP_KEY
from reliable_messaging._sql import insert_rows, update_rows
from reliable_messaging.models import OutboxMessage, SagaInstance, SagaTransition, ScheduledMessage

logger = logging.getLogger("reliable_messaging.sagas")

# The state of an instance made, before its first move.
STARTED = "started"
# Why a reply, though expected, is not this instance's (another amount, say): "" when it is.
Check = Callable[[SagaInstance], str]


@dataclass(frozen=True)
class Reply:
    """A participant's reply to the instance of ``key``; ``check(instance)``: why it is not that
    instance's, though its step expects it (another amount, say), or ""."""

    key: str
    event_type: str
    check: Check | None = None


def _alone(n: int) -> AbstractContextManager[None]:
    return nullcontext()


@transaction.atomic(savepoint=False)
def start(
    name: str, starts: Sequence[tuple[str, dict[str, Any]]], *, cause: str, turn: Turn = _alone
) -> list[SagaInstance]:
    """Start ``name`` (its newest version) for each (key, data), in turn (``turn(n)``: where the
    n-th one's first command is sent), and send its first command; an instance of that key
    already there (started, or stopped before it began) is returned unchanged. The instances,
    in order. One insert for them all, then their first moves (``_Moves``)."""
    saga = definition(name)
    new = [
        SagaInstance(
            name=name,
            key=key,
            definition_version=saga.version,
            state=STARTED,
            data=data,
            step_keys=saga.new_step_keys(),
        )
        for key, data in starts
    ]
    inserted = _insert(new)
    others = {instance.key for instance in new if instance.pk not in inserted}
    there = {i.key: i for i in SagaInstance.objects.filter(name=name, key__in=others)} if others else {}
    moves, instances = _Moves(), []
    for n, instance in enumerate(new):
        if instance.pk not in inserted:
            instance = there[instance.key]
            logger.info("saga %s %s already there: %s", name, instance.key, instance.state)
        else:
            with turn(n):
                moves.add(saga, instance, saga.start, cause=cause)
        instances.append(instance)
    moves.write()
    return instances


@transaction.atomic(savepoint=False)
def reply(name: str, replies: Sequence[Reply], *, turn: Turn = _alone) -> list[SagaInstance | None]:
    """Participants' replies, in turn (``turn(n)``: where the n-th one's move sends its
    commands): each moves its instance if its step expects it, else changes nothing. Each
    reply's instance as the run left it (None: none of its key), in order. The instances read
    in one statement, the moves written together (``_Moves``)."""
    found = {i.key: i for i in SagaInstance.objects.filter(name=name, key__in={r.key for r in replies})}
    moves, instances = _Moves(), []
    for n, answer in enumerate(replies):
        instance = found.get(answer.key)
        instances.append(instance)
        if instance is None:
            continue
        saga = _definition_of(instance)
        step = saga.steps.get(instance.state)
        move = step.move(answer.event_type) if step else None
        if move is None:
            logger.info("%s ignored: saga %s %s is %s", answer.event_type, name, answer.key, instance.state)
            continue
        if answer.check is not None and (problem := answer.check(instance)):
            logger.warning("%s ignored, not saga %s %s's: %s", answer.event_type, name, answer.key, problem)
            continue
        with turn(n):
            moves.add(saga, instance, move.to, cause=answer.event_type, reason=move.reason)
    moves.write()
    return instances


@transaction.atomic(savepoint=False)
def deadline(name: str, key: str, *, step: str, attempt: int) -> None:
    """A step's deadline: if that step still waits with that attempt, send it again or give it up
    (its undo sent at once, compensation going on from its ``given_up`` state)."""
    instance = SagaInstance.objects.filter(name=name, key=key).first()
    if instance is None or instance.state != step or instance.attempt != attempt:
        return  # answered meanwhile, or an older attempt's deadline
    saga = _definition_of(instance)
    waiting = saga.steps[step]
    cause = f"{saga.deadline_event} (attempt {attempt})"
    moves = _Moves()
    if waiting.compensation or attempt < waiting.attempts:
        moves.add(saga, instance, step, cause=cause)  # the same command, the same key, one attempt more
    else:
        if waiting.undo:
            _send(saga, instance, waiting.undo, reason="timeout")
        moves.add(saga, instance, waiting.given_up, cause=cause, reason="timeout")
    moves.write()


def instance_of(name: str, key: str) -> SagaInstance | None:
    """The instance of ``name`` for ``key``, as a host reads it before it decides to ``stop`` it."""
    return SagaInstance.objects.filter(name=name, key=key).first()


@transaction.atomic(savepoint=False)
def stop(instance: SagaInstance, *, to: str, cause: str, undo: tuple[str, ...] = ()) -> None:
    """The host ends an instance it read from outside (its own deadline, a cancellation): to
    ``to``, a final state, sending first the ``undo`` commands named (with their step keys,
    unanswered). The host decides from the state it read; a move meanwhile fails the move."""
    saga = _definition_of(instance)
    if to not in saga.ends:
        raise ValueError(f"saga {instance.name}: {to!r} is not a final state")
    for command in undo:
        _send(saga, instance, command, reason=instance.failure_reason)
    moves = _Moves()
    moves.add(saga, instance, to, cause=cause)
    moves.write()


def tombstone(name: str, key: str, *, state: str) -> bool:
    """With no instance of ``key`` yet, leave one in ``state`` (final) so that a later start
    does nothing: the host's end overtook the start. False if an instance was there."""
    saga = definition(name)
    if state not in saga.ends:
        raise ValueError(f"saga {name}: {state!r} is not a final state")
    return bool(_insert([SagaInstance(name=name, key=key, definition_version=saga.version, state=state)]))


def _insert(instances: list[SagaInstance]) -> set[uuid.UUID]:
    """Insert each instance unless one of its (name, key) is there (or earlier in the list): one
    statement; the ids of those inserted."""
    fields = SagaInstance._meta.concrete_fields
    rows = [{field.attname: getattr(instance, field.attname) for field in fields} for instance in instances]
    inserted = insert_rows(SagaInstance, rows, ignore_conflict_on=("name", "key"), returning="id")
    return {i if isinstance(i, uuid.UUID) else uuid.UUID(i) for i in inserted}


def _definition_of(instance: SagaInstance) -> Definition:
    """The version the instance started with: a definition changed meanwhile runs new instances only."""
    return definition(instance.name, instance.definition_version)


# The fields a move writes, besides its version and time.
_MOVED = ("state", "attempt", "deadline_id", "data", "failure_reason", "step_since")


@dataclass
class _Move:
    instance: SagaInstance
    version: int  # the version it was read with: the update's condition
    from_state: str
    changes: dict[str, Any]
    before: dict[str, Any]  # what ``changes`` replaced, put back if the move fails
    cause: str


class _Moves:
    """Moves decided one after another and written together: the deadlines they leave
    cancelled in one DELETE, every instance moved by one UPDATE on (id, version) (``update_rows``;
    the loser of a race, any instance moved meanwhile, raises ``TransientError`` for the lot) and
    their history in one insert; so a run of replies costs what one does. What each move sends
    (commands, deadlines) is published as it is decided, in its turn."""

    def __init__(self) -> None:
        self.pending: dict[uuid.UUID, _Move] = {}
        self.deadlines: list[dict[str, Any]] = []  # the new deadlines' rows

    def add(self, saga: Definition, instance: SagaInstance, to: str, *, cause: str, reason: str = "") -> None:
        """Move ``instance`` to ``to`` (at ``write``), and do what ``to`` does: send its step's
        command (with a new deadline) or its final command. The instance reads as moved at once."""
        if instance.pk in self.pending:  # moved twice in a run: the first move written first
            self.write()
        before = {name: getattr(instance, name) for name in _MOVED}
        attempt = instance.attempt + 1 if to == instance.state else (1 if to in saga.steps else 0)
        instance.failure_reason = instance.failure_reason or reason
        kept = saga.kept_while
        data = {f: v for f, v in instance.data.items() if f not in kept or to in kept[f]}
        changes: dict[str, Any] = {"state": to, "attempt": attempt, "deadline_id": None, "data": data}
        changes["failure_reason"] = instance.failure_reason
        if to in saga.steps:
            _send(saga, instance, saga.steps[to].command, reason=instance.failure_reason)
            deadline = _deadline_row(saga, instance, to, attempt)
            self.deadlines.append(deadline)
            changes["deadline_id"] = deadline["event_id"]
        elif saga.ends.get(to):
            _send(saga, instance, saga.ends[to], reason=instance.failure_reason)
        changes["step_since"] = timezone.now() if to != instance.state else instance.step_since
        self.pending[instance.pk] = _Move(instance, instance.version, instance.state, changes, before, cause)
        for name, value in changes.items():
            setattr(instance, name, value)
        instance.version += 1

    def write(self) -> None:
        moves, self.pending = list(self.pending.values()), {}
        deadlines, self.deadlines = self.deadlines, []
        if not moves:
            return
        for model in (ScheduledMessage, OutboxMessage):  # a deadline already due goes out at once
            insert_rows(model, [row for row in deadlines if ("deliver_at" in row) == (model is ScheduledMessage)])
        if cancelled := [m.before["deadline_id"] for m in moves if m.before["deadline_id"] is not None]:
            ScheduledMessage.objects.filter(event_id__in=cancelled).delete()
        now = timezone.now()
        rows = [{"id": m.instance.pk, "version": m.version, **m.changes, "updated_at": now} for m in moves]
        moved = update_rows(SagaInstance, rows, where=("id", "version"), bump="version")
        if moved != len(moves):
            for m in moves:  # each instance as it was read
                m.instance.__dict__.update(m.before, version=m.version)
            raced = ", ".join(f"{m.instance.key} (version {m.version})" for m in moves)
            raise TransientError(f"saga {moves[0].instance.name}: moved meanwhile, one of {raced}")
        SagaTransition.objects.bulk_create(
            SagaTransition(
                saga=m.instance, from_state=m.from_state, to_state=m.changes["state"], cause=m.cause[:255],
                version=m.version + 1, at=now,
            )
            for m in moves
        )  # fmt: skip
        for m in moves:
            m.instance.updated_at = now


def _deadline_row(saga: Definition, instance: SagaInstance, state: str, attempt: int) -> dict[str, Any]:
    """The step's deadline, a scheduled message, as a row to write (its ``event_id`` cancels it)."""
    return event_row(
        event_type=saga.deadline_event,
        aggregate_type=f"{saga.name}_saga",
        aggregate_id=instance.key,
        correlation_id=instance.key,
        payload={saga.key_field: instance.key, "step": state, "attempt": attempt},
        deliver_at=timezone.now() + timedelta(seconds=saga.steps[state].deadline),
    )


def _send(saga: Definition, instance: SagaInstance, command: str, *, reason: str) -> None:
    """One command, built by the host; a step's or an undo's carries its step key."""
    payload = {saga.key_field: instance.key, **saga.build(command, instance.data, reason)}
    if command in instance.step_keys:
        payload[STEP_KEY] = instance.step_keys[command]
    publish(
        event_type=command,
        aggregate_type=f"{saga.name}_saga",
        aggregate_id=instance.key,
        correlation_id=instance.key,
        payload=payload,
    )


def versions_not_runnable(using: str = "default") -> list[str]:
    """Each (saga, definition version) with instances in flight that no registered definition
    runs: a host that changed a definition must keep the older version registered until its
    instances end (in flight: not in a final state of the newest version)."""
    missing = []
    rows = SagaInstance.objects.using(using).values_list("name", "definition_version", "state").distinct()
    for name, version, state in rows.order_by("name", "definition_version"):
        try:
            definition(name, version)
        except LookupError:
            newest = _newest_ends(name)
            if state not in newest and f"{name} v{version}" not in missing:
                missing.append(f"{name} v{version}")
    return missing


def _newest_ends(name: str) -> set[str]:
    try:
        return set(definition(name).ends)
    except LookupError:
        return set()
