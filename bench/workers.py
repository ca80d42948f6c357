"""The load loops, each run in a process of its own: ``python -m bench.workers NAME ARGS...``.

Each prints one JSON object on stdout. Every loop is bounded in count and in time.
"""

import json
import os
import sys
import time
from datetime import UTC, datetime

import psycopg
from kombu import Connection, Exchange, Producer, Queue
from reliable_messaging.hosting import new_event_id

from bench.common import BENCH_KEY, PAYLOAD

EXCHANGE = os.environ.get("MESSAGING_EXCHANGE", "ecommerce_events")
BODY = json.dumps(PAYLOAD, separators=(",", ":")).encode()
INSERT_OUTBOX = """
    INSERT INTO messaging_outbox (event_id, source, aggregate_type, aggregate_id, event_type, schema_version,
        correlation_id, causation_id, traceparent, payload, created_at, attempts, last_error)
    VALUES (%s, 'bench', 'thing', '1', %s, 1, '1', '', '', %s::jsonb, now(), 0, '')
"""


def headers(event_type: str = BENCH_KEY) -> dict:
    return {
        "event_type": event_type,
        "schema_version": 1,
        "occurred_at": datetime.now(UTC).isoformat(),
        "source": "bench",
    }


def properties() -> dict:
    return {
        "message_id": str(new_event_id()),
        "correlation_id": "1",
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "delivery_mode": 2,
    }


def kombu_publish(count: int, max_seconds: float) -> dict:
    """The ceiling of publishing: kombu's publish loop, persistent, no confirms."""
    with Connection(os.environ["BROKER_URL"]) as conn:
        producer = Producer(conn.channel(), exchange=Exchange(EXCHANGE, type="topic"), auto_declare=False)
        hdrs = headers()
        started = time.perf_counter()
        sent = 0
        while sent < count and time.perf_counter() - started < max_seconds:
            producer.publish(BODY, routing_key=BENCH_KEY, headers=hdrs, **properties())
            sent += 1
        seconds = time.perf_counter() - started
    return {"count": sent, "seconds": seconds, "rate": sent / seconds}


def frames_publish(count: int, max_seconds: float) -> dict:
    """A stricter ceiling: py-amqp frames written 500 messages at a time, as the relay does, no confirms."""
    from amqp import Message, spec
    from amqp.method_framing import frame_writer
    from amqp.serialization import dumps

    chunks: list[bytes] = []

    class Sink:
        def write(self, data) -> None:
            chunks.append(bytes(data))

    with Connection(os.environ["BROKER_URL"]) as conn:
        channel = conn.channel()
        write_frame = frame_writer(channel.connection, Sink())
        args = dumps("Bssbb", (0, EXCHANGE, BENCH_KEY, True, False))
        hdrs = headers()
        started = time.perf_counter()
        sent = 0
        while sent < count and time.perf_counter() - started < max_seconds:
            for _ in range(500):
                write_frame(
                    1,
                    channel.channel_id,
                    spec.Basic.Publish,
                    args,
                    Message(BODY, application_headers=hdrs, **properties()),
                )
            channel.connection.transport.write(b"".join(chunks))
            chunks.clear()
            sent += 500
        seconds = time.perf_counter() - started
    return {"count": sent, "seconds": seconds, "rate": sent / seconds}


def sql_claim(batch: int, max_seconds: float) -> dict:
    """The ceiling of the database: claim ``batch`` rows with SKIP LOCKED, mark them published."""
    claimed = 0
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        started = time.perf_counter()
        while time.perf_counter() - started < max_seconds:
            with conn.transaction():
                rows = conn.execute(
                    """
                    SELECT id, event_id, source, event_type, schema_version, correlation_id, causation_id,
                        traceparent, payload, created_at, attempts
                    FROM messaging_outbox WHERE published_at IS NULL AND parked_at IS NULL
                        AND (next_attempt_at IS NULL OR next_attempt_at <= now())
                    ORDER BY created_at, id LIMIT %s FOR UPDATE SKIP LOCKED
                    """,
                    [batch],
                ).fetchall()
                if rows:
                    conn.execute(
                        "UPDATE messaging_outbox SET published_at = now() WHERE id = ANY(%s)", [[r[0] for r in rows]]
                    )
            if not rows:
                break
            claimed += len(rows)
        seconds = time.perf_counter() - started
    return {"count": claimed, "seconds": seconds, "rate": claimed / seconds}


def preload(count: int, event_type: str, max_seconds: float = 60) -> dict:
    """Put ``count`` messages for the consumers on the bus, and wait for the broker's confirms
    (a quorum queue may drop what a closing channel had not yet handed over)."""
    acked = 0

    def on_ack(delivery_tag: int, multiple: bool) -> None:
        nonlocal acked
        acked = delivery_tag if multiple else acked + 1

    with Connection(os.environ["BROKER_URL"]) as conn:
        channel = conn.channel()
        channel.confirm_select()
        channel.events["basic_ack"].add(on_ack)
        producer = Producer(channel, exchange=Exchange(EXCHANGE, type="topic"), auto_declare=False)
        hdrs = headers(event_type)
        for _ in range(count):
            producer.publish(BODY, routing_key=event_type, headers=hdrs, **properties())
        deadline = time.monotonic() + max_seconds
        while acked < count and time.monotonic() < deadline:
            try:
                conn.drain_events(timeout=1)
            except TimeoutError:
                continue
    return {"count": count, "confirmed": acked}


