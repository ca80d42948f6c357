"""Event contracts: a payload checked against its own version, EVENT_VERSIONS read or refused,
frozen versions (a released schema only ever gains optional fields), what a reader cannot read a
dead letter naming why, and declarations whose schemas or upcasters do not fit refused at start-up
(reliable_messaging._contracts, reliable_messaging._schema_freeze). The test apps' notes.note.priced
has two versions."""

import copy
import json
import uuid

import pytest
from reliable_messaging._contracts import (
    ContractError,
    parse_event_versions,
    read_schemas,
    reading_of,
    schemas,
    validation_error,
)
from reliable_messaging._declarations import DeclarationError, read_declaration
from reliable_messaging._dispatch import Decision, Outcome, decide
from reliable_messaging._schema_freeze import frozen_problems, write_snapshots
from reliable_messaging.models import OutboxMessage

NOTE_ID = "0190f3a4-0000-7000-8000-000000000001"
PRICED_V1 = {
    "note_id": NOTE_ID,
    "total": {"amount": "3.00", "currency": "USD"},
    "lines": [{"word": "a", "count": 2}, {"word": "b", "count": 1}],
    "reason": "priced_by_word",
    "remark": "",
}
PRICED_V2 = {**PRICED_V1, "words": 3}


def test_a_payload_is_checked_against_its_own_version():
    assert validation_error("notes.note.priced", 1, PRICED_V1) == ""
    assert validation_error("notes.note.priced", 2, PRICED_V2) == ""
    assert validation_error("notes.note.priced", 2, PRICED_V1) == (
        "notes.note.priced v2 at (the payload): 'words' is a required property"
    )
    assert validation_error("notes.note.priced", 1, {**PRICED_V1, "note_id": "42"}) == (
        "notes.note.priced v1 at note_id: '42' is not a 'uuid'"
    )


def test_event_versions_is_read_or_refused_with_its_reason():
    newest = {"notes.note.priced": 2}.get
    assert parse_event_versions(" notes.note.priced=1 ,", lambda e: newest(e, 1)) == {"notes.note.priced": 1}
    for text, error in [
        ("notes.note.priced=3", "notes.note.priced v3 is not a version this tree writes (1..2)"),
        ("notes.note.priced=0", "notes.note.priced v0 is not a version this tree writes (1..2)"),
        ("notes.note.exploded=1", "notes.note.exploded v1 is not a version this tree writes (no such event)"),
        ("notes.note.priced", "'notes.note.priced' is not <routing key>=<version>"),
    ]:
        with pytest.raises(ContractError) as refused:
            parse_event_versions(text, lambda e: newest(e, 1))
        assert str(refused.value) == f"EVENT_VERSIONS: {error}"


# --- frozen versions ------------------------------------------------------------------------------
def _removed(s):
    del s["properties"]["remark"]


def _renamed(s):
    s["properties"]["comment"] = s["properties"].pop("remark")


def _retyped(s):
    s["properties"]["lines"]["items"]["properties"]["count"]["type"] = "string"


def _required(s):
    s["properties"]["author"] = {"type": "string"}
    s["required"].append("author")


def _optional(s):
    s["properties"]["author"] = {"type": "string"}


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        (_removed, ["/remark: field removed or renamed"]),
        (_renamed, ["/remark: field removed or renamed"]),
        (_retyped, ["/lines/items/count: type changed from 'integer' to 'string'"]),
        (_required, ["(the payload): new required field(s) ['author']"]),
        (_optional, []),
    ],
)
def test_the_freeze_refuses_each_breaking_change_and_allows_an_optional_field(tmp_path, change, problems):
    write_snapshots(schemas(), tmp_path)
    changed = dict(schemas())
    known = changed[("notes.note.priced", 2)]
    schema = json.loads((tmp_path / "notes.note.priced.v2.json").read_text())
    change(schema)
    changed[("notes.note.priced", 2)] = type(known)("notes.note.priced", 2, schema, known.path)
    assert frozen_problems(changed, tmp_path) == [
        f"notes.note.priced v2 {p}: add a version instead (docs/evolving-events.md)" for p in problems
    ]


