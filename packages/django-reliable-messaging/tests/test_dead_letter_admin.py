"""The admin's side of issue 47, item 2: a waiting dead letter's edit page (the payload checked
against its schema, the refusal shown in the form), its audit trail on the dead letter's page, and
the dead letters counted per reason and event type, each count a link to those letters."""

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils.html import escape
from reliable_messaging._dead_letters import dead_letter_edit
from reliable_messaging.models import DeadLetter, DeadLetterEdit
from test_dead_letter_edit import drained, letter, message_id_of, payload_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    return client


def viewer() -> Client:
    """Staff who may view dead letters, not operate them."""
    user = User.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename="view_deadletter"))
    client = Client()
    client.force_login(user)
    return client


def said(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_edit_page_offers_the_payload_and_shows_a_refusal_in_the_form_changing_nothing(staff):
    dead = letter("too long")
    url = f"/admin/messaging/deadletter/{dead.pk}/edit/"

    page = staff.get(url)
    refused = staff.post(url, {"payload": json.dumps({**payload_of(dead), "text": ""})})

    assert page.status_code == 200
    assert json.loads(page.context["form"].initial["payload"]) == payload_of(dead)
    assert '<code class="ops-mono">notes.note.written v1</code>' in page.content.decode()
    assert refused.status_code == 200
    assert refused.context["form"].errors == {
        "payload": ["invalid_payload: notes.note.written v1 at text: '' should be non-empty"]
    }
    assert escape("at text: '' should be non-empty") in refused.content.decode()
    assert DeadLetterEdit.objects.count() == 0
    assert staff.post(url, {"payload": "[1]"}).context["form"].errors == {
        "payload": ["the payload is not a JSON object (an event's payload is one): list"]
    }


def test_an_accepted_edit_names_the_staff_user_and_the_dead_letters_page_shows_the_trail(staff):
    dead = letter("too long")
    change = f"/admin/messaging/deadletter/{dead.pk}/change/"

    done = staff.post(
        f"/admin/messaging/deadletter/{dead.pk}/edit/",
        {"payload": json.dumps({**payload_of(dead), "text": "fixed"}), "_save": "Save the edit"},
        follow=True,
    )

    edit = DeadLetterEdit.objects.get()
    assert done.redirect_chain == [(change, 302)]
    assert said(done) == [
        f"Dead letter #{dead.pk} edited (edit #{edit.pk}, 1 change(s)): its replay publishes the edit as a new message."
    ]
    assert (edit.edited_by, edit.via, edit.replayed_at) == ("ops", "admin", None)
    html = done.content.decode()
    assert 'id="edit-trail"' in html
    assert escape('~ /text: "too long" -> "fixed"') in html
    assert '<pre class="ops-pre" id="edited-payload">' in html and escape('"text": "fixed"') in html
    assert escape('"text": "too long"') in html  # the body as received, still shown
    assert bytes(DeadLetter.objects.get(pk=dead.pk).body) == json.dumps(payload_of(dead)).encode()


@pytest.mark.usefixtures("workdir", "empty_queues")  # the test's own broker folder, or emptied queues
def test_save_and_replay_publishes_the_edit_once_as_a_new_message(staff):
    dead = letter("too long")

    done = staff.post(
        f"/admin/messaging/deadletter/{dead.pk}/edit/",
        {"payload": json.dumps({**payload_of(dead), "text": "fixed"}), "_replay": "Save and replay"},
        follow=True,
    )

    edit = DeadLetterEdit.objects.get()
    assert said(done)[1:] == [f"#{dead.pk} replayed to archive: edited (edit #{edit.pk}): as a new message "
                              f"{edit.replayed_as}"]  # fmt: skip
    [message] = drained()
    assert (message_id_of(message), json.loads(message.body)["text"]) == (edit.replayed_as, "fixed")
    assert escape(edit.replayed_as) in done.content.decode()  # the trail says what it was replayed as
    assert f'href="/admin/messaging/deadletter/{dead.pk}/edit/"' not in done.content.decode()  # replayed: no edit


def test_the_edit_is_offered_for_a_waiting_dead_letter_to_who_may_operate_it_only(staff):
    waiting, replayed = letter(), letter()
    DeadLetter.objects.filter(pk=replayed.pk).update(replayed_at="2026-11-24T17:34:28Z")

    def offered(client: Client, dead: DeadLetter) -> bool:
        html = client.get(f"/admin/messaging/deadletter/{dead.pk}/change/").content.decode()
        return f'href="/admin/messaging/deadletter/{dead.pk}/edit/"' in html

    assert (offered(staff, waiting), offered(staff, replayed)) == (True, False)
    back = staff.get(f"/admin/messaging/deadletter/{replayed.pk}/edit/", follow=True)
    assert back.redirect_chain == [(f"/admin/messaging/deadletter/{replayed.pk}/change/", 302)]
    assert said(back) == [f"Dead letter #{replayed.pk} was replayed: only a waiting one is edited."]
    looker = viewer()
    assert offered(looker, waiting) is False
    payload = json.dumps({**payload_of(waiting), "text": "x"})
    assert looker.get(f"/admin/messaging/deadletter/{waiting.pk}/edit/").status_code == 403
    assert looker.post(f"/admin/messaging/deadletter/{waiting.pk}/edit/", {"payload": payload}).status_code == 403
    assert DeadLetterEdit.objects.count() == 0


def test_dead_letters_are_counted_per_reason_and_event_type_each_count_a_link_to_them(staff):
    written, erased = "notes.note.written", "notes.note.erased"
    handler = [letter(reason="handler_error") for _ in range(3)]
    invalid = [letter(reason="invalid_payload"), letter(reason="invalid_payload")]
    other = letter(reason="handler_error", event_type=erased)
    DeadLetter.objects.filter(pk=handler[2].pk).update(replayed_at="2026-11-24T17:34:28Z")
    DeadLetter.objects.filter(pk=invalid[1].pk).update(consumer="ledger")

    page = staff.get("/admin/messaging/deadletter/grouped/")

    rows = [(r["group"].reason, r["group"].event_type, r["group"].waiting, r["group"].replayed) for r in
            page.context["groups"]]  # fmt: skip
    assert rows == [
        ("handler_error", written, 2, 1),
        ("invalid_payload", written, 2, 0),
        ("handler_error", erased, 1, 0),
    ]
    first = page.context["groups"][0]
    assert first["waiting_url"] == (
        "/admin/messaging/deadletter/?reason=handler_error&event_type=notes.note.written&state=waiting"
    )
    assert escape(first["waiting_url"]) in page.content.decode()
    listed = staff.get(first["waiting_url"]).context["cl"]
    assert sorted(d.pk for d in listed.result_list) == sorted(d.pk for d in handler[:2])
    assert [d.pk for d in staff.get(first["replayed_url"]).context["cl"].result_list] == [handler[2].pk]
    assert [d.pk for d in staff.get(page.context["groups"][2]["all_url"]).context["cl"].result_list] == [other.pk]

    ledger = staff.get("/admin/messaging/deadletter/grouped/?consumer=ledger")

    assert [(r["group"].reason, r["group"].waiting) for r in ledger.context["groups"]] == [("invalid_payload", 1)]
    assert ledger.context["groups"][0]["waiting_url"] == (
        "/admin/messaging/deadletter/?consumer=ledger&reason=invalid_payload&event_type=notes.note.written"
        "&state=waiting"
    )
    assert [d.pk for d in staff.get(ledger.context["groups"][0]["waiting_url"]).context["cl"].result_list] == [
        invalid[1].pk
    ]


def test_the_grouped_page_is_linked_from_the_list_and_needs_the_view_permission(staff):
    letter()

    assert 'href="/admin/messaging/deadletter/grouped/"' in staff.get("/admin/messaging/deadletter/").content.decode()
    assert viewer().get("/admin/messaging/deadletter/grouped/").status_code == 200
    nobody = User.objects.create_user("nobody", password="x", is_staff=True)
    client = Client()
    client.force_login(nobody)
    assert client.get("/admin/messaging/deadletter/grouped/").status_code == 403


def test_the_list_filters_edited_ones_and_shows_which_are(staff):
    edited, plain = letter(), letter()
    dead_letter_edit(edited.pk, json.dumps({**payload_of(edited), "text": "x"}), by="ops", via="admin")

    only_edited = staff.get("/admin/messaging/deadletter/?state=edited").context["cl"]
    every = staff.get("/admin/messaging/deadletter/").context["cl"]

    assert [d.pk for d in only_edited.result_list] == [edited.pk]
    assert {d.pk: d.edited for d in every.result_list} == {edited.pk: True, plain.pk: False}
