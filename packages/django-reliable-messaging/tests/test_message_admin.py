"""The bus's admin (/admin/messaging/...): its pages for staff only, search by message id, the
outbox's backlog at the top of its list, short ids with the full one on hover, the actions and the
object buttons (replay, purge, retry a parked row) asking first and needing more than the view
permission, a list's dates written one way."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.test import Client
from django.utils import timezone
from notes.services import write_note
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import DeadLetter, EventLogEntry, OutboxMessage

from conftest import amqp, drained

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    return client


@pytest.fixture
def written() -> OutboxMessage:
    """A note just written: its notes.note.written waits in the outbox."""
    note = write_note("hello")
    return OutboxMessage.objects.get(event_type="notes.note.written", aggregate_id=str(note.id))


@pytest.fixture
def archive_queue(empty_queues):
    """What the archive's queue received during the test (RabbitMQ only: None on the embedded broker)."""
    return (lambda: drained("archive_queue")) if amqp() else None


def letter_for(correlation_id: str, message_id: str) -> DeadLetter:
    return dead_letter_record(
        consumer="archive",
        body=json.dumps({"note_id": correlation_id, "text": "hello"}).encode(),
        properties={"message_id": message_id, "correlation_id": correlation_id},
        headers={"event_type": "notes.note.written", "schema_version": 1},
        routing_key="notes.note.written",
        reason="handler_error",
        error="TransientError: the shelf is busy",
    )


def admin_urls(row: OutboxMessage) -> list[str]:
    letter = dead_letter_record(
        consumer="archive", body=b"{}", properties={"message_id": "m-1"}, headers={}, routing_key="x",
        reason="handler_error",
    )  # fmt: skip
    entry = EventLogEntry.objects.create(message_id="m-2", event_type="notes.note.written", correlation_id="c")
    return [
        "/admin/messaging/outboxmessage/",
        "/admin/messaging/outboxmessage/?state=pending",
        "/admin/messaging/outboxmessage/?state=published",
        "/admin/messaging/outboxmessage/?state=parked",
        f"/admin/messaging/outboxmessage/?q={row.event_id}",
        f"/admin/messaging/outboxmessage/?q={row.correlation_id}",
        "/admin/messaging/outboxmessage/?q=notes.note",
        "/admin/messaging/outboxmessage/?q=not-a-uuid",
        f"/admin/messaging/outboxmessage/{row.pk}/change/",
        "/admin/messaging/inboxmessage/?consumer=archive&q=m-1",
        "/admin/messaging/eventlogentry/",
        f"/admin/messaging/eventlogentry/{entry.pk}/change/",
        "/admin/messaging/deadletter/",
        f"/admin/messaging/deadletter/{letter.pk}/change/",
    ]


def test_every_admin_page_renders_for_staff(staff, written):
    statuses = {url: staff.get(url).status_code for url in admin_urls(written)}
    assert statuses == dict.fromkeys(statuses, 200)


def test_admin_pages_refuse_anonymous_and_non_staff_users(written):
    urls = admin_urls(written)
    user = Client()
    user.force_login(User.objects.create_user("user", password="x"))
    for client in (Client(), user):
        for url in urls:
            response = client.get(url)
            assert response.status_code == 302, url
            assert response["Location"].startswith("/admin/login/"), url


def test_search_by_message_id_finds_exactly_that_row(staff, written):
    write_note("another")
    response = staff.get(f"/admin/messaging/outboxmessage/?q={written.event_id}")
    assert [r.pk for r in response.context["cl"].result_list] == [written.pk]
    assert staff.get("/admin/messaging/outboxmessage/?q=not-a-uuid").context["cl"].result_count == 0


def test_the_outbox_list_shows_its_backlog_at_the_top(staff, written):
    OutboxMessage.objects.filter(pk=written.pk).update(created_at=timezone.now() - timedelta(minutes=3))
    response = staff.get("/admin/messaging/outboxmessage/")
    assert response.context["backlog"].pending == 1
    assert 180 <= response.context["backlog"].oldest_pending_age < 240
    assert 'id="outbox-backlog"' in response.content.decode()
    assert "3m 0" in response.content.decode()


