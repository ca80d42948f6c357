"""The claim check (issue 47, item 5), through the relay and consumer processes: a payload over
CLAIM_CHECK_BYTES is stored apart by the relay, its message carries ``{}`` and a reference, the
consumer fetches it before its transaction; a forged or tampered reference is a dead letter; the
stored payload goes with the last row that refers to it; a dead letter of one replays."""

import hashlib
import io
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from kombu import Queue
from reliable_messaging import _broker as broker
from reliable_messaging import _claim_check as claim_check
from reliable_messaging._dead_letters import dead_letter_display_body, dead_letter_payload_text, dead_letter_replay
from reliable_messaging._envelope import Envelope, content_hash, encode_body
from reliable_messaging._publisher import BatchPublisher
from reliable_messaging.api import publish
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage

PRICED = "notes.note.priced"
ON = {"CLAIM_CHECK_BYTES": 1024}
STORED = Path("var/claim-check")


def priced(remark: str = "r" * 2000) -> str:
    """A priced note whose remark makes the payload as large as wanted; its message id."""
    payload = {
        "note_id": str(uuid.uuid4()),
        "total": {"amount": "1.00", "currency": "USD"},
        "lines": [{"word": "large", "count": 1}],
        "words": 1,
        "reason": "priced_by_word",
        "remark": remark,
    }
    with transaction.atomic():
        event_id = publish(event_type=PRICED, payload=payload, aggregate_type="note", aggregate_id=payload["note_id"])
    return str(event_id)


def relayed_body(message_id: str) -> bytes:
    """The payload as the relay encodes it (PostgreSQL's jsonb keeps its own key order)."""
    return encode_body(OutboxMessage.objects.get(event_id=message_id).payload)


def waiting() -> list[tuple[bytes, dict[str, Any]]]:
    """The messages in archive_queue (body, headers), left there."""
    with broker.connect() as connection:
        connection.connect()
        queue = Queue("archive_queue")(connection.default_channel)
        taken = []
        while (message := queue.get(no_ack=False)) is not None:
            taken.append(message)
        seen = [(m.body if isinstance(m.body, bytes) else m.body.encode(), dict(m.headers)) for m in taken]
        for message in taken:
            message.requeue()
    return seen


def send(*messages: tuple[str, dict[str, Any]]) -> None:
    """(message id, claim check) messages of priced notes, straight into archive_queue."""
    with broker.connect() as connection:
        connection.connect()
        broker.declare_topology(connection)
        publisher = BatchPublisher(connection, 15.0)
        envelopes = [
            Envelope(
                message_id=message_id,
                exchange="",
                routing_key="archive_queue",
                body=claim_check.BODY,
                correlation_id=message_id,
                headers={"event_type": PRICED, "schema_version": 2, claim_check.HEADER: reference},
            )
            for message_id, reference in messages
        ]
        assert publisher.publish(envelopes).failed == {}
        publisher.close()


def purged() -> str:
    out = io.StringIO()
    with override_settings(MESSAGING={**settings.MESSAGING, **ON}):
        call_command("purge_messages", stdout=out)
    return out.getvalue().strip()


def handled_hash(message_id: str) -> str:
    return InboxMessage.objects.get(consumer="archive", message_id=message_id).content_hash


def expected_hash(body: bytes) -> str:
    return content_hash(PRICED, 2, json.loads(body))


def test_a_large_payload_travels_apart_and_its_handler_sees_it_whole(manage, with_settings, workdir):
    processes = with_settings(**ON)
    message_id = priced("r" * 50_000)
    body = relayed_body(message_id)

    processes("run_outbox_relay", "--once")

    [(wire_body, headers)] = waiting()
    assert wire_body == b"{}"
    [stored] = (workdir / STORED / PRICED).iterdir()
    assert re.fullmatch(rf"{message_id}\.[0-9a-f]{{32}}\.json", stored.name)
    assert stored.read_bytes() == body
    key = f"{PRICED}/{stored.name}"
    assert headers[claim_check.HEADER] == {"key": key, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}

    processes("run_consumers", "archive", "--once")

    assert handled_hash(message_id) == expected_hash(body)
    assert DeadLetter.objects.count() == 0
    # Kept while its outbox row is, removed with it.
    assert purged() == "deleted: outbox 0, inbox 0, event log 0, dead letters 0, stored payloads 0"
    OutboxMessage.objects.update(published_at=timezone.now() - timedelta(days=8))
    assert purged() == "deleted: outbox 1, inbox 0, event log 0, dead letters 0, stored payloads 1"
    assert list((workdir / STORED / PRICED).iterdir()) == []


def test_a_forged_or_tampered_reference_is_a_dead_letter(manage, with_settings, workdir):
    stored_id, tampered_id, forged_id, escaping_id = (str(uuid.uuid4()) for _ in range(4))
    body = encode_body({"remark": "s" * 2000})
    stored = claim_check.store(PRICED, stored_id, body)
    tampered = claim_check.store(PRICED, tampered_id, body)
    (workdir / STORED / tampered["key"]).write_bytes(body.replace(b"s", b"t"))  # same size, other bytes
    outside = {**stored, "key": f"{PRICED}/../../../settings.py"}
    send((tampered_id, tampered), (forged_id, stored), (escaping_id, outside))

    with_settings(**ON)("run_consumers", "archive", "--once")

    assert sorted(DeadLetter.objects.values_list("message_id", "reason")) == sorted(
        [
            (tampered_id, "claim_check_mismatch"),
            (forged_id, "invalid_claim_check"),
            (escaping_id, "invalid_claim_check"),
        ]
    )
    forged = DeadLetter.objects.get(message_id=forged_id)
    assert forged.error == (
        f"the key '{stored['key']}' is not where the relay stores this message's payload "
        f"({PRICED}/{forged_id}.<random>.json)"
    )
    assert InboxMessage.objects.count() == 0


def test_a_dead_letter_keeps_its_stored_payload_and_replays(manage, with_settings, workdir):
    processes = with_settings(**ON)
    message_id = priced("d" * 20_000)
    body = relayed_body(message_id)
    processes("run_outbox_relay", "--once")
    [stored] = (workdir / STORED / PRICED).iterdir()
    away = stored.rename(workdir / "away.json")  # the storage lost it for a while

    processes("run_consumers", "archive", "--once")

    dead = DeadLetter.objects.get(message_id=message_id)
    assert (dead.reason, bytes(dead.body)) == ("claim_check_missing", b"{}")
    assert dead_letter_display_body(dead).endswith(
        f"(its payload travelled apart and cannot be read now: no payload is stored at {PRICED}/{stored.name} "
        "(purged, or another storage))"
    )
    away.rename(stored)
    # What an operator reads and edits (dead_letters show, the admin) is the payload as stored, not {}.
    assert json.loads(dead_letter_display_body(dead))["remark"] == "d" * 20_000
    assert json.loads(dead_letter_payload_text(dead)) == json.loads(body)
    OutboxMessage.objects.update(published_at=timezone.now() - timedelta(days=8))
    assert purged() == "deleted: outbox 1, inbox 0, event log 0, dead letters 0, stored payloads 0"
    assert stored.read_bytes() == body  # the waiting dead letter still refers to it

    [outcome] = dead_letter_replay(ids=[dead.pk])
    assert outcome.replayed
    processes("run_consumers", "archive", "--once")

    assert handled_hash(message_id) == expected_hash(body)
    DeadLetter.objects.update(replayed_at=timezone.now() - timedelta(days=8))
    assert purged() == "deleted: outbox 0, inbox 0, event log 0, dead letters 1, stored payloads 1"
    assert not stored.exists()