def consume_ack(queue: str, count: int, max_seconds: float) -> dict:
    """The ceiling of consuming: take and ack messages, nothing else (same prefetch as the consumer)."""
    got = 0
    first = last = None
    with Connection(os.environ["BROKER_URL"]) as conn:
        channel = conn.channel()
        channel.basic_qos(0, int(os.environ.get("CONSUMER_PREFETCH", "20")), False)

        def on_message(message) -> None:
            nonlocal got, first, last
            message.ack()
            got += 1
            last = time.perf_counter()
            if first is None:
                first = last

        consumer = conn.Consumer(Queue(queue, no_declare=True), channel=channel, on_message=on_message)
        consumer.consume()
        deadline = time.monotonic() + max_seconds
        while got < count and time.monotonic() < deadline:
            try:
                conn.drain_events(timeout=1)
            except TimeoutError:
                continue
    seconds = (last - first) if got > 1 else float("nan")
    return {"count": got, "seconds": seconds, "rate": (got - 1) / seconds if got > 1 else 0.0}


def inbox_sql(count: int, max_seconds: float) -> dict:
    """A consumer's transaction alone: inbox row and outbox row, one commit per message."""
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        started = time.perf_counter()
        done = 0
        payload = json.dumps(PAYLOAD)
        while done < count and time.perf_counter() - started < max_seconds:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO messaging_inbox (consumer, message_id, event_type, correlation_id, handled_at) "
                    "VALUES ('bench', %s, %s, '1', now()) ON CONFLICT (consumer, message_id) DO NOTHING",
                    [str(new_event_id()), BENCH_KEY],
                )
                conn.execute(INSERT_OUTBOX, [new_event_id(), "bench.thing.handled", payload])
            done += 1
        seconds = time.perf_counter() - started
    return {"count": done, "seconds": seconds, "rate": done / seconds}


def insert_rate(max_seconds: float) -> dict:
    """Single-row outbox commits for ``max_seconds`` (what a NOTIFY per commit costs)."""
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        payload = json.dumps(PAYLOAD)
        started = time.perf_counter()
        done = 0
        while time.perf_counter() - started < max_seconds and done < 1_000_000:
            with conn.transaction():
                conn.execute(INSERT_OUTBOX, [new_event_id(), "bench.thing.unrouted", payload])
            done += 1
        seconds = time.perf_counter() - started
    return {"count": done, "seconds": seconds, "rate": done / seconds}


def latency_producer(rate: float, seconds: float, out: str) -> dict:
    """Commit one outbox row every 1/rate s; record when each commit returned."""
    committed: dict[str, float] = {}
    payload = json.dumps(PAYLOAD)
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        started = time.monotonic()
        n = 0
        while n < rate * seconds:
            due = started + n / rate
            if (pause := due - time.monotonic()) > 0:
                time.sleep(pause)
            event_id = new_event_id()
            with conn.transaction():
                conn.execute(INSERT_OUTBOX, [event_id, "bench.latency.tick", payload])
            committed[str(event_id)] = time.time()
            n += 1
    with open(out, "w") as fh:
        json.dump(committed, fh)
    return {"count": len(committed)}


def latency_consumer(queue: str, count: int, max_seconds: float, out: str) -> dict:
    """Record when each message reached the queue's consumer (wall clock, same host)."""
    arrived: dict[str, float] = {}
    with Connection(os.environ["BROKER_URL"]) as conn:

        def on_message(message) -> None:
            arrived[message.properties.get("message_id", "")] = time.time()
            message.ack()

        consumer = conn.Consumer(Queue(queue, no_declare=True), on_message=on_message)
        consumer.consume()
        print("ready", file=sys.stderr, flush=True)
        deadline = time.monotonic() + max_seconds
        while len(arrived) < count and time.monotonic() < deadline:
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                continue
    with open(out, "w") as fh:
        json.dump(arrived, fh)
    return {"count": len(arrived)}


WORKERS = {
    "kombu-publish": lambda a: kombu_publish(int(a[0]), float(a[1])),
    "frames-publish": lambda a: frames_publish(int(a[0]), float(a[1])),
    "sql-claim": lambda a: sql_claim(int(a[0]), float(a[1])),
    "preload": lambda a: preload(int(a[0]), a[1]),
    "consume-ack": lambda a: consume_ack(a[0], int(a[1]), float(a[2])),
    "inbox-sql": lambda a: inbox_sql(int(a[0]), float(a[1])),
    "insert-rate": lambda a: insert_rate(float(a[0])),
    "latency-producer": lambda a: latency_producer(float(a[0]), float(a[1]), a[2]),
    "latency-consumer": lambda a: latency_consumer(a[0], int(a[1]), float(a[2]), a[3]),
}

if __name__ == "__main__":
    print(json.dumps(WORKERS[sys.argv[1]](sys.argv[2:])))
