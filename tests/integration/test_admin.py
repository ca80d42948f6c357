"""The shop's operator console: the order's saga timeline, the overview, the orders' admin, a dead
letter's link to its order. The bus's own admin (outbox, inbox, event log, dead letters: search,
backlog, actions, buttons, permissions) is the package's test:
packages/django-reliable-messaging/tests/test_message_admin.py."""

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.template.defaultfilters import floatformat
from django.test import Client
from django.utils import timezone
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging._declarations import installed, names
from reliable_messaging._topology import consumers
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage

pytestmark = pytest.mark.django_db


def created_row(order_id: str) -> OutboxMessage:
    return OutboxMessage.objects.get(correlation_id=order_id, event_type="orders.order.created")


def order_page(client: Client, order_id: str):
    response = client.get(f"/admin/orders/order/{order_id}/change/")
    assert response.status_code == 200
    return response


def waiting(response) -> list[tuple[str, str, str | None]]:
    return [(w.kind, w.event_type, w.consumer) for w in response.context["saga"]["waiting"]]


def test_a_fresh_order_waits_in_the_outbox(staff, order_id):
    row = created_row(order_id)

    response = order_page(staff, order_id)

    assert waiting(response) == [("pending", "orders.order.created", None)]
    html = response.content.decode()
    assert str(row.event_id) in html  # the full message id
    assert "in the outbox" in html and "pending in the outbox" in html


def test_the_order_page_shows_who_handled_what_and_where_the_saga_is_stuck(staff, order_id):
    from orders.models import Order  # the context's own: the file collects without it

    # Given: the order was published and payments charged it, but inventory dead-lettered the result.
    now = timezone.now()
    created = created_row(order_id)
    OutboxMessage.objects.filter(pk=created.pk).update(published_at=now)
    for consumer, after in (("payments", 0.25), ("events", 0.3)):
        handled_at = created.created_at + timedelta(seconds=after)
        InboxMessage.objects.create(consumer=consumer, message_id=str(created.event_id), handled_at=handled_at)
    succeeded = OutboxMessage.objects.create(
        source="payments",
        event_type="payments.payment.succeeded",
        aggregate_type="payment",
        aggregate_id=order_id,
        correlation_id=order_id,
        causation_id=str(created.event_id),
        payload={"order_id": order_id},
        created_at=now + timedelta(milliseconds=50),
        published_at=now + timedelta(milliseconds=60),
    )
    letter = dead_letter_record(
        consumer="inventory",
        body=json.dumps({"order_id": order_id}).encode(),
        properties={"message_id": str(succeeded.event_id), "correlation_id": order_id},
        headers={"event_type": "payments.payment.succeeded"},
        routing_key="payments.payment.succeeded",
        reason="invalid_payload",
        error="InvalidPayload: items missing",
    )

    response = order_page(staff, order_id)

    # Then: the events and orders consumers have not handled the second event yet, and inventory
    # dead-lettered it.
    assert sorted(waiting(response)) == [
        ("dead_letter", "payments.payment.succeeded", "inventory"),
        ("unhandled", "payments.payment.succeeded", "events"),
        ("unhandled", "payments.payment.succeeded", "orders"),
    ]
    timeline = [row.entry for row in response.context["saga"]["timeline"]]
    assert [(e.event_type, e.source, e.state) for e in timeline] == [
        ("orders.order.created", "orders", "published"),
        ("payments.payment.succeeded", "payments", "published"),
    ]
    assert [h.consumer for h in timeline[0].handled_by] == ["payments", "events"]
    rows = response.context["saga"]["timeline"]
    assert rows[0].yet_to_handle.awaiting == []
    # The table's times: each event's since checkout, each handling's since its event.
    checkout_at = Order.objects.get(pk=order_id).created_at
    assert [row.offset for row in rows] == [
        (created.created_at - checkout_at).total_seconds(),
        (succeeded.created_at - checkout_at).total_seconds(),
    ]
    assert [(h.consumer, after) for h, after in rows[0].handled] == [("payments", 0.25), ("events", 0.3)]
    assert rows[1].handled == []
    assert json.loads(rows[1].payload_pretty) == {"order_id": order_id}
    html = response.content.decode()
    assert html.count("<small>(+0.250s)</small>") == 1 and html.count("<small>(+0.300s)</small>") == 1
    assert f"<small>+{floatformat(rows[1].offset, 3)}s</small>" in html  # rounded as the template does
    assert f"&quot;order_id&quot;: &quot;{order_id}&quot;" in html  # the payload, pretty, escaped
    assert str(succeeded.event_id) in html and str(created.event_id) in html
    assert f"/admin/messaging/deadletter/{letter.pk}/change/" in html
    assert html.count('<div class="ops-warn">events</div>') == 1  # the table's waiting column, second event
    assert "dead letter at inventory" in html and "InvalidPayload: items missing" in html


