"""The shared schema folder (EVENT_SCHEMAS_DIR) of a deployment that joined alone is checked as a
producer's schemas are: a message is never read against a broken or missing version."""

import json
import re

import pytest
from reliable_messaging._contracts import ContractError, read_shared_schemas

OBJECT = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}


def write(folder, name: str, content) -> None:
    (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))


def test_each_event_with_every_version_from_1_and_a_declared_producers_own_schemas_first(tmp_path):
    write(tmp_path, "notes.note.filed.v1.json", OBJECT)
    write(tmp_path, "notes.note.written.v1.json", OBJECT)
    write(tmp_path, "notes.note.written.v2.json", OBJECT)
    found = read_shared_schemas(tmp_path, declared={"notes.note.filed"})
    assert sorted(found) == [("notes.note.written", 1), ("notes.note.written", 2)]


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("notes.note.written.v2.json", OBJECT, "notes.note.written needs a schema for each version from 1"),
        ("notes.note.written.v1.json", "{not json", "notes.note.written.v1.json: not a valid JSON Schema"),
        ("notes.note.written.v1.json", {"type": 12}, "notes.note.written.v1.json: not a valid JSON Schema"),
        ("written.json", OBJECT, "written.json: not <event type>.v<N>.json (EVENT_SCHEMAS_DIR)"),
    ],
)
def test_a_gap_a_broken_file_or_a_stranger_stops_the_deployment(tmp_path, name, content, problem):
    write(tmp_path, name, content)
    with pytest.raises(ContractError, match=re.escape(problem)):
        read_shared_schemas(tmp_path, declared=set())
