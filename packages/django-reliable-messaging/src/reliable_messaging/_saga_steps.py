"""A participant's side of a saga: step keys enforced by the bus, not by the participant's code.

A command a saga engine sends carries its step's key in the payload (``STEP_KEY``): the same on
every send of that step, a new message id each time. A handler marked ``@participant`` runs once
per (command, key): the key is recorded in the handler's own transaction with the message it
came with; a command arriving again with that key runs nothing and publishes again, as they were
(same message ids), the messages the first one caused, whenever they were written (an answer a
worker of the participant wrote later, under ``caused_by``, included). Every consumer that had
them finds their ids in its inbox: the first answer stands, nothing happens twice.

An undo goes with its step's key (the engine sends both under one), and its handler names the
command it undoes (``@participant(undoes=...)``): the undo records that key for the step too, a
fence, so the step arriving after its undo (sent before its deadline, delivered late or out of
order) runs nothing. Without it a late step would do what its undo already undid for good."""

import functools
import logging
from collections.abc import Callable
from typing import cast, overload

from django.utils import timezone

from reliable_messaging._decisions import InvalidPayload
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._runs import RunHandler, in_runs, in_turn, takes_runs
from reliable_messaging._sql import insert_rows
from reliable_messaging.models import InboxMessage, OutboxMessage, StepKey

logger = logging.getLogger("reliable_messaging.sagas")

STEP_KEY = "key"
KEY_LENGTH = 100  # StepKey.key's max_length

Handler = Callable[[IncomingEvent], None]


@overload
def participant(handler: Handler | RunHandler, *, undoes: str = "") -> RunHandler: ...
@overload
def participant(handler: None = None, *, undoes: str = "") -> Callable[[Handler | RunHandler], RunHandler]: ...
def participant(
    handler: Handler | RunHandler | None = None, *, undoes: str = ""
) -> RunHandler | Callable[[Handler | RunHandler], RunHandler]:
    """Mark a handler of saga commands (of one message, or ``@in_runs``): a command repeated
    with its step key runs it once. The handler of an undo names the command it ``undoes``:
    that command, arriving after it with the same key, runs nothing. The handler marked takes
    runs: a run's keys are recorded in one statement, and only the firsts go on to ``handler``
    (each in its turn, for a handler of one message)."""

    def mark(handler: Handler | RunHandler) -> RunHandler:
        @functools.wraps(handler)
        def handle(events: list[IncomingEvent]) -> None:
            keys = {event.message_id: _step_key_of(event) for event in events}
            rows = [(event.event_type, keys[event.message_id], event.message_id) for event in events]
            firsts = _record_firsts(rows)
            new = [event for event in events if event.message_id in firsts]
            if undoes and new:  # the fence: taken already where the step ran here first
                _record_firsts([(undoes, keys[event.message_id], event.message_id) for event in new])
            if takes_runs(handler):
                cast(RunHandler, handler)(new)
            else:
                for event in new:
                    with in_turn(event):
                        cast(Handler, handler)(event)
            for event in events:
                if event.message_id not in firsts:
                    with in_turn(event):
                        _repeated(event, keys[event.message_id])

        handle.__dict__["fences"] = (undoes,) if undoes else ()  # checked at start-up (_registry)
        return in_runs(handle)

    return mark(handler) if handler is not None else mark


def _repeated(event: IncomingEvent, key: str) -> None:
    """A command whose key was taken by another message: after its undo, nothing; else the
    first one's answers published again."""
    first = StepKey.objects.filter(event_type=event.event_type, key=key).values_list("message_id", flat=True)[0]
    if undone_by := _undo_of(first, event.event_type):
        logger.warning("%s with step key %s arrived after its undo %s: nothing run", event.event_type, key, undone_by)
        return
    again = repeat_answers(first)
    logger.info("%s repeated with step key %s: %d answer(s) of %s published again", event.event_type, key, again, first)


def _step_key_of(event: IncomingEvent) -> str:
    key = event.payload.get(STEP_KEY)
    if not isinstance(key, str) or not key:
        raise InvalidPayload(f"{event.event_type} carries no step key ({STEP_KEY!r}): not a saga's command")
    if len(key) > KEY_LENGTH:
        # Cut, two keys could be taken for one: refused whole, as no engine of ours sends it.
        raise InvalidPayload(f"{event.event_type}'s step key is {len(key)} characters, over {KEY_LENGTH}")
    return key


def _record_firsts(rows: list[tuple[str, str, str]]) -> set[str]:
    """Record each (event type, key, message id) whose (event type, key) is not taken, in the
    handler's transaction, one statement; the message ids recorded (of a key twice in ``rows``,
    the first's). A concurrent first waits for the other's commit, then finds it taken."""
    now = timezone.now()
    records = [{"event_type": t, "key": k, "message_id": m, "handled_at": now} for t, k, m in rows]
    return insert_rows(StepKey, records, ignore_conflict_on=("event_type", "key"), returning="message_id")


def _undo_of(first: str, event_type: str) -> str:
    """The undo whose message ``first`` took ``event_type``'s key (a fence), or "" (a repeat): read
    from the inbox, where the consumer recorded ``first`` with its type (found by message id)."""
    undo = InboxMessage.objects.filter(message_id=first).exclude(event_type=event_type)
    return undo.values_list("event_type", flat=True).first() or ""


def repeat_answers(message_id: str) -> int:
    """Publish again what ``message_id`` caused (the relay's next look sends them, same ids); how many
    there are (0 once past the outbox's retention: the participant then cannot answer again)."""
    caused = OutboxMessage.objects.filter(causation_id=message_id)
    caused.filter(published_at__isnull=False).update(
        published_at=None, attempts=0, next_attempt_at=None, parked_at=None
    )
    return caused.count()