def test_retry_parked_action_gives_only_parked_rows_a_fresh_start(staff, written):
    with transaction.atomic():
        parked = OutboxMessage.objects.create(
            source="notes",
            event_type="notes.note.priced",
            aggregate_type="note",
            aggregate_id=written.aggregate_id,
            correlation_id=written.correlation_id,
            payload={},
            attempts=10,
            last_error="returned by the broker: NO_ROUTE",
            parked_at=timezone.now(),
        )

    response = staff.post(
        "/admin/messaging/outboxmessage/",
        {"action": "retry_parked", "_selected_action": [written.pk, parked.pk]},
        follow=True,
    )

    assert response.status_code == 200
    parked.refresh_from_db()
    assert (parked.parked_at, parked.attempts, parked.next_attempt_at) == (None, 0, None)
    assert [str(m) for m in response.context["messages"]] == [
        "1 parked row(s) will be published again.",
        "1 selected row(s) were not parked: unchanged.",
    ]


def test_replay_action_sends_the_dead_letter_to_its_consumer(staff, archive_queue):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))

    response = staff.post(
        "/admin/messaging/deadletter/", {"action": "replay", "_selected_action": [letter.pk]}, follow=True
    )

    assert [str(m) for m in response.context["messages"]] == [f"#{letter.pk} replayed to archive"]
    if archive_queue:
        assert [message_id for message_id, _, _ in archive_queue()] == [letter.message_id]
    letter.refresh_from_db()
    assert letter.replay_count == 1


def test_replay_action_reports_a_broker_that_is_down(staff, settings):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))
    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"}

    response = staff.post(
        "/admin/messaging/deadletter/", {"action": "replay", "_selected_action": [letter.pk]}, follow=True
    )

    assert response.status_code == 200
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("Nothing replayed: ")
    assert DeadLetter.objects.get(pk=letter.pk).replay_count == 0


def test_purge_action_asks_first_then_deletes(staff):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))
    kept = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))
    form = {"action": "purge", "_selected_action": [letter.pk]}

    asked = staff.post("/admin/messaging/deadletter/", form)
    assert asked.status_code == 200
    assert "Yes, purge them" in asked.content.decode()
    assert DeadLetter.objects.count() == 2

    done = staff.post("/admin/messaging/deadletter/", {**form, "confirm": "yes"}, follow=True)
    assert [str(m) for m in done.context["messages"]] == ["1 dead letter(s) purged."]
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [kept.pk]


def test_staff_with_view_permission_only_cannot_run_actions():
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_deadletter", "view_outboxmessage"]))
    client = Client()
    client.force_login(viewer)
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))

    listing = client.get("/admin/messaging/deadletter/")
    assert listing.status_code == 200
    assert listing.context["action_form"] is None  # no actions offered
    client.post("/admin/messaging/deadletter/", {"action": "purge", "confirm": "yes", "_selected_action": [letter.pk]})
    assert DeadLetter.objects.filter(pk=letter.pk).exists()


def test_the_outbox_and_dead_letter_lists_show_short_ids_with_the_full_id_on_hover(staff, written):
    letter = letter_for(written.correlation_id, str(uuid.uuid4()))
    full_ids = {
        "/admin/messaging/outboxmessage/": str(written.event_id),
        "/admin/messaging/deadletter/": letter.message_id,
    }

    for url, full in full_ids.items():
        html = staff.get(url).content.decode()
        assert f'title="{full}">…{full[-8:]}</span>' in html, url
        assert f">{full}<" not in html, url  # never spelled out in a cell


def test_the_outbox_list_shows_an_aggregate_id_that_is_no_uuid_whole(staff):
    with transaction.atomic():
        OutboxMessage.objects.create(
            source="notes",
            aggregate_type="shelf",
            aggregate_id="LIMITED-PRINT",
            event_type="notes.note.written",
            correlation_id="LIMITED-PRINT",
            payload={},
        )

    html = staff.get("/admin/messaging/outboxmessage/").content.decode()

    assert '<td class="field-aggregate">LIMITED-PRINT</td>' in html
    assert "…ED-PRINT" not in html


def test_a_dead_letter_page_offers_its_actions(staff):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))

    html = staff.get(f"/admin/messaging/deadletter/{letter.pk}/change/").content.decode()

    for action in ("replay", "replay-new-id", "purge"):
        assert f'href="/admin/messaging/deadletter/{letter.pk}/{action}/"' in html, action