def test_a_complete_saga_says_nothing_is_waiting(staff, order_id):
    from orders.models import Order  # the context's own: the file collects without it

    created = created_row(order_id)
    OutboxMessage.objects.filter(pk=created.pk).update(published_at=timezone.now())
    for consumer in ("payments", "events"):
        InboxMessage.objects.create(consumer=consumer, message_id=str(created.event_id))
    Order.objects.filter(pk=order_id).update(status="CONFIRMED")

    response = order_page(staff, order_id)

    assert waiting(response) == []
    html = response.content.decode()
    assert 'class="ops-banner ok"' in html
    assert "The saga is complete: the order is confirmed</span>: every event published and handled by every" in html


def settled(order_id: str, status: str, reason: str | None = None) -> None:
    """The order decided and its one event published and handled: nothing waits."""
    from orders.models import Order  # the context's own: the file collects without it

    created = created_row(order_id)
    OutboxMessage.objects.filter(pk=created.pk).update(published_at=timezone.now())
    for consumer in ("payments", "events"):
        InboxMessage.objects.create(consumer=consumer, message_id=str(created.event_id))
    Order.objects.filter(pk=order_id).update(status=status, failure_reason=reason)


@pytest.mark.parametrize(
    ("status", "reason", "tone", "headline"),
    [
        ("FAILED", "payment_declined", "failed", "The saga has ended: the order failed, no sale"),
        ("CANCELLED", None, "cancelled", "The saga has ended: the order was cancelled"),
    ],
)
def test_a_failed_or_cancelled_order_gets_its_own_colour_and_words(staff, order_id, status, reason, tone, headline):
    settled(order_id, status, reason)

    html = order_page(staff, order_id).content.decode()

    assert f'<div id="saga-status" class="ops-banner {tone}">' in html
    assert f'<span class="saga-outcome-headline">{headline}</span>' in html
    assert "complete" not in html.split('id="saga-status"')[1].split("</div>")[0]


def test_a_split_deployment_says_what_it_cannot_know_and_where_to_look(staff, order_id, monkeypatch, settings):
    # Given: this process hosts only orders (and the event log); payments' database is known to it.
    monkeypatch.setattr("operations.saga_page.local_consumers", lambda: ["orders", "events"])
    settings.MESSAGING = {
        **settings.MESSAGING,
        "DEPLOYMENT_DATABASE_URLS": {
            "payments": "sqlite:////srv/split/payments.sqlite3",
            "inventory": "postgres://app:secret@db:5432/inventory",  # a password: never shown
        },
    }
    settings.DEBUG = True
    settled(order_id, "CONFIRMED")

    response = order_page(staff, order_id)

    outcome = response.context["saga"]["outcome"]
    assert outcome["known"] == "every event published and handled by this deployment's consumers (orders, events)."
    elsewhere = ", ".join(name for name in names(installed()) if name != "orders")
    assert outcome["unknown"].startswith(f"{elsewhere} run in other deployments: this one sees only")
    # RabbitMQ here: its URL may carry a password, so a placeholder stands for it.
    assert outcome["commands"][0] == (
        "DEBUG=1 CONTEXTS=payments DATABASE_URL=sqlite:////srv/split/payments.sqlite3 BROKER_URL=<BROKER_URL> "
        ".venv/bin/python manage.py dead_letters list --consumer payments"
    )
    assert "DATABASE_URL=<INVENTORY_DATABASE_URL>" in outcome["commands"][1]
    assert "DATABASE_URL=<SHIPPING_DATABASE_URL>" in outcome["commands"][2]
    assert "secret" not in response.content.decode()


def admin_urls(order_id: str) -> list[str]:
    """The shop's pages, and a dead letter's (it links its order). The bus's own pages are the
    package's test: packages/django-reliable-messaging/tests/test_message_admin.py."""
    letter = dead_letter_record(
        consumer="payments",
        body=b"{}",
        properties={"message_id": "m-1", "correlation_id": order_id},
        headers={},
        routing_key="x",
        reason="handler_error",
    )
    return [
        "/admin/",
        "/admin/overview/",
        f"/admin/orders/order/{order_id}/change/",
        "/admin/orders/order/",
        f"/admin/messaging/outboxmessage/?q={order_id}",
        f"/admin/messaging/deadletter/{letter.pk}/change/",
        "/admin/payments/payment/",
        "/admin/inventory/product/",
        "/admin/inventory/reservation/",
        "/admin/axes/accessattempt/",  # the login lockout's counts (docs/operations.md, "Admin lockout")
    ]


