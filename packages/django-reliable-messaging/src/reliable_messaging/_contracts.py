"""Event contracts: each event's JSON Schema (2020-12) per version, as its producer declares
them (``schemas`` in its context.toml: ``<event type>.v<N>.json``), and the versions a
deployment reads and writes (docs/evolving-events.md).

- A reader validates a message against the schema of its event type and version before its
  handler (refused: the dead letter ``invalid_payload``), and brings an older version to the
  newest it knows with its context's upcasters, one step at a time; a version newer than the
  newest it knows is refused (``unsupported_schema_version``): an old deployment never guesses.
- A writer writes the newest version, or the one ``EVENT_VERSIONS`` pins during a rollout,
  turned into that shape by its context's downcasters.

A reader knows its producers' versions from their schemas in its tree: beside their
declarations, or, for a producer whose declaration it does not carry (a deployment that joined
alone), in the shared folder ``EVENT_SCHEMAS_DIR``. A consumed event with no schema at all stops
the process at start-up: a message is never read unchecked.

The parts: the schemas as read from their files (``reliable_messaging._schema_catalog``), the
readers (``reliable_messaging._readings``); here, the validation, the writers and the start-up check.
"""

import json
from collections.abc import Callable
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match

try:  # optional: a compiled check of the valid payloads, the same verdicts but several times faster
    import jsonschema_rs
except ImportError:  # pragma: no cover - every payload then takes jsonschema alone
    jsonschema_rs = None  # type: ignore[assignment]  # the optional extra: None when it is not installed

from reliable_messaging._claim_check import payload_limit
from reliable_messaging._conf import setting
from reliable_messaging._declarations import hosted, installed
from reliable_messaging._dotted import resolve
from reliable_messaging._envelope import encode_body
from reliable_messaging._readings import Reading, reading_of
from reliable_messaging._schema_catalog import (
    ContractError,
    EventSchema,
    newest_version,
    read_schemas,
    read_shared_schemas,
    schemas,
)

# What other modules import from here (defined in schema_catalog and readings, re-exported).
__all__ = [
    "ContractError",
    "EventSchema",
    "Reading",
    "newest_version",
    "read_schemas",
    "read_shared_schemas",
    "reading_of",
    "schemas",
]


# ``"format": "system-currency"``: the one currency of the system (settings ``CURRENCY``, the same
# in every deployment). A schema file cannot name a setting, so the check is a format of our own;
# it is read at each validation, so a test's override is seen. Other tools treat an unknown
# format as an annotation (AsyncAPI's parser, the frozen-schema check): the pattern still holds.
SYSTEM_CURRENCY = "system-currency"


def _is_system_currency(value: object) -> bool:
    return not isinstance(value, str) or value == setting("CURRENCY")


def _format_checker() -> FormatChecker:
    checker = FormatChecker()
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks(SYSTEM_CURRENCY)(_is_system_currency)
    return checker


@cache
def _validators(event_type: str, version: int) -> "tuple[Draft202012Validator, jsonschema_rs.Validator | None] | None":
    """The schema's validator (jsonschema: its errors name the field) and, when jsonschema_rs is
    installed and compiles the schema, a compiled one that only says whether a payload is valid."""
    known = schemas().get((event_type, version))
    if known is None:
        return None
    fast: jsonschema_rs.Validator | None = None
    if jsonschema_rs is not None:
        try:
            fast = jsonschema_rs.Draft202012Validator(
                known.schema, validate_formats=True, formats={SYSTEM_CURRENCY: _is_system_currency}
            )
        except ValueError:  # a schema it cannot compile: jsonschema alone decides
            fast = None
    return Draft202012Validator(known.schema, format_checker=_format_checker()), fast


def _passes_fast_check(fast: "jsonschema_rs.Validator | None", payload: object) -> bool:
    """True only when the compiled validator finds ``payload`` valid. Anything else (invalid, a
    value it cannot take, such as a lone surrogate) is left to jsonschema, whose verdict stands:
    the fast check can only spare work, never accept what jsonschema refuses (tests/unit). Only
    for a payload as ``json.loads`` gives it: jsonschema_rs also takes a tuple as an array and a
    Decimal as a number, which jsonschema refuses."""
    if fast is None:
        return False
    try:
        return fast.is_valid(payload)
    except ValueError:  # a value it cannot take: a lone surrogate, a key that is not text
        return False


def validation_error(event_type: str, version: int, payload: object, *, decoded_json: bool = False) -> str:
    """Why ``payload`` is not version ``version`` of ``event_type`` ('' if it is, or if no schema is
    known). ``decoded_json``: the payload is exactly what ``json.loads`` made of a message's body
    (only dicts, lists, text, numbers, booleans and nulls), so the compiled check may answer."""
    validators = _validators(event_type, version)
    if validators is None:
        return ""
    validator, fast = validators
    if decoded_json and _passes_fast_check(fast, payload):
        return ""
    error = best_match(validator.iter_errors(payload))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path) or "(the payload)"
    return f"{event_type} v{version} at {where}: {error.message}"


