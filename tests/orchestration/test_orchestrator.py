"""The orchestrated saga (SAGA_STYLE=orchestration), decided in-process: every message goes through
``reliable_messaging._dispatch.decide`` as a consumer hands it over (faultlib.simulation's ``Bus`` stands in
for the relay and RabbitMQ), payments' gateway worker makes the calls, the stand-in gateway keeps
the ledger. The real processes are test_orchestrated_processes.py."""

import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliable_messaging import sagas
from reliable_messaging._dispatch import Outcome, decide
from reliable_messaging._topology import subscribers_of
from reliable_messaging.api import TransientError
from reliable_messaging.models import OutboxMessage, ScheduledMessage
from reliable_messaging.operator import timeline_for, timeline_waiting

from faultlib.fixtures import ALL_DATABASES
from faultlib.saga import ledger, stock
from faultlib.simulation import Bus, shuffled_sagas
from faultlib.steps import offered
from inventory.models import Reservation
from inventory.services import product_upsert
from orchestrator.models import OrderSaga
from orchestrator.services import Status
from orders.models import Order
from orders.services.checkout import Line, order_place
from orders.services.returns import NAME as RETURN
from orders.services.returns import R, order_return
from orders.services.saga import order_cancel
from tests.e2e.test_metrics import samples
from tests.support import forged

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

S = Status
# By its label: the orchestrated saga runs only with shipping installed (its start-up refuses
# otherwise), and this module imports in a tree without it.
Shipment = apps.get_model("shipping", "Shipment")
calls_in_flight, gateway_worker_step = offered("gateway_calls_in_flight"), offered("gateway_worker_step")
ORCHESTRATED = override_settings(SAGA_STYLE="orchestration")
# An orchestrated order's events to CONFIRMED, commands included, in order.
CONFIRMED_EVENTS = [
    "orders.order.created",
    "orchestrator.stock.reserve",
    "inventory.stock.reserved",
    "orchestrator.payment.charge",
    "payments.payment.succeeded",
    "orchestrator.shipment.create",
    "shipping.shipment.created",
    "orchestrator.order.confirm",
    "orders.order.confirmed",
]

# The commands that carry a step key, in the order of the steps (each with its undo).
COMMANDS = [
    "orchestrator.stock.reserve",
    "orchestrator.stock.release",
    "orchestrator.payment.charge",
    "orchestrator.payment.refund",
    "orchestrator.shipment.create",
    "orchestrator.shipment.cancel",
]


@pytest.fixture
def bus():
    """WIDGET at 10.00, 5 in stock, known to the storefront."""
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    bus = Bus({"WIDGET"})
    run_to_quiet(bus)
    return bus


def place(bus: Bus, quantity: int = 2, token: str = "tok_visa", ship_to: str = "", style=ORCHESTRATED) -> str:
    with style:
        order = order_place(customer_id="c", lines=[Line("WIDGET", quantity)], payment_token=token, ship_to=ship_to)
    bus.scope.add(str(order.id))
    bus.relay()
    return str(order.id)


def run_to_quiet(bus: Bus, limit: int = 300) -> None:
    """Every delivery in the order it was published, and the gateway worker when nothing else is left."""
    order_ids = [i for i in bus.scope if i != "WIDGET"]
    for _ in range(limit):
        bus.relay()
        if bus.pending:
            bus.deliver(0)
        elif calls_in_flight(order_ids):
            gateway_worker_step(order_ids)
        else:
            return
    raise AssertionError("still busy")


def run_until(bus: Bus, order_id: str, status: str) -> None:
    for _ in range(300):
        bus.relay()
        saga = OrderSaga.objects.filter(key=order_id).first()
        if saga is not None and saga.state == status:
            return
        if bus.pending:
            bus.deliver(0)
        else:
            gateway_worker_step([order_id])
    raise AssertionError(f"the saga never reached {status}")


def transitions(order_id: str) -> list[tuple[str, str, str]]:
    saga = OrderSaga.objects.get(key=order_id)
    return list(saga.transitions.order_by("version").values_list("from_state", "to_state", "cause"))


