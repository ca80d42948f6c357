"""A rolling upgrade across deployments: the last release before versioned events (commit
83b4deb, whole, as `git archive` gives it) runs some contexts, this tree the others, each on
its own database, one broker vhost (tests/support/split.py).

- old orders with new payments, inventory and shipping: orders writes orders.order.created v1,
  which payments reads through its upcaster;
- new orders pinned to what the old read (EVENT_VERSIONS=orders.order.created=1) with old
  payments and inventory.

Either way confirmed, declined and out of stock with its refund end right, the gateway's ledger
is exact, every event matches its version's schema, and no deployment has a dead letter but the
old orders' `unknown_event_type` for payments.payment.succeeded (a subscription newer than it),
replayed once orders is upgraded. And
the writer upgraded first without the pin: the old reader dead-letters the new version, and
once upgraded replays it.
`make upgrade-test` runs it (docs/evolving-events.md).
"""

import io
import subprocess
import tarfile
import uuid
from decimal import Decimal

import pytest

from faultlib.invariants import contract_problems
from faultlib.processes import BASE_DIR, ProcessGroup, free_port, wait_until
from tests.support.split import Deployment, SplitSystem, make_tree
from tests.support.web import checkout_body, get, post_checkout

RELEASE = "83b4deb"  # the last release before this work: no shipping, its topology still in the kernel
INITIAL_STOCK = {"WIDGET": 1000, "GADGET": 500, "GIZMO": 10000, "LIMITED-PRINT": 3}
PIN = {"EVENT_VERSIONS": "orders.order.created=1"}

pytestmark = pytest.mark.upgrade


