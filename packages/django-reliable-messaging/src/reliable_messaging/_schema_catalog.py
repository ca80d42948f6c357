"""The event schemas this tree knows, read from their files: each producer's (``schemas`` in its
context.toml: ``<event type>.v<N>.json``) and the shared folder's (``EVENT_SCHEMAS_DIR``), checked
as they are read. ``reliable_messaging._contracts`` validates, reads and writes events with them."""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from reliable_messaging._conf import contexts_dir, setting
from reliable_messaging._declarations import ContextDeclaration, DeclarationError, installed, schema_folder

_SCHEMA_FILE = re.compile(r"^(?P<event_type>[a-z0-9_.]+)\.v(?P<version>[1-9][0-9]*)\.json$")


class ContractError(DeclarationError):
    """The schemas, upcasters, downcasters or EVENT_VERSIONS do not fit together."""


@dataclass(frozen=True)
class EventSchema:
    event_type: str
    version: int
    schema: dict[str, Any]
    path: Path


def read_schemas(base_dir: Path, declarations: Iterable[ContextDeclaration]) -> dict[tuple[str, int], EventSchema]:
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
