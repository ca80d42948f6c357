#!/usr/bin/env python3
"""A flood of bogus messages ahead of a genuine one (issue 43): how long the genuine one waits.

Each round puts ``--bogus`` messages (a mix of what a hostile publisher with access to the queue can
put in: a body that is not JSON, an event type the consumer does not handle, a payload with a number
JSON has not, a forged producer) into ``bench_queue`` through the default exchange, then one genuine
``bench.consumer.tick``; then it starts ``run_consumers bench`` (batches of 50, as the shop runs on
RabbitMQ; ``BROKER_PRODUCERS`` on, so that the producer check refuses the forged ones) and reports
the seconds from its start until the genuine message's inbox row, the same consumer's start-up alone
(the genuine message in an empty queue), and the dead-letter rows the flood added (and, where the
tree counts them, the refusals counted instead of stored).

``--tree DIR`` measures another checkout as well (the code before a change, say
``git clone -q /work/main /tmp/flood-before``): its ``manage.py`` and its bus package, run with
this virtual environment; the two trees alternate which goes first.

Usage (PostgreSQL and RabbitMQ of its own, as ``make bench``):
    scripts/with_test_services.py .venv/bin/python bench/flood_figures.py [--bogus 50000] [--rounds 3]
        [--tree /tmp/flood-before]
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bus  # noqa: E402
from bench.common import (  # noqa: E402
    BASE_DIR,
    PY,
    Db,
    Processes,
    create_database,
    database_url,
    drop_database,
    median,
    progress,
)
from bench.run import child_env  # noqa: E402

QUEUE = "bench_queue"
TICK = "bench.consumer.tick"
# The bogus classes, in turn: (what it is, body, headers, with the broker user as user_id).
CLASSES = (
    ("not_json", b"{this is no JSON", {"event_type": TICK}, True),
    ("unknown_event_type", b'{"n": 1}', {"event_type": "bench.consumer.unknown"}, True),
    ("invalid_payload", b'{"n": NaN}', {"event_type": TICK}, True),
    ("forged_producer", b'{"n": 1}', {"event_type": TICK}, False),
)
CONSUMER_ENV = {"CONSUMER_BATCH_SIZE": "50", "LOG_LEVEL": "WARNING"}


def broker_user() -> str:
    return unquote(urlsplit(os.environ["BROKER_URL"].split(";")[0]).username or "guest")


def publish(bogus: int) -> str:
    """``bogus`` messages of the classes in turn, then the genuine one; its message id."""
    import amqp

    parts = urlsplit(os.environ["BROKER_URL"].split(";")[0])
    genuine = str(uuid.uuid4())
    with amqp.Connection(
        host=f"{parts.hostname}:{parts.port or 5672}",
        userid=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
        virtual_host=unquote(parts.path[1:]) or "/",
    ) as connection:
        channel = connection.channel()
        user = broker_user()
        for n in range(bogus):
            _, body, headers, as_user = CLASSES[n % len(CLASSES)]
            extra = {"user_id": user} if as_user else {}
            message = amqp.Message(body, application_headers=headers, message_id=str(uuid.uuid4()), delivery_mode=2,
                                   content_type="application/json", **extra)  # fmt: skip
            channel.basic_publish(message, exchange="", routing_key=QUEUE)
        message = amqp.Message(b'{"n": 0}', application_headers={"event_type": TICK}, message_id=genuine,
                               delivery_mode=2, content_type="application/json", user_id=user)  # fmt: skip
        channel.confirm_select()
        channel.basic_publish_confirm(message, exchange="", routing_key=QUEUE, confirm_timeout=60)
    bus.wait_depth(QUEUE, bogus + 1, 120)
    return genuine


def one_round(db: Db, procs: Processes, tree: Path, bogus: int) -> dict:
    bus.purge(QUEUE, f"{QUEUE}_dead_letters")
    counted = db.one("SELECT to_regclass('messaging_dead_letter_flood') IS NOT NULL")[0]
    db.run("TRUNCATE messaging_dead_letter, messaging_inbox, messaging_outbox" + (
        ", messaging_dead_letter_flood" if counted else "") + " CASCADE")  # fmt: skip
    genuine = publish(bogus)
    env = {**CONSUMER_ENV, "BROKER_PRODUCERS": f"bench={broker_user()}_elsewhere"}
    if tree != BASE_DIR:  # its own bus package before this tree's (installed editable)
        env["PYTHONPATH"] = f"{tree / 'packages/django-reliable-messaging/src'}:{tree}"
    started = time.time()
    consumer = procs.start("consumer", [PY, "manage.py", "run_consumers", "bench"], env=env, cwd=tree)
    try:
        db.wait(lambda: db.one("SELECT count(*) FROM messaging_inbox WHERE message_id = %s", [genuine])[0] == 1,
                1800, "the genuine message to be handled", interval=0.2)  # fmt: skip
    finally:
        procs.stop(consumer)
    (handled_at,) = db.one("SELECT extract(epoch FROM handled_at)::float8 FROM messaging_inbox WHERE message_id = %s",
                           [genuine])  # fmt: skip
    rows = db.one("SELECT count(*) FROM messaging_dead_letter")[0]
    by_reason = dict(db.all("SELECT reason, count(*) FROM messaging_dead_letter GROUP BY reason ORDER BY reason"))
    not_stored = 0
    if counted:
        not_stored = db.one("SELECT coalesce(sum(received - stored), 0)::bigint FROM messaging_dead_letter_flood")[0]
    return {"seconds": handled_at - started, "dead_letter_rows": rows, "by_reason": by_reason, "not_stored": not_stored}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bogus", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="another checkout to measure too (e.g. the code before)")
    args = parser.parse_args()
    if not os.environ.get("BROKER_URL", "").startswith("amqp") or "DATABASE_URL" not in os.environ:
        sys.exit("run it under scripts/with_test_services.py (PostgreSQL and RabbitMQ)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    trees = {"this tree": BASE_DIR, **({"other tree": args.tree.resolve()} if args.tree else {})}
    name = os.environ.get("TEST_DATABASE_NAME") or f"bench_flood_{int(time.time())}"
    run_dir = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    db_url = database_url(name)
    procs = Processes(child_env(db_url, str(run_dir)), run_dir)
    db = None
    results: dict[str, dict[str, list[dict]]] = {t: {"flood": [], "alone": []} for t in trees}
    try:
        progress(f"database {name}, logs in {run_dir}")
        create_database(name)
        procs.run([PY, "manage.py", "migrate", "--noinput", "-v0"])
        procs.run([PY, "manage.py", "run_outbox_relay", "--once"])  # the topology, bench_queue's included
        db = Db(db_url)
        for n in range(1, args.rounds + 1):
            order = list(trees) if n % 2 else list(reversed(trees))
            for label in order:
                alone = one_round(db, procs, trees[label], 0)
                flood = one_round(db, procs, trees[label], args.bogus)
                results[label]["alone"].append(alone)
                results[label]["flood"].append(flood)
                progress(
                    f"round {n}/{args.rounds} {label}: the genuine one handled {flood['seconds']:.1f} s after the "
                    f"consumer started behind {args.bogus:,} bogus ({alone['seconds']:.1f} s alone); "
                    f"{flood['dead_letter_rows']:,} dead-letter rows {flood['by_reason']}, "
                    f"{flood['not_stored']:,} counted, not stored"
                )
    finally:
        procs.stop_all()
        if db is not None:
            db.close()
        drop_database(name)
    summary = {
        label: {
            "bogus": args.bogus,
            "seconds_median": median([r["seconds"] for r in rounds["flood"]]),
            "alone_seconds_median": median([r["seconds"] for r in rounds["alone"]]),
            "dead_letter_rows": [r["dead_letter_rows"] for r in rounds["flood"]],
            "not_stored": [r["not_stored"] for r in rounds["flood"]],
            "rounds": rounds,
        }
        for label, rounds in results.items()
    }
    print(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "load": os.getloadavg(), **summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