def sent(order_id: str) -> list[str]:
    return list(
        OutboxMessage.objects.filter(correlation_id=order_id).order_by("id").values_list("event_type", flat=True)
    )


def order_of(order_id: str) -> tuple[str, str | None]:
    order = Order.objects.get(pk=order_id)
    return order.status, order.failure_reason


def no_retry_nor_dead_letter(bus: Bus) -> list:
    return [(d.consumer, d.envelope.routing_key, o) for d, o in bus.outcomes if o is not Outcome.HANDLED]


def test_a_confirmed_order_reserves_then_charges_then_ships(bus):
    order_id = place(bus)
    run_to_quiet(bus)

    assert order_of(order_id) == ("CONFIRMED", None)
    assert transitions(order_id) == [
        (S.STARTED, S.RESERVING_INVENTORY, "orders.order.created"),
        (S.RESERVING_INVENTORY, S.PROCESSING_PAYMENT, "inventory.stock.reserved"),
        (S.PROCESSING_PAYMENT, S.SHIPPING_ORDER, "payments.payment.succeeded"),
        (S.SHIPPING_ORDER, S.COMPLETED, "shipping.shipment.created"),
    ]
    assert sent(order_id) == CONFIRMED_EVENTS
    saga = OrderSaga.objects.get(key=order_id)
    assert (saga.state, saga.version, saga.attempt, "payment_token" in saga.data) == (S.COMPLETED, 5, 0, False)
    commands = OutboxMessage.objects.filter(correlation_id=order_id, event_type__startswith="orchestrator.")
    keys = {row.event_type: row.payload.get("key") for row in commands}
    assert keys["orchestrator.payment.charge"] == saga.step_keys["orchestrator.payment.charge"]
    assert keys["orchestrator.stock.reserve"] == saga.step_keys["orchestrator.stock.reserve"]
    assert ScheduledMessage.objects.filter(correlation_id=order_id).count() == 0  # every deadline cancelled
    assert ledger(order_id) == [("charge", Decimal("20.00"))]
    assert stock("WIDGET") == 3
    assert Shipment.objects.get(order_id=order_id).status == "PREPARING"
    assert no_retry_nor_dead_letter(bus) == []  # orders leaves the replies of an orchestrated order alone


def test_a_declined_card_releases_the_stock(bus):
    order_id = place(bus, token="tok_chargeDeclined")
    run_to_quiet(bus)

    assert order_of(order_id) == ("FAILED", "payment_declined")
    assert [t[1] for t in transitions(order_id)] == [
        S.RESERVING_INVENTORY,
        S.PROCESSING_PAYMENT,
        S.COMPENSATING_INVENTORY,
        S.FAILED,
    ]
    assert sent(order_id)[4:] == [
        "payments.payment.failed",
        "orchestrator.stock.release",
        "inventory.stock.released",
        "orchestrator.order.fail",
        "orders.order.failed",
    ]
    assert ledger(order_id) == []
    assert stock("WIDGET") == 5
    assert no_retry_nor_dead_letter(bus) == []


def test_too_little_stock_means_no_charge_is_ever_attempted(bus):
    order_id = place(bus, quantity=9)
    run_to_quiet(bus)

    assert order_of(order_id) == ("FAILED", "out_of_stock")
    assert [t[1] for t in transitions(order_id)] == [S.RESERVING_INVENTORY, S.FAILED]
    assert "orchestrator.payment.charge" not in sent(order_id)
    assert ledger(order_id) == []
    assert stock("WIDGET") == 5


def test_a_shipping_refusal_refunds_then_releases(bus):
    order_id = place(bus, ship_to="AQ")
    run_to_quiet(bus)

    assert order_of(order_id) == ("FAILED", "shipping_refused")
    assert [t[1:] for t in transitions(order_id)][2:] == [
        (S.SHIPPING_ORDER, "payments.payment.succeeded"),
        (S.COMPENSATING_PAYMENT, "shipping.shipment.refused"),
        (S.COMPENSATING_INVENTORY, "payments.payment.refunded"),
        (S.FAILED, "inventory.stock.released"),
    ]
    events = sent(order_id)
    assert events.index("orchestrator.payment.refund") < events.index("orchestrator.stock.release")
    assert ledger(order_id) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert stock("WIDGET") == 5
    assert Shipment.objects.get(order_id=order_id).status == "REFUSED"
    assert no_retry_nor_dead_letter(bus) == []


