"""Sagas as data: a definition (states, the command each step sends and to whom, the replies that
move it, compensations, a deadline and attempts per step) run by the bus's engine.

- ``register(Definition(...))`` in the host's ``AppConfig.ready()``: every version that still has
  instances in flight stays registered (an instance keeps the version it started with; the newest
  starts new ones); the system check ``reliable_messaging.E001`` refuses a deployment that left
  one out;
- ``start(name, [(key, data), ...], cause=..., turn=...)`` from the handler of what begins it,
  ``reply(name, [Reply(key, event_type, check), ...], turn=...)`` from the handler of the
  participants' replies (each takes a run of them: ``turn(n)`` is where the n-th one's commands
  are sent, ``in_turn(events[n])`` in an ``@in_runs`` handler), ``deadline(name, key, step=...,
  attempt=...)`` from the handler of the definition's ``deadline_event``, ``stop(instance, ...)``
  and ``tombstone(...)`` when the host ends one from outside; each in the handler's transaction:
  a run's instances read in one statement and moved by one conditional UPDATE on (id, version)
  with a history row each, ``TransientError`` for the loser of a race (its messages are read
  again, each alone);
- each step's command carries the instance's key for that command (``STEP_KEY`` in its payload),
  the same on every send; a participant marks its handler of it ``@participant``, and the bus runs
  it once per key, answering a repeat with the first answer (reliable_messaging._saga_steps); the
  handler marked takes runs, its keys recorded in one statement per run;
- a step's deadline is a scheduled message (``publish(deliver_at=...)``), cancelled by the move
  that leaves the step; unanswered after ``attempts`` sends, a forward step is given up: its
  ``undo`` sent at once, the instance going on to ``given_up`` (compensations, in reverse);
- ``diagram(definition)``: its Mermaid state diagram, for a host's docs and admin.
"""

from reliable_messaging._saga_definitions import Build, Definition, DefinitionError, Move, Step, definition, register
from reliable_messaging._saga_diagram import diagram
from reliable_messaging._saga_engine import STARTED, Check, Reply, deadline, instance_of, reply, start, stop, tombstone
from reliable_messaging._saga_steps import STEP_KEY, participant
from reliable_messaging.models import SagaInstance, SagaTransition

__all__ = [
    "STARTED",
    "STEP_KEY",
    "Build",
    "Check",
    "Definition",
    "DefinitionError",
    "Move",
    "Reply",
    "SagaInstance",
    "SagaTransition",
    "Step",
    "deadline",
    "definition",
    "diagram",
    "instance_of",
    "participant",
    "register",
    "reply",
    "start",
    "stop",
    "tombstone",
]
