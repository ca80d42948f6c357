"""A broker user per context (MESSAGING["PRODUCERS"]): ``broker_permissions`` says what RabbitMQ
should let each user do, and what RabbitMQ cannot refuse (a publish straight into a queue) the
consumer refuses as ``unauthenticated_producer``, with no effect. RabbitMQ's own refusals (topic
permissions, a user_id that is not the connection's) need users of its own: the host's tests."""

import json
import os
import uuid
from urllib.parse import unquote, urlsplit

import pytest
from archive.models import Filed
from reliable_messaging.models import DeadLetter, InboxMessage

from conftest import amqp, amqp_connection

PRODUCERS = {"notes": "notes_user", "archive": "archive_user"}


def test_broker_permissions_give_each_user_its_own_routing_keys_and_queues(manage, with_settings):
    printed = with_settings(PRODUCERS=PRODUCERS)("broker_permissions").stdout

    vhost = (unquote(urlsplit(os.environ["BROKER_URL"]).path[1:]) or "/") if amqp() else "/"
    assert "# notes_user: publishes notes; consumes nothing" in printed
    assert "# archive_user: publishes archive; consumes archive" in printed
    assert f"rabbitmqctl set_topic_permissions -p {vhost} notes_user events '^(notes)\\.' '.*'" in printed
    assert f"rabbitmqctl set_topic_permissions -p {vhost} archive_user events '^(archive)\\.' '.*'" in printed


def test_broker_permissions_without_producers_says_what_to_set(manage):
    refused = manage("broker_permissions", ok=False)

    assert refused.returncode == 1
    assert "BROKER_PRODUCERS is not set: name each context's broker user, <context>=<user>,..." in refused.stderr


@pytest.mark.skipif(not amqp(), reason="a message's user_id is RabbitMQ's")
def test_a_message_no_owner_published_is_a_dead_letter_with_no_effect(manage, with_settings):
    import amqp as py_amqp

    manage("run_consumers", "--once")  # the whole topology declared, as broker_permissions --apply does
    deployment = with_settings(PRODUCERS=PRODUCERS, BROKER_USER="archive_user")
    parts = urlsplit(os.environ["BROKER_URL"].split(";")[0])
    user = unquote(parts.username or "guest")
    forged, anonymous = str(uuid.uuid4()), str(uuid.uuid4())
    with amqp_connection() as broker:
        channel = broker.channel()
        for message_id, user_id in [(forged, {"user_id": user}), (anonymous, {})]:
            body = json.dumps({"note_id": str(uuid.uuid4()), "text": "forged"}).encode()
            headers = {"event_type": "notes.note.written", "schema_version": 1}
            message = py_amqp.Message(body, application_headers=headers, message_id=message_id, **user_id)
            channel.basic_publish_confirm(message, exchange="", routing_key="archive_queue")

    deployment("run_consumers", "--once")

    letters = {(d.message_id, d.reason): d.error for d in DeadLetter.objects.all()}
    assert set(letters) == {(forged, "unauthenticated_producer"), (anonymous, "unauthenticated_producer")}
    assert letters[forged, "unauthenticated_producer"] == (
        f"notes.note.written belongs to notes, whose broker user is 'notes_user'; this message's user_id is '{user}'"
    )
    assert letters[anonymous, "unauthenticated_producer"] == (
        "notes.note.written belongs to notes, whose broker user is 'notes_user'; this message's user_id is None"
    )
    assert not InboxMessage.objects.exists()
    assert not Filed.objects.exists()