def test_a_reply_twice_late_or_not_its_own_changes_nothing(bus):
    order_id = place(bus)
    run_until(bus, order_id, S.PROCESSING_PAYMENT)
    before = (OrderSaga.objects.get(key=order_id).version, OutboxMessage.objects.count())

    reserved = forged.message(
        "inventory.stock.reserved", {"order_id": order_id, "items": [{"sku": "WIDGET", "quantity": 2}]}
    )
    assert decide("orchestrator", routing_key="inventory.stock.reserved", **reserved).outcome is Outcome.HANDLED
    assert decide("orchestrator", routing_key="inventory.stock.reserved", **reserved).outcome is Outcome.DUPLICATE
    shipped = forged.message(
        "shipping.shipment.created", {"order_id": order_id, "shipment_id": str(uuid.uuid4()), "status": "PREPARING"}
    )
    assert decide("orchestrator", routing_key="shipping.shipment.created", **shipped).outcome is Outcome.HANDLED
    other_amount = forged.message(
        "payments.payment.succeeded",
        {
            "order_id": order_id,
            "amount": "1.00",
            "currency": "USD",
            "charge_id": "ch_x",
            "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "0.50"}],
        },
    )
    assert decide("orchestrator", routing_key="payments.payment.succeeded", **other_amount).outcome is Outcome.HANDLED

    saga = OrderSaga.objects.get(key=order_id)
    assert (saga.state, saga.version, OutboxMessage.objects.count()) == (S.PROCESSING_PAYMENT, *before)
    run_to_quiet(bus)
    assert order_of(order_id) == ("CONFIRMED", None)
    assert ledger(order_id) == [("charge", Decimal("20.00"))]


STEP_DEADLINE = timedelta(seconds=96)  # ORCHESTRATOR_STEP_TIMEOUT passed


def test_a_step_unanswered_is_sent_again_with_its_key_then_given_up_and_compensated(bus):
    order_id = place(bus)
    bus.deliver_only("orchestrator", "orders.order.created")
    key = OrderSaga.objects.get(key=order_id).step_keys["orchestrator.stock.reserve"]

    for attempt in (2, 3):  # inventory never answers
        assert bus.fire_deadlines(STEP_DEADLINE) == 1
        bus.deliver_only("orchestrator", "orchestrator.step.deadline")
        saga = OrderSaga.objects.get(key=order_id)
        assert (saga.state, saga.attempt) == (S.RESERVING_INVENTORY, attempt)
    reserves = OutboxMessage.objects.filter(correlation_id=order_id, event_type="orchestrator.stock.reserve")
    assert [row.payload["key"] for row in reserves] == [key, key, key]

    assert bus.fire_deadlines(STEP_DEADLINE) == 1
    bus.deliver_only("orchestrator", "orchestrator.step.deadline")
    saga = OrderSaga.objects.get(key=order_id)
    assert (saga.state, saga.failure_reason) == (S.FAILED, "timeout")
    release = OutboxMessage.objects.get(correlation_id=order_id, event_type="orchestrator.stock.release")
    assert release.payload == {
        "order_id": order_id,
        "key": saga.step_keys["orchestrator.stock.release"],
        "reason": "timeout",
    }

    bus.deliver_only("inventory", "orchestrator.stock.release")  # before the three reserve commands
    run_to_quiet(bus)  # which arrive late: the release's tombstone refuses them
    assert order_of(order_id) == ("FAILED", "timeout")
    assert Reservation.objects.get(order_id=order_id).status == Reservation.Status.CANCELLED
    assert stock("WIDGET") == 5
    assert ledger(order_id) == []
    assert ScheduledMessage.objects.filter(correlation_id=order_id).count() == 0


