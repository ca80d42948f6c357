"""Where one relay's time goes, phase by phase, draining ROWS rows in-process.

``python -m bench.relay_phases ROWS [PUBLISHED]`` (run by bench/run.py --profile, in the bench's
environment). Wraps the relay's own functions with timers; no sampling overhead, unlike
cProfile. Prints JSON: seconds per phase, wall and CPU time, rows/s.
"""

import json
import os
import sys
import time
from collections import defaultdict

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from django.db import connection  # noqa: E402
from reliable_messaging import _publisher as publisher  # noqa: E402
from reliable_messaging import _relay as relay  # noqa: E402

SPENT: dict[str, float] = defaultdict(float)


def timed(name: str, func):
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - started

    return wrapper


def main(rows: int, published: int = 0) -> dict:
    relay.claim_batch = timed("claim (SELECT ... FOR UPDATE SKIP LOCKED)", relay.claim_batch)
    relay.envelope_for_outbox = timed("build messages", relay.envelope_for_outbox)
    relay.mark_published = timed("mark published (UPDATE)", relay.mark_published)
    publisher.BatchPublisher._send = timed("serialize and send frames", publisher.BatchPublisher._send)
    publisher.BatchPublisher._await_confirms = timed("wait for confirms", publisher.BatchPublisher._await_confirms)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE messaging_outbox")
        for count, state in ((published, "now()"), (rows, "NULL")):
            cursor.execute(
                f"""
                INSERT INTO messaging_outbox (event_id, source, aggregate_type, aggregate_id, event_type,
                    schema_version, correlation_id, causation_id, traceparent, payload, created_at, published_at,
                    attempts, last_error)
                SELECT gen_random_uuid(), 'bench', 'thing', n::text, 'bench.thing.happened', 1, n::text, '', '',
                    '{{"order_id": "00000000-0000-0000-0000-000000000000", "total": "19.99"}}'::jsonb,
                    clock_timestamp(), {state}, 0, ''
                FROM generate_series(1, %s) AS n
                """,
                [count],
            )
        if published:
            cursor.execute("VACUUM ANALYZE messaging_outbox")
    worker = relay.OutboxRelay()
    worker._ensure_broker()
    started, cpu = time.perf_counter(), time.process_time()
    relayed = batches = 0
    while claimed := worker.relay_batch():
        relayed += claimed
        batches += 1
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    worker._reset_broker()
    phases = dict(SPENT)
    phases["build messages"] = phases.get("build messages", 0.0)
    phases["transaction overhead (BEGIN, SET LOCAL, COMMIT, bookkeeping)"] = wall - sum(phases.values())
    return {
        "rows": relayed,
        "batches": batches,
        "wall_s": wall,
        "cpu_s": cpu,
        "rows_per_s": relayed / wall,
        "phases_s": phases,
        "phases_share": {name: seconds / wall for name, seconds in phases.items()},
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(json.dumps(main(*args) if args else main(50_000)))
