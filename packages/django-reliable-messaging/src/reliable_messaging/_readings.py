"""How a consumer reads an event type: the versions it accepts (every one its producer's schemas
name here) and the upcasters that bring each to the newest (docs/evolving-events.md)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reliable_messaging._declarations import ContextDeclaration
from reliable_messaging._dotted import resolve
from reliable_messaging._schema_catalog import ContractError, newest_version


@dataclass(frozen=True)
class Reading:
    """How a consumer reads one event type: the versions it accepts and the upcasters between them."""

    newest: int
    upcasters: tuple[Callable[[dict[str, Any]], dict[str, Any]], ...]  # upcasters[i]: version i+1 -> i+2

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(range(1, self.newest + 1))

    def upcast(self, version: int, payload: dict[str, Any]) -> dict[str, Any]:
        for step in self.upcasters[version - 1 :]:
            payload = step(payload)
        return payload


def reading_of(declaration: ContextDeclaration, event_type: str) -> Reading:
    """What ``declaration``'s consumer accepts of ``event_type``: every version its producer's
    schemas name here, with one upcaster per step (checked)."""
    newest = newest_version(event_type)
    steps = declaration.upcasters.get(event_type, ())
    if len(steps) != newest - 1:
        raise ContractError(
            f"{declaration.package}/context.toml: {event_type} has versions 1..{newest}; its reader needs "
            f"{newest - 1} upcaster(s) under [upcasters] (v1 -> v2, ...), not {len(steps)}"
        )
    return Reading(newest, tuple(resolve(step) for step in steps))