def test_every_admin_page_renders_for_staff(staff, order_id):
    statuses = {url: staff.get(url).status_code for url in admin_urls(order_id)}
    assert statuses == dict.fromkeys(statuses, 200)


def test_admin_pages_refuse_anonymous_and_non_staff_users(order_id):
    urls = admin_urls(order_id)
    customer = Client()
    customer.force_login(User.objects.create_user("customer", password="x"))
    for client in (Client(), customer):
        for url in urls:
            response = client.get(url)
            assert response.status_code == 302, url
            assert response["Location"].startswith("/admin/login/"), url


def letter_for(order_id: str, message_id: str) -> DeadLetter:
    return dead_letter_record(
        consumer="payments",
        body=json.dumps({"order_id": order_id, "payment_token": "tok_visa"}).encode(),
        properties={"message_id": message_id, "correlation_id": order_id},
        headers={"event_type": "orders.order.created", "schema_version": 1},
        routing_key="orders.order.created",
        reason="handler_error",
        error="TransientError: gateway unavailable",
    )


def test_the_overview_counts_backlog_dead_letters_and_stuck_orders(staff, order_id):
    from orders.models import Order  # the context's own: the file collects without it

    # Given: one pending outbox row, one parked, two dead letters (one replayed), an order stuck 2 minutes.
    OutboxMessage.objects.create(
        source="orders",
        event_type="orders.order.confirmed",
        aggregate_type="order",
        aggregate_id=order_id,
        correlation_id=order_id,
        payload={},
        parked_at=timezone.now(),
    )
    letter_for(order_id, str(uuid.uuid4()))
    replayed = letter_for(order_id, str(uuid.uuid4()))
    DeadLetter.objects.filter(pk=replayed.pk).update(replayed_at=timezone.now())
    Order.objects.filter(pk=order_id).update(created_at=timezone.now() - timedelta(minutes=2))
    Order.objects.create(customer_id="fresh", total=Decimal("1.00"), currency="USD")  # pending, not stuck

    response = staff.get("/admin/overview/")

    assert response.status_code == 200
    context = response.context
    assert (context["backlog"].pending, context["backlog"].parked) == (1, 1)
    assert [(d.consumer, d.waiting, d.replayed) for d in context["dead_letters"]] == [
        (consumer, *((1, 1) if consumer == "payments" else (0, 0))) for consumer in consumers()
    ]
    [orders] = [part["data"] for part in context["sections"]]  # the orders context's section
    last_hour = {"PENDING": 2, "CONFIRMED": 0, "FAILED": 0, "CANCELLED": 0, "RETURNING": 0, "RETURNED": 0}
    assert orders["orders_last_hour"] == last_hour
    assert [row["order"].pk for row in orders["stuck_orders"]] == [uuid.UUID(order_id)]
    assert f"/admin/orders/order/{order_id}/change/" in response.content.decode()


def test_a_split_deployments_overview_says_where_the_other_consumers_dead_letters_are(staff, monkeypatch, settings):
    # Given: this process hosts only payments; the orders deployment's database is known to it.
    monkeypatch.setattr("operations.overview.local_consumers", lambda: ["payments"])
    settings.MESSAGING = {
        **settings.MESSAGING,
        "DEPLOYMENT_DATABASE_URLS": {"orders": "sqlite:////srv/split/orders.sqlite3"},
    }
    settings.DEBUG = True

    response = staff.get("/admin/overview/")

    assert [(d.consumer, d.waiting) for d in response.context["dead_letters"]] == [("payments", 0)]
    listing = ".venv/bin/python manage.py dead_letters list --consumer"
    broker = "BROKER_URL=<BROKER_URL>"  # RabbitMQ here: its URL may carry a password
    orders_db = f"DATABASE_URL=sqlite:////srv/split/orders.sqlite3 {broker}"
    # Orders' database is known here; another's is a placeholder; the event log runs with orders.
    hosting = {"events": "orders"}
    where = {"orders": orders_db}
    expected = [
        (
            consumer,
            f"DEBUG=1 CONTEXTS={hosting.get(consumer, consumer)} "
            + where.get(hosting.get(consumer, consumer), f"DATABASE_URL=<{consumer.upper()}_DATABASE_URL> {broker}")
            + f" {listing} {consumer}",
        )
        for consumer in consumers()
        if consumer != "payments"
    ]
    assert [(row.consumer, row.command) for row in response.context["dead_letters_elsewhere"]] == expected
    assert (
        "inventory",
        f"DEBUG=1 CONTEXTS=inventory DATABASE_URL=<INVENTORY_DATABASE_URL> {broker} {listing} inventory",
    ) in expected
    html = response.content.decode()
    others = ", ".join(consumer for consumer, _ in expected)
    assert f"Not counted here: {others}\n    run in other deployments" in html
    command = f"DEBUG=1 CONTEXTS=orders {orders_db} {listing} orders".replace("<", "&lt;").replace(">", "&gt;")
    assert f'<code class="ops-command">{command}</code>' in html


