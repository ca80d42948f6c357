"""Field-level encryption: notes encrypts a note's secret for the archive alone (notes/context.toml,
``[encrypted]``). The outbox, the broker, dead letters and the event log hold ciphertext; the
archive's handler sees the clear value, another consumer (retrying) the payload without it. The
relay and the consumer loop run in the test's process, on the test's database and broker."""

import base64
import json
import sys

import pytest
from archive.models import Filed, Refusal
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from notes.services import write_note
from reliable_messaging import _broker as broker
from reliable_messaging._dead_letters import (
    dead_letter_display_body,
    dead_letter_edit,
    dead_letter_payload_text,
    dead_letter_record,
)
from reliable_messaging._decisions import Outcome
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._event_log import event_log_record
from reliable_messaging.models import DeadLetter, EventLogEntry, OutboxMessage
from reliable_messaging.testing import deliver, published
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture

from conftest import amqp, drained

EVENT = "notes.note.written"
SECRET = "tok_4242424242424242"
NEW_KEY = base64.b64encode(b"rotated key, also 32 bytes long!").decode()


def sealed(row: OutboxMessage) -> dict:
    return row.payload["secret"]["$encrypted"]


def test_the_outbox_holds_the_secret_encrypted_for_the_archive_alone(db):
    note = write_note("fine", secret=SECRET)

    row = OutboxMessage.objects.get()
    assert set(row.payload) == {"note_id", "text", "secret"}
    assert (row.payload["note_id"], row.payload["text"]) == (str(note.id), "fine")
    assert set(row.payload["secret"]) == {"$encrypted"}
    assert (set(sealed(row)), sealed(row)["kid"], sealed(row)["for"]) == ({"kid", "for", "ct"}, "tests-1", ["archive"])
    assert SECRET not in json.dumps(row.payload)
    assert published("notes") == [(EVENT, 1, row.payload)]  # the harness shows what is stored
    # a fresh nonce each time: the same secret is never the same ciphertext
    write_note("fine", secret=SECRET)
    assert len({sealed(r)["ct"] for r in OutboxMessage.objects.all()}) == 2


def test_the_admin_shows_encrypted_and_never_the_secret(db, client):
    write_note("fine", secret=SECRET)
    row = OutboxMessage.objects.get()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))

    page = client.get(f"/admin/messaging/outboxmessage/{row.pk}/change/").content.decode()

    assert "&quot;secret&quot;: &quot;encrypted for archive (key tests-1)&quot;" in page
    assert SECRET not in page
    assert sealed(row)["ct"] not in page


def test_a_note_without_a_secret_is_written_as_it_is(db):
    note = write_note("fine")

    assert OutboxMessage.objects.get().payload == {"note_id": str(note.id), "text": "fine"}


@pytest.mark.skipif(not amqp(), reason="reads RabbitMQ's queues")
@pytest.mark.usefixtures("bus")
def test_the_broker_carries_the_ciphertext():
    queues = ("archive_queue", "retrying_queue")
    broker.declare_queues()  # a new vhost's included
    for queue in queues:  # what earlier tests left there (nothing consumes archive_queue in theirs)
        drained(queue)
    write_note("fine", secret=SECRET)
    relay()

    bodies = [body for queue in queues for _, _, body in drained(queue)]
    assert len(bodies) == 2
    for body in bodies:
        assert SECRET not in (body if isinstance(body, str) else body.decode())
        assert json.loads(body)["secret"] == OutboxMessage.objects.get().payload["secret"]


def test_the_archive_handler_sees_the_secret_and_another_consumer_never_does(seen):
    note = write_note("fine", secret=SECRET)
    relay()
    consume("archive", "retrying")

    assert sorted(seen, key=lambda call: call[0]) == [
        ("archive", {"note_id": str(note.id), "text": "fine", "secret": SECRET}),
        ("retrying", {"note_id": str(note.id), "text": "fine"}),
    ]
    assert DeadLetter.objects.count() == 0


@pytest.mark.usefixtures("bus")
def test_a_dead_letter_holds_the_ciphertext_and_shows_encrypted():
    Refusal.objects.create(text="refused")
    write_note("refused", secret=SECRET)
    relay()
    consume("archive")

    letter = DeadLetter.objects.get()
    assert (letter.consumer, letter.reason) == ("archive", "invalid_payload")
    assert SECRET.encode() not in bytes(letter.body)
    assert json.loads(bytes(letter.body))["secret"] == OutboxMessage.objects.get().payload["secret"]
    shown = json.loads(dead_letter_display_body(letter))
    assert shown["secret"] == "encrypted for archive (key tests-1)"


def test_an_edit_that_leaves_the_encrypted_value_as_shown_keeps_the_ciphertext(db):
    write_note("fine", secret=SECRET)
    row = OutboxMessage.objects.get()
    dead = dead_letter_record(
        consumer="archive",
        body=json.dumps(row.payload).encode(),
        properties={"message_id": str(row.event_id), "correlation_id": row.correlation_id},
        headers={"event_type": EVENT, "schema_version": 1},
        routing_key=EVENT,
        reason="handler_error",
        error="RuntimeError: the shelf fell",
    )
    shown = json.loads(dead_letter_payload_text(dead))
    assert shown["secret"] == "encrypted for archive (key tests-1)"

    edit = dead_letter_edit(dead.pk, json.dumps({**shown, "text": "fixed"}), by="ada", via="admin")

    assert json.loads(bytes(edit.body)) == {**row.payload, "text": "fixed"}
    assert edit.diff == [{"op": "replace", "path": "/text", "old": "fine", "new": "fixed"}]


