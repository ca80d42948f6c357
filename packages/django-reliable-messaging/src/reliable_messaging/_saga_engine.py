"""Running saga instances: every move is one conditional UPDATE on (id, version) and one history
row, in the caller's transaction (a handler's): the loser of a race raises ``TransientError`` and
its message is read again. A reply moves an instance only from the step that expects it; any
other (a duplicate, a late or reordered reply) changes nothing."""

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from reliable_messaging._decisions import TransientError
from reliable_messaging._outbox import publish
from reliable_messaging._saga_definitions import Definition, definition
from reliable_messaging._saga_steps import STEP_KEY
from reliable_messaging._scheduled import cancel_scheduled
from reliable_messaging._sql import insert_rows
from reliable_messaging.models import SagaInstance, SagaTransition

logger = logging.getLogger("reliable_messaging.sagas")

# The state of an instance made, before its first move.
STARTED = "started"
# Why a reply, though expected, is not this instance's (another amount, say): "" when it is.
Check = Callable[[SagaInstance], str]


@transaction.atomic(savepoint=False)
def start(name: str, key: str, data: dict[str, Any], *, cause: str) -> SagaInstance:
    """Start ``name`` (its newest version) for ``key`` and send its first command; an instance of
    that key already there (started, or stopped before it began) is returned unchanged."""
    saga = definition(name)
    new = SagaInstance(
        name=name,
        key=key,
        definition_version=saga.version,
        state=STARTED,
        data=data,
        step_keys=saga.new_step_keys(),
    )
    if not _insert(new):
        instance = SagaInstance.objects.get(name=name, key=key)
        logger.info("saga %s %s already there: %s", name, key, instance.state)
        return instance
    _move(saga, new, saga.start, cause=cause)
    return new


@transaction.atomic(savepoint=False)
def reply(name: str, key: str, event_type: str, *, check: Check | None = None) -> SagaInstance | None:
    """A participant's reply: move the instance if its step expects it, else change nothing."""
    instance = SagaInstance.objects.filter(name=name, key=key).first()
    if instance is None:
        return None
    saga = _definition_of(instance)
    step = saga.steps.get(instance.state)
    move = step.move(event_type) if step else None
    if move is None:
        logger.info("%s ignored: saga %s %s is %s", event_type, name, key, instance.state)
        return instance
    if check is not None and (problem := check(instance)):
        logger.warning("%s ignored, not saga %s %s's: %s", event_type, name, key, problem)
        return instance
    _move(saga, instance, move.to, cause=event_type, reason=move.reason)
    return instance


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
    if waiting.compensation or attempt < waiting.attempts:
        _move(saga, instance, step, cause=cause)  # the same command, the same key, one attempt more
        return
    if waiting.undo:
        _send(saga, instance, waiting.undo, reason="timeout")
    _move(saga, instance, waiting.given_up, cause=cause, reason="timeout")


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
    _move(saga, instance, to, cause=cause)


def tombstone(name: str, key: str, *, state: str) -> bool:
    """With no instance of ``key`` yet, leave one in ``state`` (final) so that a later start
    does nothing: the host's end overtook the start. False if an instance was there."""
    saga = definition(name)
    if state not in saga.ends:
        raise ValueError(f"saga {name}: {state!r} is not a final state")
    return _insert(SagaInstance(name=name, key=key, definition_version=saga.version, state=state))


def _insert(instance: SagaInstance) -> bool:
    """Insert ``instance`` unless one of its (name, key) is there: one statement; False if one was."""
    row = {field.attname: getattr(instance, field.attname) for field in SagaInstance._meta.concrete_fields}
    return bool(insert_rows(SagaInstance, [row], ignore_conflict_on=("name", "key"), returning="id"))


def _definition_of(instance: SagaInstance) -> Definition:
    """The version the instance started with: a definition changed meanwhile runs new instances only."""
    return definition(instance.name, instance.definition_version)


def _move(saga: Definition, instance: SagaInstance, to: str, *, cause: str, reason: str = "") -> None:
    """Move ``instance`` to ``to`` if nobody moved it since it was read, and do what ``to`` does:
    send its step's command (with a new deadline) or its final command."""
    if instance.deadline_id is not None:
        cancel_scheduled(instance.deadline_id)
    attempt = instance.attempt + 1 if to == instance.state else (1 if to in saga.steps else 0)
    instance.failure_reason = instance.failure_reason or reason
    data = {f: v for f, v in instance.data.items() if f not in saga.kept_while or to in saga.kept_while[f]}
    changes: dict[str, Any] = {"state": to, "attempt": attempt, "deadline_id": None, "data": data}
    changes["failure_reason"] = instance.failure_reason
    if to in saga.steps:
        changes["deadline_id"] = _send_step(saga, instance, to, attempt)
    elif saga.ends.get(to):
        _send(saga, instance, saga.ends[to], reason=instance.failure_reason)
    now = timezone.now()
    if to != instance.state:
        changes["step_since"] = now
    moved = SagaInstance.objects.filter(pk=instance.pk, version=instance.version).update(
        **changes, version=F("version") + 1, updated_at=now
    )
    if moved != 1:
        raise TransientError(f"saga {instance.name} {instance.key} moved meanwhile (version {instance.version})")
    SagaTransition.objects.create(
        saga=instance, from_state=instance.state, to_state=to, cause=cause[:255], version=instance.version + 1, at=now
    )
    for name, value in changes.items():
        setattr(instance, name, value)
    instance.version += 1


def _send_step(saga: Definition, instance: SagaInstance, state: str, attempt: int) -> uuid.UUID:
    """The step's command, then its deadline (scheduled); the deadline's id, to cancel it."""
    step = saga.steps[state]
    _send(saga, instance, step.command, reason=instance.failure_reason)
    return _publish(
        saga,
        instance,
        saga.deadline_event,
        {saga.key_field: instance.key, "step": state, "attempt": attempt},
        deliver_at=timezone.now() + timedelta(seconds=step.deadline),
    )


def _send(saga: Definition, instance: SagaInstance, command: str, *, reason: str) -> None:
    """One command, built by the host; a step's or an undo's carries its step key."""
    payload = {saga.key_field: instance.key, **saga.build(command, instance.data, reason)}
    if command in instance.step_keys:
        payload[STEP_KEY] = instance.step_keys[command]
    _publish(saga, instance, command, payload)


def _publish(
    saga: Definition, instance: SagaInstance, event_type: str, payload: dict[str, Any], **kw: Any
) -> uuid.UUID:
    return publish(
        event_type=event_type,
        aggregate_type=f"{saga.name}_saga",
        aggregate_id=instance.key,
        correlation_id=instance.key,
        payload=payload,
        **kw,
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