def test_a_deadline_of_an_answered_step_changes_nothing(bus):
    order_id = place(bus)
    bus.deliver_only("orchestrator", "orders.order.created")
    stale = forged.message(
        "orchestrator.step.deadline", {"order_id": order_id, "step": S.RESERVING_INVENTORY, "attempt": 7}
    )
    assert decide("orchestrator", routing_key="orchestrator.step.deadline", **stale).outcome is Outcome.HANDLED
    saga = OrderSaga.objects.get(key=order_id)
    assert (saga.state, saga.attempt, saga.version) == (S.RESERVING_INVENTORY, 1, 2)


def test_a_move_from_a_version_already_moved_is_retried(bus):
    order_id = place(bus)
    bus.deliver_only("orchestrator", "orders.order.created")
    stale = OrderSaga.objects.get(key=order_id)  # read by a handler, then another one moves it
    OrderSaga.objects.filter(key=order_id).update(version=stale.version + 1)
    with pytest.raises(TransientError, match="moved meanwhile"), transaction.atomic():
        sagas.stop(stale, to=S.FAILED, cause="a handler that read it before")
    saga = OrderSaga.objects.get(key=order_id)
    assert (saga.state, saga.version, saga.transitions.count()) == (S.RESERVING_INVENTORY, stale.version + 1, 1)


def test_both_styles_run_side_by_side(bus):
    choreographed = place(bus, quantity=1, style=override_settings(SAGA_STYLE="choreography"))
    orchestrated = place(bus, quantity=1)
    run_to_quiet(bus)

    assert order_of(choreographed) == order_of(orchestrated) == ("CONFIRMED", None)
    assert not OrderSaga.objects.filter(key=choreographed).exists()
    assert sent(choreographed) == [
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reserved",
        "orders.order.confirmed",
        "shipping.shipment.created",
    ]
    assert Order.objects.get(pk=orchestrated).saga_style == "orchestration"
    assert stock("WIDGET") == 3
    assert no_retry_nor_dead_letter(bus) == []


def test_a_cancellation_at_the_shipping_step_cancels_the_shipment_and_refunds(bus):
    order_id = place(bus)
    run_until(bus, order_id, S.SHIPPING_ORDER)
    order_cancel(order_id=uuid.UUID(order_id))
    run_to_quiet(bus)

    assert order_of(order_id) == ("CANCELLED", None)
    assert OrderSaga.objects.get(key=order_id).state == S.ENDED_BY_ORDERS
    assert Shipment.objects.get(order_id=order_id).status == "CANCELLED"
    assert ledger(order_id) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert stock("WIDGET") == 5


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_shuffled_and_duplicated_deliveries_of_orchestrated_sagas_keep_every_invariant(data):
    # given one to three orchestrated orders competing for a fresh SKU of scarce stock
    # when hypothesis delivers every command and reply in any order, some twice, cancelling one
    # and firing orders' deadline at any step
    # then every order ends terminal, stock and money add up, and nothing had two effects
    with ORCHESTRATED:
        shuffled_sagas(data)


def test_the_orders_page_shows_its_saga_state_version_keys_and_history(bus, admin_client):
    order_id = place(bus, ship_to="AQ")
    run_to_quiet(bus)
    saga = OrderSaga.objects.get(key=order_id)

    page = admin_client.get(f"/admin/orders/order/{order_id}/change/").content.decode()
    assert "Orchestrated saga: failed (shipping_refused), version 7" in page
    assert all(key in page for key in saga.step_keys.values())
    history = page.split('id="saga-transitions"')[1].split("</table>")[0]
    assert [row.split("<td>")[3].split("</td>")[0] for row in history.split("<tr>")[2:]] == [
        S.RESERVING_INVENTORY,
        S.PROCESSING_PAYMENT,
        S.SHIPPING_ORDER,
        S.COMPENSATING_PAYMENT,
        S.COMPENSATING_INVENTORY,
        S.FAILED,
    ]
    assert "orchestrator.payment.refund" in page.split('id="saga-swimlane"')[1]  # the orchestrator's lane

    keys = page.split('id="saga-keys"')[1].split("</table>")[0]
    assert re.findall(r"<tr><td>([\w.]+)</td>", keys) == COMMANDS

    own_page = admin_client.get(f"/admin/orchestrator/ordersaga/{saga.pk}/change/")
    assert own_page.status_code == 200
    assert '<script src="/static/kernel/mermaid/init.js"></script>' in own_page.content.decode()  # draws its saga
    assert "tok_" not in own_page.content.decode()  # never the payment token
    steps = re.findall(r"<tr><td>([\w.]+)</td><td>[0-9a-f-]{36}</td>", own_page.content.decode())
    assert steps == COMMANDS  # in the order they run
    listed = admin_client.get("/admin/orchestrator/ordersaga/").content.decode()
    assert "Updated (UTC)" in listed
    assert re.search(r'<td class="field-step_attempt">-</td>', listed)  # a finished saga waits for no step

    choreographed = place(bus, quantity=1, style=override_settings(SAGA_STYLE="choreography"))
    run_to_quiet(bus)
    assert (
        'id="orchestrated-saga"'
        not in admin_client.get(f"/admin/orders/order/{choreographed}/change/").content.decode()
    )