def test_a_dead_letter_button_asks_first_then_replays(staff, archive_queue):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))
    url = f"/admin/messaging/deadletter/{letter.pk}/replay/"

    asked = staff.get(url)
    assert asked.status_code == 200 and "same message id" in asked.content.decode()
    assert DeadLetter.objects.get(pk=letter.pk).replayed_at is None
    assert staff.post(url, {}).status_code == 200  # no confirmation: asks again, does nothing
    assert DeadLetter.objects.get(pk=letter.pk).replayed_at is None
    if archive_queue:
        assert archive_queue() == []

    done = staff.post(url, {"confirm": "yes"}, follow=True)

    assert done.redirect_chain == [(f"/admin/messaging/deadletter/{letter.pk}/change/", 302)]
    assert f"#{letter.pk} replayed to archive" in done.content.decode()
    assert DeadLetter.objects.get(pk=letter.pk).replay_count == 1
    if archive_queue:
        assert [message_id for message_id, _, _ in archive_queue()] == [letter.message_id]


def test_a_dead_letter_button_purges_after_confirmation(staff):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))
    kept = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))

    done = staff.post(f"/admin/messaging/deadletter/{letter.pk}/purge/", {"confirm": "yes"}, follow=True)

    assert done.redirect_chain == [("/admin/messaging/deadletter/", 302)]
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [kept.pk]


def test_a_parked_outbox_row_has_a_retry_button(staff, written):
    OutboxMessage.objects.filter(pk=written.pk).update(parked_at=timezone.now(), attempts=10, last_error="refused")

    html = staff.get(f"/admin/messaging/outboxmessage/{written.pk}/change/").content.decode()
    assert f'href="/admin/messaging/outboxmessage/{written.pk}/retry/"' in html
    staff.post(f"/admin/messaging/outboxmessage/{written.pk}/retry/", {"confirm": "yes"})

    written.refresh_from_db()
    assert (written.parked_at, written.attempts, written.state) == (None, 0, "pending")


def test_object_buttons_need_more_than_view_permission():
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename="view_deadletter"))
    client = Client()
    client.force_login(viewer)
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))

    html = client.get(f"/admin/messaging/deadletter/{letter.pk}/change/").content.decode()
    assert "/replay/" not in html and "/purge/" not in html
    for action in ("replay", "replay-new-id", "purge"):
        assert client.post(f"/admin/messaging/deadletter/{letter.pk}/{action}/", {"confirm": "yes"}).status_code == 403
    assert DeadLetter.objects.get(pk=letter.pk).replayed_at is None


def test_the_dead_letter_list_writes_its_dates_one_way(staff):
    letter = letter_for(str(uuid.uuid4()), str(uuid.uuid4()))
    moment = datetime(2026, 11, 24, 17, 34, 28, tzinfo=UTC)
    DeadLetter.objects.filter(pk=letter.pk).update(first_failed_at=moment, last_failed_at=moment)

    # A list's instants are the bus's own (an object's fields are in the host's DATETIME_FORMAT).
    html = staff.get("/admin/messaging/deadletter/").content.decode()
    assert '<span class="nowrap">2026-11-24</span> <span class="nowrap">17:34:28</span>' in html
    assert "Nov. 24, 2026" not in html and "11-24 17:34" not in html.replace("2026-11-24 17:34", "")


def test_the_replay_action_refuses_a_dead_letter_whose_recorded_producer_fails_the_check(
    staff, settings, archive_queue
):
    settings.MESSAGING = {
        **settings.MESSAGING,
        "PRODUCERS": {"notes": "notes_user", "archive": "archive_user"},
        "BROKER_USER": "archive_user",
    }
    forged, genuine = (
        dead_letter_record(
            consumer="archive",
            body=json.dumps({"note_id": str(uuid.uuid4()), "text": "hello"}).encode(),
            properties={"message_id": str(uuid.uuid4()), "user_id": user},
            headers={"event_type": "notes.note.written", "schema_version": 1},
            routing_key="archive_queue",
            reason=reason,
        )
        for user, reason in (("mallory", "unauthenticated_producer"), ("notes_user", "handler_error"))
    )

    response = staff.post(
        "/admin/messaging/deadletter/", {"action": "replay", "_selected_action": [forged.pk, genuine.pk]}, follow=True
    )

    assert [str(m) for m in response.context["messages"]] == [
        f"#{forged.pk} NOT replayed: its producer is not accepted: notes.note.written belongs to notes, whose "
        "broker user is 'notes_user'; this message's user_id is 'mallory' (recorded when it was dead-lettered)",
        f"#{genuine.pk} replayed to archive",
    ]
    assert dict(DeadLetter.objects.values_list("pk", "replay_count")) == {forged.pk: 0, genuine.pk: 1}
    if archive_queue:
        assert [message_id for message_id, _, _ in archive_queue()] == [genuine.message_id]
