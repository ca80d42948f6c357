"""A rolling upgrade across deployments: a past release (as `git archive` gives it) runs some
contexts, this tree the others, each on its own database, one broker vhost (tests/support/split.py).

Against the last release before versioned events (commit 83b4deb, each context from its whole
tree), whose readers read orders.order.created v1:

- old orders with new payments, inventory and shipping: orders writes orders.order.created v1,
  which payments reads through its upcaster;
- new orders pinned to what the old read (EVENT_VERSIONS=orders.order.created=1) with old
  payments and inventory.

Against the release before the customer's id was sealed (commit c91459c, 9e4e309's parent, each
context as its own `make service` builds it: its bus's wheel, its platform), whose readers read
v1..v3: new orders pinned to v3 (the customer's id clear) with old payments, inventory and shipping.

Either way confirmed, declined and out of stock with its refund end right, the gateway's ledger
is exact, every event matches its version's schema, the customer's id travels clear, and no
deployment has a dead letter but the old orders' `unknown_event_type` for
payments.payment.succeeded and payments.payment.refunded (subscriptions newer than it), replayed
once orders is upgraded. And, against each release, the writer upgraded first without the pin:
the old reader dead-letters the new version (`unsupported_schema_version`), and once upgraded
replays it.
`make upgrade-test` runs it (docs/evolving-events.md).
"""

import io
import subprocess
import sys
import tarfile
import uuid
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest

from faultlib.invariants import contract_problems
from faultlib.processes import BASE_DIR, ProcessGroup, free_port, wait_until
from faultlib.web import checkout_body, get, post_checkout
from tests.support.split import Deployment, SplitSystem, install_requirements, make_tree

RELEASE = "83b4deb"  # the last release before this work: no shipping, its topology still in the kernel
RELEASE_BEFORE_V4 = "c91459c"  # 9e4e309^: its readers read orders.order.created v1..v3, the customer's id clear
INITIAL_STOCK = {"WIDGET": 1000, "GADGET": 500, "GIZMO": 10000, "LIMITED-PRINT": 3}

pytestmark = pytest.mark.upgrade


