"""Frozen versions: a released event version's schema never changes in a way that breaks its
readers. Each schema is compared with its committed snapshot (``docs/schemas-snapshot/``):
a removed or renamed field, a changed type, a new required field or a narrowed enum is
refused, saying to add a version instead; an optional field added is fine
(docs/evolving-events.md). ``python manage.py event_schemas`` checks and snapshots.
"""

import json
from pathlib import Path
from typing import Any

from reliable_messaging._schema_catalog import EventSchema

ADD_A_VERSION = "add a version instead (docs/evolving-events.md)"


def breaking_changes(old: dict[str, Any], new: dict[str, Any], where: str = "") -> list[str]:
    """What ``new`` changes in ``old`` that a reader of ``old`` would trip over."""
    at = where or "(the payload)"
    problems = []
    if old.get("type") != new.get("type"):
        problems.append(f"{at}: type changed from {old.get('type')!r} to {new.get('type')!r}")
    if "enum" in old:
        if narrowed := [v for v in old["enum"] if v not in new.get("enum", old["enum"])]:
            problems.append(f"{at}: enum narrowed, {narrowed} no longer allowed")
    elif "enum" in new:
        problems.append(f"{at}: enum added, values were free")
    if added := sorted(set(new.get("required", ())) - set(old.get("required", ()))):
        problems.append(f"{at}: new required field(s) {added}")
    old_properties, new_properties = old.get("properties", {}), new.get("properties", {})
    for name, schema in old_properties.items():
        if name not in new_properties:
            problems.append(f"{where}/{name}: field removed or renamed")
        else:
            problems += breaking_changes(schema, new_properties[name], f"{where}/{name}")
    if isinstance(old.get("items"), dict):
        problems += breaking_changes(old["items"], new.get("items") or {}, f"{where}/items")
    return problems


def frozen_problems(schemas: dict[tuple[str, int], EventSchema], snapshot_dir: Path) -> list[str]:
    """Every way the schemas (``reliable_messaging._contracts.schemas()``) break their snapshots."""
    problems = []
    snapshots = {path.name: path for path in snapshot_dir.glob("*.json")}
    for (event_type, version), known in sorted(schemas.items()):
        name = f"{event_type}.v{version}.json"
        snapshot = snapshots.pop(name, None)
        if snapshot is None:
            problems.append(f"{name}: no snapshot; run `python manage.py event_schemas --snapshot` and commit it")
            continue
        for change in breaking_changes(json.loads(snapshot.read_text()), known.schema):
            problems.append(f"{event_type} v{version} {change}: {ADD_A_VERSION}")
    installed = {event_type.split(".", 1)[0] for event_type, _ in schemas}
    for name in sorted(snapshots):
        if name.split(".", 1)[0] not in installed:
            continue  # a context not installed here (the orchestrator, unless ORCHESTRATOR is on)
        problems.append(f"{name}: a released version's schema is gone; its readers still need it")
    return problems


def write_snapshots(schemas: dict[tuple[str, int], EventSchema], snapshot_dir: Path) -> list[str]:
    """Write each schema's snapshot that is missing or differs (call after a clean check)."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for (event_type, version), known in sorted(schemas.items()):
        path = snapshot_dir / f"{event_type}.v{version}.json"
        text = json.dumps(known.schema, indent=2) + "\n"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path.name)
    return written
