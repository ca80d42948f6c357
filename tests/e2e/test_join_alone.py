"""A new service joins a running split alone. The shop runs as one deployment per installed
context, orders flowing; ``notifications``, scaffolded by ``startcontext`` in another tree, starts
as one more deployment whose tree carries its own code and declaration only (no other context's
code or declaration, the schemas of what it consumes from a shared folder). Its
``prepare_deployment`` declares its queue; from then on it handles every order confirmed or
failed, with no other deployment restarted or changed. What was published before is not its to
receive, until ``backfill`` sends it from the event log, once.
"""

import shutil
import time

import psycopg
import pytest

from faultlib.processes import BASE_DIR, ProcessGroup, free_port, wait_until
from faultlib.web import checkout_body, get, post_checkout
from tests.support.scaffold import scaffold, scaffold_env, throwaway_name, tree_copy
from tests.support.split import CACHES, NOT_SHIPPED, Deployment, SplitSystem, admin_url, database_url

NAME = throwaway_name()


@pytest.fixture
def split(tmp_path):
    with SplitSystem.migrated(tmp_path / "split") as system:
        yield system


@pytest.fixture
def group(tmp_path):
    (tmp_path / "logs").mkdir()
    processes = ProcessGroup(tmp_path / "logs", {})
    yield processes
    processes.stop_all()
    print(processes.logs())


