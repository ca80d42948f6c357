"""``manage.py asyncapi``: the AsyncAPI 3.0 document of the hosted contexts' events, one message per
event and version, and who sends and receives which version (EVENT_VERSIONS and CONTEXTS heeded)."""

import io

import yaml
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from reliable_messaging._contracts import schemas


def asyncapi() -> str:
    out = io.StringIO()
    call_command("asyncapi", stdout=out)
    return out.getvalue()


def test_one_message_per_event_and_version_with_its_schema_and_headers():
    document = yaml.safe_load(asyncapi())
    assert document["asyncapi"] == "3.0.0"
    messages = document["components"]["messages"]
    assert sorted(messages) == sorted(f"{e}.v{v}" for e, v in schemas())
    assert list(document["channels"]["notes.note.priced"]["messages"]) == [
        "notes.note.priced.v1",
        "notes.note.priced.v2",
    ]
    v2 = messages["notes.note.priced.v2"]
    assert v2["payload"]["properties"]["total"]["required"] == ["amount", "currency"]
    assert v2["headers"]["properties"]["schema_version"]["const"] == 2
    assert v2["headers"]["required"] == ["event_type", "schema_version", "occurred_at", "source"]


def test_operations_say_who_sends_and_who_receives_which_version():
    operations = yaml.safe_load(asyncapi())["operations"]
    priced = {
        name: [m["$ref"].rsplit("/", 1)[1] for m in op["messages"]]
        for name, op in operations.items()
        if name.endswith(".notes.note.priced")
    }
    assert priced == {
        "notes.sends.notes.note.priced": ["notes.note.priced.v2"],
        "archive.receives.notes.note.priced": ["notes.note.priced.v1", "notes.note.priced.v2"],
    }
    with override_settings(MESSAGING={**settings.MESSAGING, "EVENT_VERSIONS": "notes.note.priced=1"}):
        pinned = yaml.safe_load(asyncapi())["operations"]["notes.sends.notes.note.priced"]
    assert pinned["messages"] == [{"$ref": "#/channels/notes.note.priced/messages/notes.note.priced.v1"}]


def test_a_deployment_documents_only_what_its_contexts_send_and_receive():
    with override_settings(MESSAGING={**settings.MESSAGING, "CONTEXTS": ["archive"]}):
        document = yaml.safe_load(asyncapi())
    assert sorted(document["operations"]) == [
        "archive.receives.notes.note.priced",
        "archive.receives.notes.note.written",
        "archive.sends.archive.note.filed",
    ]
    assert sorted(document["channels"]) == sorted({name.split(".", 2)[2] for name in document["operations"]})
