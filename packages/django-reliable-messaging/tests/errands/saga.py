"""The errand: fetch an item, (v2: wrap it,) deliver it; a missing item fails it, an undeliverable
one is put back."""

from dataclasses import replace
from typing import Any

from reliable_messaging.sagas import Definition, Move, Step


def build(command: str, data: dict[str, Any], reason: str) -> dict[str, Any]:
    if command in ("errands.item.return", "errands.errand.failed"):
        return {"reason": reason}
    return {"item": data["item"]} if command == "errands.item.fetch" else {}


ERRAND_V1 = Definition(
    name="errand",
    version=1,
    start="fetching",
    steps={
        "fetching": Step(
            "errands.item.fetch",
            "errands",
            {"errands.item.fetched": "delivering", "errands.item.missing": Move("failed", "missing")},
            deadline=60,
            attempts=2,
            undo="errands.item.return",
            given_up="failed",
        ),
        "delivering": Step(
            "errands.item.deliver",
            "errands",
            {"errands.item.delivered": "done", "errands.item.undeliverable": Move("returning", "undeliverable")},
            deadline=60,
            attempts=2,
            undo="errands.item.recall",
            given_up="returning",
        ),
        "returning": Step(
            "errands.item.return", "errands", {"errands.item.returned": "failed"}, deadline=60, compensation=True
        ),
    },
    ends={"done": "errands.errand.done", "failed": "errands.errand.failed", "stopped": ""},
    build=build,
    key_field="errand_id",
    deadline_event="errands.step.deadline",
    kept_while={"item": ("fetching",)},
)

# Version 2 wraps the item between fetching and delivering.
ERRAND_V2 = replace(
    ERRAND_V1,
    version=2,
    steps={
        **ERRAND_V1.steps,
        "fetching": replace(
            ERRAND_V1.steps["fetching"],
            replies={"errands.item.fetched": "wrapping", "errands.item.missing": Move("failed", "missing")},
        ),
        "wrapping": Step(
            "errands.item.wrap",
            "errands",
            {"errands.item.wrapped": "delivering"},
            deadline=60,
            attempts=2,
            undo="errands.item.return",
            given_up="failed",
        ),
    },
)
