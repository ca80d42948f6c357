"""Figures 1 to 4: the ceilings, relay throughput, relay latency, growth and memory."""

import json
import os
import tempfile

from bench import bus
from bench.common import PY, Bench, median, percentile, progress

DRAIN_ROWS = 50_000
CEILING_MESSAGES = 30_000
LATENCY_RATE = 50.0  # events/s
LATENCY_SECONDS = 10.0
PUBLISHED_ROWS = 1_000_000
RSS_ROWS = (10_000, 200_000)


def throughput(bench: Bench) -> None:
    """Figures 1 and 2, round by round: both ceilings, then 1 and 2 relays, on an empty table."""
    rounds = []
    for n in range(1, bench.rounds + 1):
        bus.purge()
        kombu = bench.worker("kombu-publish", CEILING_MESSAGES, 60)["rate"]
        bus.purge()
        frames = bench.worker("frames-publish", CEILING_MESSAGES, 60)["rate"]
        bus.purge()
        bench.db.reset_outbox()
        bench.db.insert_outbox(DRAIN_ROWS)
        sql = bench.worker("sql-claim", 500, 120)["rate"]
        relay1 = bench.drain(DRAIN_ROWS, 1)  # one process, RELAY_PIPELINES (2) loops
        bus.purge()
        single = bench.drain(DRAIN_ROWS, 1, env={"RELAY_PIPELINES": "1"})
        bus.purge()
        relay2 = bench.drain(DRAIN_ROWS, 2)
        bus.purge()
        rounds.append(
            {"kombu": kombu, "frames": frames, "sql": sql, "relay1": relay1, "relay1_single": single, "relay2": relay2}
        )
        progress(
            f"1-2 throughput round {n}/{bench.rounds}: kombu loop {kombu:,.0f}/s, batched frames {frames:,.0f}/s, "
            f"SQL claim {sql:,.0f} rows/s, 1 relay {relay1:,.0f}/s (one pipeline: {single:,.0f}/s), "
            f"2 relays {relay2:,.0f}/s"
        )
    lower = [min(r["kombu"], r["sql"]) for r in rounds]
    bench.figures["1_ceilings"] = {
        "kombu_publish_per_s": median([r["kombu"] for r in rounds]),
        "sql_claim_rows_per_s": median([r["sql"] for r in rounds]),
        "frames_publish_per_s": median([r["frames"] for r in rounds]),
        "rounds": rounds,
    }
    bench.figures["2_relay_throughput"] = {
        "relay1_per_s": median([r["relay1"] for r in rounds]),
        "relay1_single_pipeline_per_s": median([r["relay1_single"] for r in rounds]),
        "relay2_per_s": median([r["relay2"] for r in rounds]),
        "lower_ceiling_per_s": median(lower),
        "ratio1": median([r["relay1"] / low for r, low in zip(rounds, lower, strict=True)]),
        "ratio2": median([r["relay2"] / low for r, low in zip(rounds, lower, strict=True)]),
        # Against the stricter ceiling: the relay's own way of writing frames, without DB or confirms.
        "ratio1_frames": median([r["relay1"] / r["frames"] for r in rounds]),
        "ratio1_single_pipeline": median([r["relay1_single"] / low for r, low in zip(rounds, lower, strict=True)]),
        "target_ratio1": 0.85,
    }


def _latency_round(bench: Bench, queue: str) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        sent, got = os.path.join(tmp, "sent.json"), os.path.join(tmp, "got.json")
        count = int(LATENCY_RATE * LATENCY_SECONDS)
        consumer = bench.procs.start(
            "latency-consumer",
            [PY, "-m", "bench.workers", "latency-consumer", queue, str(count), str(LATENCY_SECONDS + 20), got],
        )
        bench.db.wait(lambda: bus.consumers(queue) > 0, 30, "the latency consumer")
        bench.worker("latency-producer", LATENCY_RATE, LATENCY_SECONDS, sent, timeout=LATENCY_SECONDS + 60)
        consumer.wait(timeout=LATENCY_SECONDS + 30)
        bench.procs.stop(consumer)
        with open(sent) as fh:
            committed = json.load(fh)
        with open(got) as fh:
            arrived = json.load(fh)
    lost = set(committed) - set(arrived)
    if lost:
        raise RuntimeError(f"{len(lost)} of {len(committed)} latency messages never arrived")
    return [(arrived[m] - committed[m]) * 1000 for m in committed]