def test_keys_rotate_with_messages_in_flight(seen, settings):
    write_note("fine", secret="tok_written_before")
    keys = settings.MESSAGING["ENCRYPTION_KEYS"]
    settings.MESSAGING = {**settings.MESSAGING, "ENCRYPTION_KEYS": {**keys, "tests-2": NEW_KEY}}
    write_note("fine", secret="tok_written_after")

    rows = OutboxMessage.objects.order_by("created_at", "id")
    assert [sealed(row)["kid"] for row in rows] == ["tests-1", "tests-2"]
    relay()
    consume("archive")
    # both handled, whichever arrives first
    assert sorted(payload["secret"] for who, payload in seen if who == "archive") == [
        "tok_written_after",
        "tok_written_before",
    ]


def test_a_key_no_longer_listed_is_a_dead_letter_naming_it(seen, settings):
    write_note("fine", secret=SECRET)
    settings.MESSAGING = {**settings.MESSAGING, "ENCRYPTION_KEYS": {"tests-2": NEW_KEY}}
    relay()
    consume("archive")

    assert seen == []
    letter = DeadLetter.objects.get()
    assert (letter.consumer, letter.reason, letter.error) == (
        "archive",
        "undecryptable",
        "field 'secret': key id 'tests-1' is not in MESSAGING['ENCRYPTION_KEYS'] (tests-2): "
        "add it back, then replay this dead letter",
    )


def flip_last_byte(text: str) -> str:
    raw = base64.b64decode(text)
    return base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda s: {**s, "ct": flip_last_byte(s["ct"])}, id="ciphertext"),
        pytest.param(lambda s: {**s, "for": ["archive", "retrying"]}, id="readers"),
    ],
)
def test_a_tampered_value_is_a_dead_letter_with_its_reason(db, tamper):
    write_note("fine", secret=SECRET)
    payload = OutboxMessage.objects.get().payload
    payload["secret"] = {"$encrypted": tamper(payload["secret"]["$encrypted"])}

    delivered = deliver("archive", EVENT, payload)

    assert (delivered.outcome, delivered.reason, delivered.error) == (
        Outcome.DEAD_LETTER,
        "undecryptable",
        "field 'secret': the ciphertext fails authentication under key 'tests-1' "
        "(tampered with, or moved from another event, field or reader list)",
    )
    assert Filed.objects.count() == 0


def test_the_event_log_keeps_the_ciphertext(db):
    write_note("fine", secret=SECRET)
    row = OutboxMessage.objects.get()
    event = IncomingEvent(
        message_id=str(row.event_id),
        event_type=EVENT,
        schema_version=1,
        payload=row.payload,
        headers={"occurred_at": row.created_at.isoformat()},
    )

    event_log_record([event])

    assert EventLogEntry.objects.get().payload == row.payload


def test_a_reader_without_the_crypto_extra_dead_letters_with_its_fix(db, monkeypatch):
    # a deployment that carries no declaration of encrypted fields is not refused at start-up
    write_note("fine", secret=SECRET)
    payload = OutboxMessage.objects.get().payload
    monkeypatch.setitem(sys.modules, "cryptography.exceptions", None)  # importing it fails

    delivered = deliver("archive", EVENT, payload)

    assert (delivered.outcome, delivered.reason, delivered.error) == (
        Outcome.DEAD_LETTER,
        "undecryptable",
        "field 'secret': the cryptography library is missing: install django-reliable-messaging[crypto], "
        "then replay this dead letter",
    )


def test_an_older_version_that_requires_the_field_carries_it_clear(monkeypatch):
    # as if notes.note.written had a v1 released before its secret was declared encrypted (v1
    # requires it) and a v2 that does not: v1, written only under a rollout's pin, keeps it clear
    from pathlib import Path

    from reliable_messaging import _field_crypto
    from reliable_messaging._schema_catalog import EventSchema

    def version(n: int, required: list[str]) -> EventSchema:
        return EventSchema(EVENT, n, {"type": "object", "required": required}, Path(f"{EVENT}.v{n}.json"))

    catalog = {(EVENT, 1): version(1, ["note_id", "secret"]), (EVENT, 2): version(2, ["note_id"])}
    monkeypatch.setattr(_field_crypto, "schemas", lambda: catalog)
    monkeypatch.setattr(_field_crypto, "newest_version", lambda event_type: 2)
    payload = {"note_id": 1, "secret": SECRET}

    assert _field_crypto.encrypt_fields(EVENT, 1, payload) == payload
    assert set(_field_crypto.encrypt_fields(EVENT, 2, payload)["secret"]) == {"$encrypted"}
    _field_crypto.check_encryption()  # the older version's required field does not stop the start

    catalog[(EVENT, 2)] = version(2, ["note_id", "secret"])
    with pytest.raises(ImproperlyConfigured, match=rf"^{EVENT}.v2.json requires 'secret', which its producer"):
        _field_crypto.check_encryption()