def test_a_step_waiting_shows_its_attempt_and_deadline(bus, admin_client):
    order_id = place(bus)
    bus.deliver_only("orchestrator", "orders.order.created")
    page = admin_client.get(f"/admin/orders/order/{order_id}/change/").content.decode()
    assert "Orchestrated saga: reserving_inventory, version 2" in page
    assert "Waiting for orchestrator.stock.reserve since " in page
    assert " UTC: attempt 1 of 3, deadline " in page

    # the deadline is in the order's timeline as scheduled, and no diagnosis counts it as stuck
    deadline_id = str(OrderSaga.objects.get(key=order_id).deadline_id)
    timeline = admin_client.get(f"/api/orders/{order_id}/").json()["timeline"]
    assert [(e["event_type"], e["state"]) for e in timeline if e["message_id"] == deadline_id] == [
        ("orchestrator.step.deadline", "scheduled")
    ]
    assert timeline[-1]["message_id"] == deadline_id  # due last, after what happened so far
    waits = timeline_waiting(timeline_for(order_id, detailed=True))
    assert deadline_id not in {w.message_id for w in waits}


def test_a_step_sent_again_after_it_was_done_repeats_the_same_reply(bus):
    order_id = place(bus)
    bus.deliver_only("orchestrator", "orders.order.created")
    bus.deliver_only("inventory", "orchestrator.stock.reserve")  # reserved; the reply waits in the queue
    reply = OutboxMessage.objects.get(correlation_id=order_id, event_type="inventory.stock.reserved")

    assert bus.fire_deadlines(STEP_DEADLINE) == 1
    bus.deliver_only("orchestrator", "orchestrator.step.deadline")  # the reserve command, again
    bus.deliver_only("inventory", "orchestrator.stock.reserve")
    again = OutboxMessage.objects.get(correlation_id=order_id, event_type="inventory.stock.reserved")
    assert again.event_id == reply.event_id  # no second event: the same message, relayed again
    copies = [d.consumer for d in bus.pending if d.envelope.properties["message_id"] == str(reply.event_id)]
    assert sorted(copies) == sorted(subscribers_of("inventory.stock.reserved") * 2)  # orchestrator, orders, events

    run_to_quiet(bus)
    assert order_of(order_id) == ("CONFIRMED", None)
    assert stock("WIDGET") == 3
    assert ledger(order_id) == [("charge", Decimal("20.00"))]
    repeated = [o for d, o in bus.outcomes if d.envelope.properties["message_id"] == str(reply.event_id)]
    assert sorted(o.value for o in repeated) == ["duplicate"] * 3 + ["handled"] * 3  # orders, events, orchestrator


