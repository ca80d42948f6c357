"""What a saga is: a definition, as data (reliable_messaging.sagas), and the registry of every
version a host runs."""

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# What a host's builder is given to make a command's payload: the command, the instance's data
# and the reason it is sent for (a failure's, "" on the way forward).
Build = Callable[[str, dict[str, Any], str], dict[str, Any]]


class DefinitionError(ValueError):
    """A definition that cannot run (a reply leading nowhere, a step without attempts): refused when registered."""


@dataclass(frozen=True)
class Move:
    """Where a reply leads, and the failure it means, if any (kept as the instance's reason)."""

    to: str
    reason: str = ""


@dataclass(frozen=True)
class Step:
    """A state waiting for a participant: the command sent to it, the replies that move on.

    A forward step unanswered after ``attempts`` sends is given up: its ``undo`` is sent at once
    (unanswered; the participant's undo is idempotent, safe before or after the step) and the
    instance goes to ``given_up``. A compensation (``compensation=True``) is sent again at each
    deadline until answered: there is nothing left to fall back on."""

    command: str
    participant: str
    replies: Mapping[str, str | Move]
    deadline: float
    attempts: int = 3
    undo: str = ""
    given_up: str = ""
    compensation: bool = False

    def move(self, reply: str) -> Move | None:
        to = self.replies.get(reply)
        return Move(to) if isinstance(to, str) else to


@dataclass(frozen=True)
class Definition:
    """A saga: its steps (by the state that waits), its final states with the command each sends
    on arrival ("" for none), and ``kept_while``: data fields forgotten once the instance is in
    none of the states named (a secret its commands no longer need). ``key_field`` names the
    instance's key in every payload the engine writes; ``deadline_event`` is the host's scheduled
    message (payload: key_field, step, attempt)."""

    name: str
    version: int
    start: str
    steps: Mapping[str, Step]
    ends: Mapping[str, str]
    build: Build
    key_field: str
    deadline_event: str
    kept_while: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if problems := self.problems():
            raise DefinitionError(f"saga {self.name} v{self.version}: " + "; ".join(problems))

    def problems(self) -> list[str]:
        states = set(self.steps) | set(self.ends)
        found = [] if self.start in self.steps else [f"its start {self.start!r} is not a step"]
        for state, step in self.steps.items():
            moves = [step.move(reply) for reply in step.replies]
            found += [f"{state}: a reply leads to {m.to!r}, no state" for m in moves if m and m.to not in states]
            if step.attempts < 1 or step.deadline <= 0:
                found.append(f"{state}: a step needs a deadline and at least one attempt")
            if not step.compensation and step.given_up not in states:
                found.append(f"{state}: a forward step names the state its give-up leads to")
        return found

    @property
    def commands(self) -> list[str]:
        """Every command it may send with a step key, in the order of its steps."""
        return list(self.new_step_keys())

    def new_step_keys(self) -> dict[str, str]:
        """A new instance's key for each command it may send: one per step, its undo sent under the
        same (the participant's undo fences the step, reliable_messaging._saga_steps); an undo of
        several steps, or the command of a compensation step too, under the first's."""
        keys: dict[str, str] = {}
        for step in self.steps.values():
            key = keys.setdefault(step.command, str(uuid.uuid4()))
            if step.undo:
                keys.setdefault(step.undo, key)
        return keys


_registry: dict[tuple[str, int], Definition] = {}


def register(*definitions: Definition) -> None:
    """Make definitions runnable; a host keeps every version it still has instances of registered
    (the instances keep theirs while in flight; the newest starts new ones)."""
    for definition in definitions:
        known = _registry.get((definition.name, definition.version))
        if known is not None and known != definition:
            raise DefinitionError(f"saga {definition.name} v{definition.version} is registered already, differently")
        _registry[(definition.name, definition.version)] = definition


def definition(name: str, version: int | None = None) -> Definition:
    """The definition of ``name`` in ``version`` (the newest by default); LookupError if none."""
    versions = [v for (n, v) in _registry if n == name]
    if not versions or (version is not None and version not in versions):
        raise LookupError(f"saga {name} v{version or '?'} is not registered (registered: {sorted(versions)})")
    return _registry[(name, version if version is not None else max(versions))]


def registered() -> dict[str, list[int]]:
    """Each saga name and its registered versions."""
    found: dict[str, list[int]] = {}
    for name, version in sorted(_registry):
        found.setdefault(name, []).append(version)
    return found