def test_the_freeze_refuses_a_narrowed_enum_a_missing_snapshot_and_a_removed_version(tmp_path):
    write_snapshots(schemas(), tmp_path)
    changed = dict(schemas())
    known = changed[("notes.note.priced", 1)]
    schema = copy.deepcopy(known.schema)
    schema["properties"]["reason"]["enum"] = ["priced_by_line"]
    changed[("notes.note.priced", 1)] = type(known)("notes.note.priced", 1, schema, known.path)
    changed[("notes.note.priced", 3)] = type(known)("notes.note.priced", 3, schema, known.path)
    del changed[("notes.note.written", 1)]
    assert frozen_problems(changed, tmp_path) == [
        "notes.note.priced v1 /reason: enum narrowed, ['priced_by_word'] no longer allowed: "
        "add a version instead (docs/evolving-events.md)",
        "notes.note.priced.v3.json: no snapshot; run `python manage.py event_schemas --snapshot` and commit it",
        "notes.note.written.v1.json: a released version's schema is gone; its readers still need it",
    ]


# --- what a reader cannot read ----------------------------------------------------------------------
def deliver(payload: dict, version: int) -> Decision:
    return decide(
        "archive",
        body=json.dumps(payload).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": NOTE_ID},
        headers={"event_type": "notes.note.priced", "schema_version": version},
        routing_key="notes.note.priced",
    )


@pytest.mark.django_db(transaction=True)
def test_a_version_newer_than_the_reader_knows_or_an_invalid_payload_is_a_dead_letter_and_changes_nothing():
    newer = deliver(PRICED_V2, 3)
    assert (newer.outcome, newer.reason, newer.error) == (
        Outcome.DEAD_LETTER,
        "unsupported_schema_version",
        "notes.note.priced v3 is newer than archive reads (v1..v2): upgrade this deployment, "
        "then replay this dead letter (docs/evolving-events.md)",
    )
    invalid = deliver({**PRICED_V2, "total": {"amount": "3.00"}}, 2)
    assert (invalid.outcome, invalid.reason, invalid.error) == (
        Outcome.DEAD_LETTER,
        "invalid_payload",
        "notes.note.priced v2 at total: 'currency' is a required property",
    )
    assert OutboxMessage.objects.count() == 0


# --- declarations that do not fit together stop every process at start-up -----------------------
@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({}, 'x/context.toml: declare schemas = "schemas" (a JSON Schema per event)'),
        ({"x.a.b.v2.json": "{}"}, "x/schemas: x.a.b needs a schema for each version from 1, has [2]"),
        ({"x.a.b.v1.json": "{}", "x.a.c.v1.json": "{}"}, "x/schemas/x.a.c.v1.json: not <event x publishes>.v<N>.json"),
        ({"x.a.b.v1.json": '{"type": 3}'}, "x/schemas/x.a.b.v1.json: not a valid JSON Schema: 3 is not valid"),
    ],
)
def test_a_published_event_without_its_schemas_is_refused(tmp_path, files, error):
    (tmp_path / "x").mkdir()
    schemas_line = 'schemas = "schemas"\n' if files else ""
    (tmp_path / "x" / "context.toml").write_text(f'name = "x"\n{schemas_line}[publishes]\n"x.a.b" = "step"\n')
    if files:
        (tmp_path / "x" / "schemas").mkdir()
        for name, text in files.items():
            (tmp_path / "x" / "schemas" / name).write_text(text)
    with pytest.raises(ContractError) as refused:
        read_schemas(tmp_path, [read_declaration(tmp_path, "x")])
    assert str(refused.value).startswith(error)


def test_upcasters_for_an_event_not_consumed_or_too_few_are_refused(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "context.toml").write_text('name = "x"\n[upcasters]\n"y.a.b" = ["x.up.f"]\n')
    with pytest.raises(DeclarationError, match=r"^x/context.toml: upcasters 'y.a.b': not under consumes or obeys$"):
        read_declaration(tmp_path, "x")
    (tmp_path / "x" / "context.toml").write_text('name = "x"\n[consumes]\n"notes.note.priced" = "x.h.on"\n')
    with pytest.raises(ContractError) as refused:
        reading_of(read_declaration(tmp_path, "x"), "notes.note.priced")
    assert str(refused.value) == (
        "x/context.toml: notes.note.priced has versions 1..2; its reader needs 1 upcaster(s) "
        "under [upcasters] (v1 -> v2, ...), not 0"
    )


@pytest.mark.django_db(transaction=True)
def test_the_currency_checked_is_the_configured_one(settings):
    settings.MESSAGING = {**settings.MESSAGING, "CURRENCY": "EUR"}
    assert deliver(PRICED_V2, 2).error == "notes.note.priced v2 at total/currency: 'USD' is not a 'system-currency'"
    euros = {**PRICED_V2, "total": {"amount": "3.00", "currency": "EUR"}}
    assert deliver(euros, 2).outcome is Outcome.HANDLED