def latency(bench: Bench) -> None:
    """Figure 3: commit to arrival at a queue at a light steady load, and what NOTIFY costs."""
    queue = "bench_latency"
    bus.capture_queue(queue, "bench.latency.#")
    bench.db.reset_outbox()
    relay = bench.start_relays(1)
    rounds = []
    try:
        for n in range(1, bench.rounds + 1):
            ms = _latency_round(bench, queue)
            rounds.append({"p50_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99), "max_ms": max(ms)})
            progress(
                f"3 latency round {n}/{bench.rounds}: {len(ms)} events at {LATENCY_RATE:.0f}/s, "
                f"p50 {rounds[-1]['p50_ms']:.1f} ms, p99 {rounds[-1]['p99_ms']:.1f} ms"
            )
        # Without the trigger the relay is back to polling (RELAY_POLL_INTERVAL, 1 s by default).
        bench.db.run("ALTER TABLE messaging_outbox DISABLE TRIGGER messaging_outbox_notify")
        try:
            polled = _latency_round(bench, queue)
        finally:
            bench.db.run("ALTER TABLE messaging_outbox ENABLE TRIGGER messaging_outbox_notify")
        progress(
            f"3 latency, polling only: p50 {percentile(polled, 0.5):.0f} ms, p99 {percentile(polled, 0.99):.0f} ms"
        )
    finally:
        bench.stop(relay)
        bus.delete(queue)
    cost = notify_cost(bench)
    bench.figures["3_latency"] = {
        "p50_ms": median([r["p50_ms"] for r in rounds]),
        "p99_ms": median([r["p99_ms"] for r in rounds]),
        "polling_only_p50_ms": percentile(polled, 0.5),
        "polling_only_p99_ms": percentile(polled, 0.99),
        "target_p50_ms": 10,
        "target_p99_ms": 50,
        "rounds": rounds,
        "notify_cost": cost,
    }


def notify_cost(bench: Bench, writers: int = 4, seconds: float = 3.0) -> dict:
    """Single-row outbox commits/s from several writers, with the NOTIFY trigger and without."""

    def rate() -> float:
        procs = [
            bench.procs.start("insert-rate", [PY, "-m", "bench.workers", "insert-rate", str(seconds)])
            for _ in range(writers)
        ]
        total = 0.0
        for proc in procs:
            proc.wait(timeout=seconds + 60)
            bench.procs.stop(proc)
        for proc in procs:
            total += json.loads(bench.procs.last_line(proc))["rate"]
        return total

    rounds = []
    for n in range(1, bench.rounds + 1):
        bench.db.reset_outbox()
        with_trigger = rate()
        bench.db.run("ALTER TABLE messaging_outbox DISABLE TRIGGER messaging_outbox_notify")
        try:
            without = rate()
        finally:
            bench.db.run("ALTER TABLE messaging_outbox ENABLE TRIGGER messaging_outbox_notify")
        rounds.append({"with_notify": with_trigger, "without_notify": without})
        progress(
            f"3 NOTIFY cost round {n}/{bench.rounds}: {writers} writers, {with_trigger:,.0f} commits/s with the "
            f"trigger, {without:,.0f} without"
        )
    bench.db.reset_outbox()
    return {
        "writers": writers,
        "with_notify_per_s": median([r["with_notify"] for r in rounds]),
        "without_notify_per_s": median([r["without_notify"] for r in rounds]),
        "ratio": median([r["with_notify"] / r["without_notify"] for r in rounds]),
        "rounds": rounds,
    }


def growth(bench: Bench) -> None:
    """Figure 4: relay throughput beside a million published rows vs an empty table, paired
    round by round; peak RSS against the size of the backlog."""
    rates, empty, sql_rates, vacuums = [], [], [], []
    for n in range(1, bench.rounds + 1):
        bench.db.reset_outbox()
        bench.db.run("CHECKPOINT")
        empty.append(bench.drain(DRAIN_ROWS, 1, reset=False))
        bus.purge()
        bench.db.reset_outbox()
        bench.db.insert_outbox(PUBLISHED_ROWS, published=True)
        # Old published rows are vacuumed and checkpointed long ago; a checkpoint started by
        # this bulk write would make the drain pay full-page writes that steady state does not.
        bench.db.run("VACUUM ANALYZE messaging_outbox")
        bench.db.run("CHECKPOINT")
        before = autovacuums(bench)
        rates.append(bench.drain(DRAIN_ROWS, 1, reset=False))
        vacuums.append(autovacuums(bench) - before)
        bus.purge()
        bench.db.insert_outbox(DRAIN_ROWS)
        sql_rates.append(bench.worker("sql-claim", 500, 120)["rate"])
        progress(
            f"4 growth round {n}/{bench.rounds}: 1 relay {empty[-1]:,.0f}/s on an empty table, {rates[-1]:,.0f}/s "
            f"beside {PUBLISHED_ROWS:,} published rows ({vacuums[-1]} autovacuum(s) meanwhile); "
            f"SQL claim beside them {sql_rates[-1]:,.0f} rows/s"
        )
    rss = {}
    for rows in RSS_ROWS:
        bench.db.reset_outbox()
        bench.db.insert_outbox(rows)
        rss[rows] = peak_rss_mb(bench)
        bus.purge()
        progress(f"4 memory: relay --once draining {rows:,} rows: peak RSS {rss[rows]:.1f} MB")
    bench.db.reset_outbox()
    bench.figures["4_growth"] = {
        "relay1_with_published_per_s": median(rates),
        "relay1_empty_per_s": median(empty),
        "ratio": median([r / e for r, e in zip(rates, empty, strict=True)]),
        "target_ratio": 0.9,
        "peak_rss_mb": {str(k): v for k, v in rss.items()},
        "rss_ratio": rss[RSS_ROWS[1]] / rss[RSS_ROWS[0]],
        "target_rss_ratio": 1.2,
        "sql_claim_with_published_per_s": median(sql_rates),
        "autovacuums_during_drain": vacuums,
        "rounds": {"with_published": rates, "empty": empty},
    }


def autovacuums(bench: Bench) -> int:
    return bench.db.one("SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'messaging_outbox'")[0]


def peak_rss_mb(bench: Bench) -> float:
    """Peak resident memory of ``run_outbox_relay --once`` until it has drained the outbox."""
    proc = bench.procs.manage("relay-once", "run_outbox_relay", "--once")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    bench.procs.stop(proc)
    if proc.returncode:
        raise RuntimeError(f"relay --once exited {proc.returncode}")
    return usage.ru_maxrss / 1024