# --- Writers -----------------------------------------------------------------------------------


def publish_refusal(event_type: str, version: int, payload: object) -> str:
    """Why ``payload`` may not be published as version ``version`` of ``event_type`` ('' if it may):
    its context does not declare it, no schema of that version is known, the payload is not JSON,
    or the schema refuses it as a consumer will read it (after a JSON round trip)."""
    if not any(event_type in declaration.publishes for declaration in installed()):
        return (
            f"{event_type} is not declared: add it to [publishes] of the context.toml of "
            f"{event_type.split('.', 1)[0]!r} (an installed context, MESSAGING['DECLARED_CONTEXTS'])"
        )
    if (event_type, version) not in schemas():
        return f"{event_type} v{version} has no schema ({event_type}.v{version}.json beside its declaration)"
    try:
        as_read = json.loads(json.dumps(payload))
    except (TypeError, ValueError) as error:
        return f"{event_type} v{version}: the payload is not JSON ({error})"
    if refusal := validation_error(event_type, version, as_read, decoded_json=True):
        return refusal
    # Checked here, not only where it arrives: a consumer would dead-letter it (payload_too_large)
    # after the change it announces was committed.
    # With claim checks on, a payload over MAX_MESSAGE_BYTES travels apart, up to CLAIM_CHECK_MAX_BYTES.
    size, (bound, limit) = len(encode_body(payload)), payload_limit()
    if size > limit:
        return (
            f"{event_type} v{version}: the payload is {size} bytes as sent, over {bound} ({limit}): "
            "send a reference to the data instead"
        )
    return ""


def parse_event_versions(text: str, newest: Callable[[str], int]) -> dict[str, int]:
    """``EVENT_VERSIONS`` ("<routing key>=<N>,...") as a dict; ContractError names what is wrong."""
    pins: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        event_type, _, number = item.partition("=")
        event_type = event_type.strip()
        if not number.strip().isdigit():
            raise ContractError(f"EVENT_VERSIONS: {item!r} is not <routing key>=<version>")
        version, known = int(number), newest(event_type)
        if not 1 <= version <= known or (event_type, 1) not in schemas():
            raise ContractError(
                f"EVENT_VERSIONS: {event_type} v{version} is not a version this tree writes "
                f"({'1..' + str(known) if (event_type, 1) in schemas() else 'no such event'})"
            )
        pins[event_type] = version
    return pins


@cache
def _pins(text: str) -> dict[str, int]:
    return parse_event_versions(text, newest_version)


def pinned_versions() -> dict[str, int]:
    return _pins(setting("EVENT_VERSIONS"))


@cache
def _downcasters(event_type: str) -> tuple[Callable[[dict[str, Any]], dict[str, Any]], ...]:
    for declaration in installed():
        if event_type in declaration.publishes:
            return tuple(resolve(step) for step in declaration.downcasters.get(event_type, ()))
    return ()


def written_version(event_type: str) -> int:
    """The version ``event_type`` is written in here: the newest, or the one ``EVENT_VERSIONS`` pins."""
    return pinned_versions().get(event_type, newest_version(event_type))


def version_to_write(event_type: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The version ``event_type`` is written in here, and ``payload`` (the newest shape) in it."""
    newest = newest_version(event_type)
    version = written_version(event_type)
    steps = _downcasters(event_type)  # steps[i]: version i+2 -> i+1
    for at in range(newest, version, -1):
        payload = steps[at - 2](payload)
    return version, payload


def check_contracts() -> None:
    """At start-up: every event a hosted context consumes has a schema here, and the schemas, the
    pins and every producer's downcasters fit together."""
    known = {event_type for event_type, _ in schemas()}
    for declaration in hosted():
        for event_type in declaration.consumes:
            if event_type not in known:
                raise ContractError(
                    f"{declaration.package}/context.toml consumes {event_type}, and no schema of it is known "
                    f"here: carry its producer's declaration and schemas, or set EVENT_SCHEMAS_DIR to a folder "
                    f"holding {event_type}.v<N>.json (docs/schemas-snapshot/ is one)"
                )
    for declaration in installed():
        for event_type in declaration.publishes:
            steps = declaration.downcasters.get(event_type, ())
            if steps and len(steps) != newest_version(event_type) - 1:
                raise ContractError(
                    f"{declaration.package}/context.toml: {event_type} has versions 1..{newest_version(event_type)}; "
                    f"[downcasters] needs one per step or none, not {len(steps)}"
                )
    for event_type, version in pinned_versions().items():
        if version < newest_version(event_type) and not _declared_downcasters(event_type):
            raise ContractError(f"EVENT_VERSIONS pins {event_type} v{version}: its producer declares no downcasters")


def _declared_downcasters(event_type: str) -> tuple[str, ...]:
    return next((d.downcasters.get(event_type, ()) for d in installed() if event_type in d.publishes), ())