def test_a_command_repeated_with_its_step_key_has_no_second_effect_at_the_participant(bus):
    order_id = place(bus)
    bus.deliver_only("payments", "orders.order.created")  # payments keeps the token
    bus.deliver_only("orchestrator", "orders.order.created")
    bus.deliver_only("inventory", "orchestrator.stock.reserve")
    bus.deliver_only("orchestrator", "inventory.stock.reserved")
    bus.deliver_only("payments", "orchestrator.payment.charge")
    gateway_worker_step([order_id])  # the charge, answered later by payments' worker
    bus.relay()
    answer = OutboxMessage.objects.get(correlation_id=order_id, event_type="payments.payment.succeeded")
    command = OutboxMessage.objects.get(correlation_id=order_id, event_type="orchestrator.payment.charge")
    outbox = OutboxMessage.objects.count()

    # The same step's command again (the same key, another message id), then a third time.
    for _ in range(2):
        again = forged.message(command.event_type, command.payload, version=command.schema_version)
        assert decide("payments", routing_key=command.event_type, **again).outcome is Outcome.HANDLED
    assert ledger(order_id) == [("charge", Decimal("20.00"))]
    assert not calls_in_flight([order_id])  # no second gateway call either
    assert OutboxMessage.objects.count() == outbox  # nothing new: the first answer, published again
    assert OutboxMessage.objects.get(pk=answer.pk).published_at is None
    assert not OutboxMessage.objects.filter(causation_id=again["properties"]["message_id"]).exists()

    run_to_quiet(bus)
    assert order_of(order_id) == ("CONFIRMED", None)
    assert ledger(order_id) == [("charge", Decimal("20.00"))]
    assert stock("WIDGET") == 3


def test_a_cancellation_that_overtakes_the_creation_keeps_the_saga_from_starting(bus):
    order_id = place(bus)
    order_cancel(order_id=uuid.UUID(order_id))
    bus.relay()
    bus.deliver_only("orchestrator", "orders.order.cancelled")  # first, as a retried creation would let it
    bus.deliver_only("orchestrator", "orders.order.created")
    run_to_quiet(bus)

    saga = OrderSaga.objects.get(key=order_id)
    assert (saga.state, saga.transitions.count()) == (S.ENDED_BY_ORDERS, 0)
    assert not [e for e in sent(order_id) if e.startswith("orchestrator.")]  # no command ever sent
    assert order_of(order_id) == ("CANCELLED", None)
    assert ledger(order_id) == []
    assert stock("WIDGET") == 5


def test_metrics_show_the_sagas_waiting_by_state_and_the_longest_wait(bus, client):
    done = place(bus, quantity=1)
    run_to_quiet(bus)
    waiting = place(bus)
    bus.deliver_only("orchestrator", "orders.order.created")
    OrderSaga.objects.filter(key=waiting).update(step_since=timezone.now() - timedelta(seconds=90))

    got = samples(client.get("/metrics").content.decode())
    by_status = {dict(labels)["status"]: n for (name, labels), n in got.items() if name == "orchestrator_sagas_waiting"}
    assert by_status == {
        S.RESERVING_INVENTORY: 1,
        S.PROCESSING_PAYMENT: 0,
        S.SHIPPING_ORDER: 0,
        S.COMPENSATING_PAYMENT: 0,
        S.COMPENSATING_INVENTORY: 0,
    }
    assert 90 <= got[("orchestrator_saga_oldest_waiting_seconds", ())] < 120
    assert OrderSaga.objects.get(key=done).state == S.COMPLETED  # a finished saga waits for nothing


def test_an_orchestrated_order_is_returned_by_orders_return_saga_its_own_saga_left_completed(bus):
    order_id = place(bus)
    run_to_quiet(bus)
    assert order_of(order_id) == ("CONFIRMED", None)
    done = transitions(order_id)

    order_return(order_id=uuid.UUID(order_id))
    run_to_quiet(bus)

    assert order_of(order_id) == ("RETURNED", None)
    assert ledger(order_id) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert stock("WIDGET") == 5
    assert Shipment.objects.get(order_id=order_id).status == "CANCELLED"
    assert sagas.instance_of(RETURN, order_id).state == R.RETURNED
    assert transitions(order_id) == done  # the replies to the return leave the order's saga COMPLETED
    assert sent(order_id)[len(CONFIRMED_EVENTS) :] == [
        "orders.order.return_requested",
        "orders.return.book_pickup",
        "shipping.shipment.cancelled",
        "orders.return.restock",
        "inventory.stock.restocked",
        "orders.return.refund",
        "payments.payment.refunded",
        "orders.order.returned",
    ]
    assert not no_retry_nor_dead_letter(bus)