@pytest.fixture
def newcomer(tmp_path, split):
    """The notifications deployment: scaffolded in a copy of the tree, then shipped alone."""
    scaffolded = tree_copy(tmp_path / "scaffolded")
    made = scaffold(scaffolded, scaffold_env(tmp_path / "scaffold-var"), NAME)
    assert made.returncode == 0, made.stdout + made.stderr
    alone = tmp_path / f"{NAME}-service"
    # Its own code and declaration; of the other contexts, nothing at all.
    others = {p.parent.name for p in scaffolded.glob("*/context.toml")} - {NAME}
    shutil.copytree(
        scaffolded,
        alone,
        symlinks=True,
        ignore=lambda d, names: {
            n for n in names if n in CACHES or (d == str(scaffolded) and (n in NOT_SHIPPED or n in others))
        },
    )
    # The schemas of the events it reads: one shared folder (the snapshot every release keeps).
    shutil.copytree(BASE_DIR / "docs" / "schemas-snapshot", alone / "event-schemas")
    database = f"{split.created[0].rsplit('_', 1)[0]}_{NAME}"[:63]
    with psycopg.connect(admin_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    split.created.append(database)  # dropped with the split
    env = {
        **split["orders"].env,
        "CONTEXTS": NAME,
        "DATABASE_URL": database_url(database),
        "GATEWAY_DATABASE_URL": database_url(database),
        "EVENT_SCHEMAS_DIR": str(alone / "event-schemas"),
        "VAR_DIR": str(tmp_path / f"var-{NAME}"),
    }
    return Deployment(NAME, alone, database, env)


def confirmed_or_failed(api: str, order_ids: list[str]) -> dict[str, str]:
    return {oid: get(api, f"/api/orders/{oid}/").json()["status"] for oid in order_ids}


def received(deployment: Deployment) -> list[tuple[str, str]]:
    return sorted(deployment.rows(f"SELECT correlation_id, event_type FROM {NAME}_received"))


def test_a_new_context_joins_a_running_split_alone(split, group, newcomer):
    # Given the shop running as its deployments, orders flowing
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    split["orders"].start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
    for deployment in split.deployments.values():
        deployment.start(group, "relay", "run_outbox_relay")
        deployment.start(group, "consumers", "run_consumers")
    running = list(group.procs)
    assert split["inventory"].manage("seed_catalog").returncode == 0
    wait_until(lambda: get(api, "/api/products/").status == 200 and len(get(api, "/api/products/").json()) == 4,
               timeout=60, message="orders' copy of the catalogue")  # fmt: skip
    before = [post_checkout(api, checkout_body("WIDGET", 1)).json()["id"] for _ in range(3)]
    wait_until(lambda: set(confirmed_or_failed(api, before).values()) == {"CONFIRMED"}, timeout=60, message="before")

    # When notifications, whose tree holds no other context, prepares (its queue) and starts
    assert not any((newcomer.tree / other).exists() for other in ("orders", "payments", "inventory", "shipping"))
    prepared = newcomer.manage("prepare_deployment")
    assert prepared.returncode == 0, prepared.stderr
    assert prepared.stdout.splitlines()[-1] == f"queues declared: {NAME}_queue"
    newcomer.start(group, "relay", "run_outbox_relay")
    newcomer.start(group, "consumers", "run_consumers")
    confirmed = [post_checkout(api, checkout_body("WIDGET", 1)).json()["id"] for _ in range(4)]
    declined = post_checkout(api, checkout_body("WIDGET", 1, token="tok_chargeDeclined")).json()["id"]
    after = [*confirmed, declined]
    # The declined order ends on its own, independently of the four: wait for all five to end.
    wait_until(lambda: "PENDING" not in confirmed_or_failed(api, after).values(), timeout=60, message="after")
    assert confirmed_or_failed(api, after) == {**dict.fromkeys(confirmed, "CONFIRMED"), declined: "FAILED"}

    # Then it handles every order decided after it started, each once; none from before
    expected = sorted([*((oid, "orders.order.confirmed") for oid in confirmed), (declined, "orders.order.failed")])
    wait_until(lambda: received(newcomer) == expected, timeout=60, message="notifications' rows")
    split.wait_quiet(timeout=120)
    assert received(newcomer) == expected
    assert not {oid for oid, _ in received(newcomer)} & set(before)
    # with no other deployment restarted: every process started before it still runs
    assert [proc.poll() for _, proc, _ in running] == [None] * len(running)

    # And a backfill from the event log sends it the confirmations it missed, once each
    backfilled = split["orders"].manage("backfill", "orders.order.confirmed", "--to", NAME)
    assert backfilled.returncode == 0, backfilled.stderr
    assert backfilled.stdout.strip() == f"{len(before) + len(confirmed)} orders.order.confirmed sent to {NAME}_queue"
    everything = sorted([*expected, *((oid, "orders.order.confirmed") for oid in before)])
    wait_until(lambda: received(newcomer) == everything, timeout=60, message="the backfilled confirmations")
    time.sleep(1)  # the ones it had already come back as duplicates: nothing more happens
    assert received(newcomer) == everything
    assert newcomer.one("SELECT count(*) FROM messaging_inbox WHERE consumer = %s", [NAME]) == len(after) + len(before)
    refused = split["payments"].manage("backfill", "orders.order.confirmed", "--to", NAME)
    assert refused.returncode == 1 and "this deployment keeps no event log: run it where orders is hosted" in (
        refused.stderr
    )

    # An event recorded before the inbox's memory (INBOX_RETENTION, 14 days) is refused: a consumer
    # that had it then would handle it again. Said to be new to that consumer, all are sent.
    aged = split["orders"].rows(
        "UPDATE messaging_event_log SET recorded_at = now() - interval '15 days' WHERE message_id = "
        "(SELECT message_id FROM messaging_event_log WHERE event_type = %s ORDER BY id LIMIT 1) RETURNING 1",
        ["orders.order.confirmed"],
    )
    assert aged == [(1,)]
    forgotten = split["orders"].manage("backfill", "orders.order.confirmed", "--to", NAME)
    assert forgotten.returncode == 1
    assert "CommandError: 1 orders.order.confirmed were recorded before " in forgotten.stderr
    assert "past the inbox's memory (INBOX_RETENTION): a consumer that handled one then" in forgotten.stderr
    sent = split["orders"].manage("backfill", "orders.order.confirmed", "--to", NAME, "--past-inbox-retention")
    assert sent.stdout.strip() == f"{len(before) + len(confirmed)} orders.order.confirmed sent to {NAME}_queue"
    split.wait_quiet(timeout=120)
    assert received(newcomer) == everything  # within its inbox's memory: duplicates, nothing twice