@pytest.fixture(scope="module")
def release_tree(tmp_path_factory):
    """``release_tree(release, context)``: the tree ``context`` runs from at ``release``, made once."""

    @cache
    def archived(release: str) -> Path:
        root = tmp_path_factory.mktemp(f"release-{release}")
        archive = subprocess.run(["git", "archive", release], cwd=BASE_DIR, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        return root

    @cache
    def tree(release: str, context: str) -> Path:
        root = archived(release)
        if not (root / "scripts" / "build_service.py").exists():
            # Before make service: the whole tree hosts the context (CONTEXTS), its bus in it (messaging/)
            assert (root / "kernel" / "topology.py").exists()
            return root
        # Its own make service, as it was deployed: run with this tree's Python, the bus would be this one's
        out = tmp_path_factory.mktemp(f"{release}-{context}") / "tree"
        built = subprocess.run(
            [sys.executable, "scripts/build_service.py", context, out], cwd=root, capture_output=True, text=True
        )
        assert built.returncode == 0, built.stderr
        return install_requirements(out)

    return tree


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
    ("release", "old", "written"),
    [
        pytest.param(RELEASE, ("orders",), 1, id="old-orders-new-payments-inventory"),
        pytest.param(RELEASE, ("payments", "inventory"), 1, id="new-orders-pinned-old-payments-inventory"),
        pytest.param(
            RELEASE_BEFORE_V4,
            ("payments", "inventory", "shipping"),
            3,
            id="new-orders-pinned-to-v3-old-payments-inventory-shipping",
        ),
    ],
)
def test_the_saga_ends_right_across_old_and_new_deployments(release, old, written, release_tree, tmp_path):
    # A new orders is pinned to the version the old readers read; an old orders writes it anyway.
    pin = {"EVENT_VERSIONS": f"orders.order.created={written}"}
    split = SplitSystem.create(
        tmp_path,
        uuid.uuid4().hex[:6],
        trees={context: release_tree(release, context) for context in old},
        extra_env={} if "orders" in old else {"orders": pin},
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
        # What the old payments reads, old orders or pinned: the customer's id clear (v4 would seal it).
        assert split["orders"].rows(
            "SELECT DISTINCT schema_version, payload->>'customer_id' FROM messaging_outbox "
            "WHERE event_type = 'orders.order.created'"
        ) == [(written, "web-test")]
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
            upgrade_orders_and_replay(split, group, late, paid=[ids["confirmed"], ids["oos"]])
    finally:
        group.stop_all()
        print(group.logs())
        split.destroy()


def late_subscription(split: SplitSystem) -> list[tuple]:
    """The new orders reads payments.payment.succeeded (to know an order was paid) and
    payments.payment.refunded (the return saga's reply); the new deployments declare those
    bindings, so the old orders meets them first: a dead letter each, to replay once orders is
    upgraded (docs/evolving-events.md, "Subscribe to another event")."""
    letters = split["orders"].rows("SELECT consumer, message_id, reason FROM messaging_dead_letter ORDER BY id")
    # succeeded: the confirmed and the out of stock order; refunded: the out of stock order
    assert split["orders"].rows(
        "SELECT event_type, count(*) FROM messaging_dead_letter GROUP BY event_type ORDER BY event_type"
    ) == [("payments.payment.refunded", 1), ("payments.payment.succeeded", 2)]
    assert {reason for _, _, reason in letters} == {"unknown_event_type"}
    return letters


def upgrade(split: SplitSystem, group: ProcessGroup, context: str) -> Deployment:
    """``context``'s processes stopped and started again from this tree, on the same database."""
    for name, proc, _ in list(group.procs):
        if name.startswith(f"{context}-") and proc.poll() is None:
            assert group.stop(proc) == 0
    old = split[context]
    upgraded = Deployment(context, make_tree(context), old.database, old.env, gateway=split.gateway)
    split.deployments[context] = upgraded
    split.migrate()
    upgraded.start(group, "relay", "run_outbox_relay")
    upgraded.start(group, "consumers", "run_consumers")
    return upgraded


def upgrade_orders_and_replay(split: SplitSystem, group: ProcessGroup, late: list[tuple], *, paid: list[str]) -> None:
    upgraded = upgrade(split, group, "orders")
    replayed = upgraded.manage("dead_letters", "replay", "--all")
    assert replayed.returncode == 0, replayed.stderr
    split.wait_quiet(timeout=120)
    assert upgraded.rows("SELECT reason, replayed_at IS NOT NULL FROM messaging_dead_letter") == [
        ("unknown_event_type", True)
    ] * len(late)
    assert sorted(upgraded.rows("SELECT id::text FROM orders_order WHERE paid_at IS NOT NULL")) == sorted(
        (order_id,) for order_id in paid
    )


@pytest.mark.parametrize(
    ("release", "old", "refusal"),
    [
        pytest.param(
            RELEASE,
            ("payments", "inventory"),
            "payments handles orders.order.created versions [1], not 4",
            id="old-reader-of-v1",
        ),
        pytest.param(
            RELEASE_BEFORE_V4,
            ("payments", "inventory", "shipping"),
            "orders.order.created v4 is newer than payments reads (v1..v3): "
            "upgrade this deployment, then replay this dead letter (docs/evolving-events.md)",
            id="old-reader-of-v1-to-v3",
        ),
    ],
)
def test_a_writer_upgraded_before_its_reader_leaves_a_dead_letter_replayed_once_the_reader_is(
    release, old, refusal, release_tree, tmp_path
):
    # Given new orders without the pin, and the old payments and others
    split = SplitSystem.create(
        tmp_path, uuid.uuid4().hex[:6], trees={context: release_tree(release, context) for context in old}
    )
    (tmp_path / "logs").mkdir()
    group = ProcessGroup(tmp_path / "logs", {})
    try:
        api = start(split, group)
        order_id = post_checkout(api, checkout_body("WIDGET", 2)).json()["id"]

        # When the old payments meets orders.order.created v4 (the customer's id sealed): a dead
        # letter that says why, nothing charged
        payments = split["payments"]
        wait_until(
            lambda: (
                payments.rows("SELECT consumer, reason, error FROM messaging_dead_letter")
                == [("payments", "unsupported_schema_version", refusal)]
            ),
            timeout=60,
            message="the old payments' dead letter",
        )
        assert split["orders"].rows(
            "SELECT schema_version, jsonb_typeof(payload->'customer_id') FROM messaging_outbox "
            "WHERE event_type = 'orders.order.created'"
        ) == [(4, "object")]
        assert get(api, f"/api/orders/{order_id}/").json()["status"] == "PENDING"
        assert ledger_of(split) == {}

        # Then payments upgraded (this tree, the same database) replays it: the order completes
        upgraded = upgrade(split, group, "payments")
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