def test_the_monoliths_overview_counts_every_consumer_and_points_nowhere_else(staff):
    response = staff.get("/admin/overview/")

    assert response.context["dead_letters_elsewhere"] == []
    assert 'id="dead-letters-elsewhere"' not in response.content.decode()


def test_the_admin_index_links_the_overview_and_the_docs(staff):
    html = staff.get("/admin/").content.decode()
    assert 'href="/admin/overview/"' in html
    assert 'href="/api/docs/"' in html


def test_the_order_list_flags_an_order_pending_for_over_a_minute(staff, order_id):
    from orders.models import Order  # the context's own: the file collects without it

    Order.objects.filter(pk=order_id).update(created_at=timezone.now() - timedelta(minutes=2, seconds=5))
    html = staff.get("/admin/orders/order/").content.decode()
    assert re.search(r'<span class="ops-bad">2m 0[5-9]s</span>', html)


def test_the_order_list_shows_the_newest_order_first_in_the_apis_words(staff, order_id):
    from orders.models import Order  # the context's own: the file collects without it

    older, newest = uuid.uuid4(), uuid.uuid4()
    now = timezone.now()
    for pk, minutes, status in ((older, 5, "FAILED"), (newest, -1, "PENDING")):
        Order.objects.create(
            id=pk, customer_id="c", total=Decimal("1.00"), currency="USD", status=status, failure_reason=None
        )
        Order.objects.filter(pk=pk).update(created_at=now - timedelta(minutes=minutes))
    Order.objects.filter(pk=older).update(failure_reason="out_of_stock")

    response = staff.get("/admin/orders/order/")

    assert [o.pk for o in response.context["cl"].result_list] == [newest, uuid.UUID(order_id), older]
    html = response.content.decode()
    assert ">out_of_stock</a>" in html and "Out Of Stock" not in html  # the filter, as the API says it
    assert '<td class="field-status">FAILED</td>' in html and ">Failed<" not in html


def test_view_site_opens_the_overview(staff):
    assert 'href="/admin/overview/">View site</a>' in staff.get("/admin/").content.decode()


def test_the_admin_names_the_project_and_its_tables_in_good_english(staff):
    html = staff.get("/admin/").content.decode()
    assert "Saga shop operations" in html and "Django administration" not in html
    assert "Event log entries" in html and "entrys" not in html
    assert "Contexts hosted here: orders, payments, inventory" in html


def test_a_dead_letter_page_links_its_order(staff, order_id):
    letter = letter_for(order_id, str(uuid.uuid4()))

    html = staff.get(f"/admin/messaging/deadletter/{letter.pk}/change/").content.decode()

    assert f'<a class="ops-mono" href="/admin/orders/order/{order_id}/change/">{order_id}</a>' in html


def test_every_page_writes_dates_one_way(staff, order_id):
    from orders.models import Order  # the context's own: the file collects without it

    letter = letter_for(order_id, str(uuid.uuid4()))
    moment = datetime(2026, 11, 24, 17, 34, 28, tzinfo=UTC)
    DeadLetter.objects.filter(pk=letter.pk).update(first_failed_at=moment, last_failed_at=moment)
    Order.objects.filter(pk=order_id).update(created_at=moment)

    pages = {
        f"/admin/messaging/deadletter/{letter.pk}/change/": "2026-11-24 17:34:28",  # service_platform.formats
        "/admin/orders/order/": '<span class="nowrap">2026-11-24</span> <span class="nowrap">17:34:28</span>',
    }
    for url, written in pages.items():
        html = staff.get(url).content.decode()
        assert written in html, url
        assert "Nov. 24, 2026" not in html and "11-24 17:34" not in html.replace("2026-11-24 17:34", ""), url
