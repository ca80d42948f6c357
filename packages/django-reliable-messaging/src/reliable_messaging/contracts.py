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
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match

from reliable_messaging.conf import contexts_dir, setting
from reliable_messaging.declarations import ContextDeclaration, DeclarationError, hosted, installed, schema_folder

_SCHEMA_FILE = re.compile(r"^(?P<event_type>[a-z0-9_.]+)\.v(?P<version>[1-9][0-9]*)\.json$")


class ContractError(DeclarationError):
    """The schemas, upcasters, downcasters or EVENT_VERSIONS do not fit together."""


@dataclass(frozen=True)
class EventSchema:
    event_type: str
    version: int
    schema: dict
    path: Path


def read_schemas(base_dir: Path, declarations) -> dict[tuple[str, int], EventSchema]:
    """Every schema the declarations' folders hold, by (event type, version), checked: each
    published event has versions 1..N, and a file names only an event its context publishes."""
    found: dict[tuple[str, int], EventSchema] = {}
    for declaration in declarations:
        folder = schema_folder(base_dir, declaration)
        if folder is None:
            if declaration.publishes:
                raise ContractError(
                    f'{declaration.package}/context.toml: declare schemas = "schemas" (a JSON Schema per event)'
                )
            continue
        for path in sorted(folder.glob("*.json")):
            match = _SCHEMA_FILE.match(path.name)
            if not match or match["event_type"] not in declaration.publishes:
                raise ContractError(f"{path.relative_to(base_dir)}: not <event {declaration.name} publishes>.v<N>.json")
            schema = json.loads(path.read_text())
            try:
                Draft202012Validator.check_schema(schema)
            except Exception as exc:  # noqa: BLE001 - SchemaError, named with its file
                raise ContractError(f"{path.relative_to(base_dir)}: not a valid JSON Schema: {exc}") from None
            key = (match["event_type"], int(match["version"]))
            found[key] = EventSchema(*key, schema=schema, path=path)
        for event_type in declaration.publishes:
            versions = sorted(v for (e, v) in found if e == event_type)
            if versions != list(range(1, len(versions) + 1)) or not versions:
                raise ContractError(
                    f"{folder.relative_to(base_dir)}: {event_type} needs a schema for each version from 1, "
                    f"has {versions}"
                )
    return found


def read_shared_schemas(folder: Path, declared: set[str]) -> dict[tuple[str, int], EventSchema]:
    """The schemas of ``folder`` (``<event type>.v<N>.json``) of events no known context publishes,
    checked as a producer's are: valid JSON Schemas, each event with every version from 1."""
    found: dict[tuple[str, int], EventSchema] = {}
    for path in sorted(folder.glob("*.json")):
        match = _SCHEMA_FILE.match(path.name)
        if not match:
            raise ContractError(f"{path}: not <event type>.v<N>.json (EVENT_SCHEMAS_DIR)")
        if match["event_type"] in declared:
            continue  # its producer's own schemas, beside its declaration, are the ones read
        try:
            schema = json.loads(path.read_text())
            Draft202012Validator.check_schema(schema)
        except Exception as exc:  # noqa: BLE001 - JSONDecodeError, SchemaError: named with the file
            raise ContractError(f"{path}: not a valid JSON Schema: {exc}") from None
        key = (match["event_type"], int(match["version"]))
        found[key] = EventSchema(*key, schema=schema, path=path)
    for event_type in {e for e, _ in found}:
        versions = sorted(v for (e, v) in found if e == event_type)
        if versions != list(range(1, len(versions) + 1)):
            raise ContractError(f"{folder}: {event_type} needs a schema for each version from 1, has {versions}")
    return found


@cache
def _installed_schemas(base_dir: Path, packages: tuple[str, ...], shared: str) -> dict[tuple[str, int], EventSchema]:
    declarations = installed()
    found = read_schemas(base_dir, declarations)
    if shared:
        folder = base_dir / shared  # a relative folder is the tree's; an absolute one stays as it is
        if not folder.is_dir():
            raise ContractError(f"EVENT_SCHEMAS_DIR={shared}: no such folder")
        found |= read_shared_schemas(folder, {e for d in declarations for e in d.publishes})
    return found


def schemas() -> dict[tuple[str, int], EventSchema]:
    return _installed_schemas(contexts_dir(), tuple(setting("DECLARED_CONTEXTS")), setting("EVENT_SCHEMAS_DIR") or "")


def newest_version(event_type: str) -> int:
    """The newest version of ``event_type`` this tree knows (1 for an event nobody declares)."""
    return max((v for (e, v) in schemas() if e == event_type), default=1)


# ``"format": "system-currency"``: the one currency of the system (settings ``CURRENCY``, the same
# in every deployment). A schema file cannot name a setting, so the check is a format of our own;
# it is read at each validation, so a test's override is seen. Other tools treat an unknown
# format as an annotation (AsyncAPI's parser, the frozen-schema check): the pattern still holds.
SYSTEM_CURRENCY = "system-currency"


def _format_checker() -> FormatChecker:
    checker = FormatChecker()
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checks(SYSTEM_CURRENCY)(lambda value: not isinstance(value, str) or value == setting("CURRENCY"))
    return checker


@cache
def _validator(event_type: str, version: int) -> Draft202012Validator | None:
    known = schemas().get((event_type, version))
    if known is None:
        return None
    return Draft202012Validator(known.schema, format_checker=_format_checker())


def validation_error(event_type: str, version: int, payload) -> str:
    """Why ``payload`` is not version ``version`` of ``event_type`` ('' if it is, or if no schema is known)."""
    validator = _validator(event_type, version)
    if validator is None:
        return ""
    error = best_match(validator.iter_errors(payload))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path) or "(the payload)"
    return f"{event_type} v{version} at {where}: {error.message}"


def _resolve(dotted: str) -> Callable:
    from reliable_messaging.registry import resolve

    return resolve(dotted)


# --- Readers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """How a consumer reads one event type: the versions it accepts and the upcasters between them."""

    newest: int
    upcasters: tuple[Callable, ...]  # upcasters[i]: version i+1 -> i+2

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(range(1, self.newest + 1))

    def upcast(self, version: int, payload: dict) -> dict:
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
    return Reading(newest, tuple(_resolve(step) for step in steps))


# --- Writers -----------------------------------------------------------------------------------


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
def _downcasters(event_type: str) -> tuple[Callable, ...]:
    for declaration in installed():
        if event_type in declaration.publishes:
            return tuple(_resolve(step) for step in declaration.downcasters.get(event_type, ()))
    return ()


def version_to_write(event_type: str, payload: dict) -> tuple[int, dict]:
    """The version ``event_type`` is written in here, and ``payload`` (the newest shape) in it."""
    newest = newest_version(event_type)
    version = pinned_versions().get(event_type, newest)
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