@pytest.fixture(scope="module")
def release_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp(f"release-{RELEASE}")
    archive = subprocess.run(["git", "archive", RELEASE], cwd=BASE_DIR, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    assert (root / "kernel" / "topology.py").exists() and not (root / "shipping").exists()
    return root


def start(split: SplitSystem, group: ProcessGroup) -> str:
    """Migrate, seed and start every deployment; the API's base URL once orders has the catalogue."""
    split.migrate()
    seeded = split["inventory"].manage("seed_catalog")
    assert seeded.returncode == 0, seeded.stderr
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    split["orders"].start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
    for deployment in split.deployments.values():
        deployment.start(group, "relay", "run_outbox_relay")
        deployment.start(group, "consumers", "run_consumers")
    wait_until(
        lambda: get(api, "/api/products/").status == 200 and len(get(api, "/api/products/").json()) == 4,
        timeout=90,
        message="orders' storefront copy of inventory's catalogue",
    )
    return api


def ledger_of(split: SplitSystem) -> dict[str, list]:
    ledger: dict[str, list] = {}
    for order_id, kind, amount in split.ledger():
        ledger.setdefault(order_id, []).append((kind, amount))
    return ledger


@pytest.mark.parametrize(
    ("old", "pinned"),
    [(("orders",), ()), (("payments", "inventory"), ("orders",))],
    ids=["old-orders-new-payments-inventory", "new-orders-pinned-old-payments-inventory"],
)
def test_the_saga_ends_right_across_old_and_new_deployments(old, pinned, release_tree, tmp_path):
    split = SplitSystem.create(
        tmp_path,
        uuid.uuid4().hex[:6],
        trees={context: release_tree for context in old},
        extra_env={context: PIN for context in pinned},
    )
    (tmp_path / "logs").mkdir()
    group = ProcessGroup(tmp_path / "logs", {})
    try:
        api = start(split, group)

        confirmed = post_checkout(api, checkout_body("WIDGET", 2))
        declined = post_checkout(api, checkout_body("GADGET", 1, token="tok_chargeDeclined"))
        out_of_stock = post_checkout(api, checkout_body("LIMITED-PRINT", 4))
        assert [r.status for r in (confirmed, declined, out_of_stock)] == [201, 201, 201]
        ids = {
            name: r.json()["id"]
            for name, r in [("confirmed", confirmed), ("declined", declined), ("oos", out_of_stock)]
        }
        split.wait_quiet(timeout=120)

        outcomes = {name: get(api, f"/api/orders/{oid}/").json() for name, oid in ids.items()}
        assert {name: (o["status"], o["failure_reason"]) for name, o in outcomes.items()} == {
            "confirmed": ("CONFIRMED", None),
            "declined": ("FAILED", "payment_declined"),
            "oos": ("FAILED", "out_of_stock"),
        }
        assert ledger_of(split) == {
            ids["confirmed"]: [("charge", Decimal("39.98"))],
            ids["oos"]: [("charge", Decimal("1000.00")), ("refund", Decimal("1000.00"))],
        }
        # What the old payments reads: orders wrote version 1, old or pinned.
        assert split["orders"].rows(
            "SELECT DISTINCT schema_version FROM messaging_outbox WHERE event_type = 'orders.order.created'"
        ) == [(1,)]
        events = [
            row
            for deployment in split.deployments.values()
            for row in deployment.rows("SELECT event_type, schema_version, payload FROM messaging_outbox")
        ]
        assert contract_problems(events) == []
        report = split.check_invariants(initial_stock=INITIAL_STOCK)
        late = late_subscription(split) if "orders" in old else []
        assert report.violations == [f"no dead letter: orders: dead letter {letter}" for letter in late], str(report)
        if "orders" in old:
            upgrade_orders_and_replay(split, group, tmp_path, paid=[ids["confirmed"], ids["oos"]])
    finally:
        group.stop_all()
        print(group.logs())
        split.destroy()


def late_subscription(split: SplitSystem) -> list[tuple]:
    """The new orders reads payments.payment.succeeded (to know an order was paid); the new
    deployments declare that binding, so the old orders meets it first: a dead letter each,
    to replay once orders is upgraded (docs/evolving-events.md, "Subscribe to another event")."""
    letters = split["orders"].rows("SELECT consumer, message_id, reason FROM messaging_dead_letter ORDER BY id")
    event_types = split["orders"].rows("SELECT DISTINCT event_type FROM messaging_dead_letter")
    assert (len(letters), event_types) == (2, [("payments.payment.succeeded",)])  # confirmed and out of stock
    assert {reason for _, _, reason in letters} == {"unknown_event_type"}
    return letters


def upgrade_orders_and_replay(split: SplitSystem, group: ProcessGroup, tmp_path, *, paid: list[str]) -> None:
    for name, proc, _ in list(group.procs):
        if name.startswith("orders-") and proc.poll() is None:
            assert group.stop(proc) == 0
    old = split["orders"]
    upgraded = Deployment("orders", make_tree("orders"), old.database, old.env, gateway=split.gateway)
    split.deployments["orders"] = upgraded
    split.migrate()
    upgraded.start(group, "relay", "run_outbox_relay")
    upgraded.start(group, "consumers", "run_consumers")
    replayed = upgraded.manage("dead_letters", "replay", "--all")
    assert replayed.returncode == 0, replayed.stderr
    split.wait_quiet(timeout=120)
    assert (
        upgraded.rows("SELECT reason, replayed_at IS NOT NULL FROM messaging_dead_letter")
        == [("unknown_event_type", True)] * 2
    )
    assert sorted(upgraded.rows("SELECT id::text FROM orders_order WHERE paid_at IS NOT NULL")) == sorted(
        (order_id,) for order_id in paid
    )


def test_a_writer_upgraded_before_its_reader_leaves_a_dead_letter_replayed_once_the_reader_is(release_tree, tmp_path):
    # Given new orders without the pin, and the old payments and inventory
    split = SplitSystem.create(
        tmp_path, uuid.uuid4().hex[:6], trees={"payments": release_tree, "inventory": release_tree}
    )
    (tmp_path / "logs").mkdir()
    group = ProcessGroup(tmp_path / "logs", {})
    try:
        api = start(split, group)
        order_id = post_checkout(api, checkout_body("WIDGET", 2)).json()["id"]

        # When the old payments meets orders.order.created v2: a dead letter, nothing charged
        payments = split["payments"]
        wait_until(
            lambda: (
                payments.rows("SELECT consumer, reason FROM messaging_dead_letter")
                == [("payments", "unsupported_schema_version")]
            ),
            timeout=60,
            message="the old payments' dead letter",
        )
        assert get(api, f"/api/orders/{order_id}/").json()["status"] == "PENDING"
        assert ledger_of(split) == {}

        # Then payments upgraded (this tree, the same database) replays it: the order completes
        for name, proc, _ in list(group.procs):
            if name.startswith("payments-") and proc.poll() is None:
                assert group.stop(proc) == 0
        tree = make_tree("payments")
        upgraded = Deployment("payments", tree, payments.database, payments.env, gateway=split.gateway)
        split.deployments["payments"] = upgraded
        split.migrate()
        upgraded.start(group, "relay", "run_outbox_relay")
        upgraded.start(group, "consumers", "run_consumers")
        replayed = upgraded.manage("dead_letters", "replay", "--all")
        assert replayed.returncode == 0, replayed.stderr
        split.wait_quiet(timeout=120)
        outcome = get(api, f"/api/orders/{order_id}/").json()
        assert (outcome["status"], ledger_of(split)) == ("CONFIRMED", {order_id: [("charge", Decimal("39.98"))]})
        assert upgraded.rows("SELECT reason, replayed_at IS NOT NULL FROM messaging_dead_letter") == [
            ("unsupported_schema_version", True)
        ]
    finally:
        group.stop_all()
        print(group.logs())
        split.destroy()
