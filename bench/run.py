#!/usr/bin/env python3
"""`make bench`: the seven figures of the performance issue, each beside its ceiling, and
figure 8, the cost of tracing (OpenTelemetry off and on, same run), figure 9, the cost of
replication (the relay and the saga on the single node and on a three-node cluster, same run),
figure 10, the saga's pace with the fake gateway answering at 0, 50, 250 and 1,000 ms (same run),
figure 11, the cost of synchronous replication in PostgreSQL (the saga on one server and on a
three-member Patroni cluster, same run), figure 12, the saga choreographed against orchestrated
(SAGA_STYLE, same run), figure 13, the bus as an installed package against the release before
(a relay and a consumer, same run), and figure 14, the cost of encryption (figure 6's drain with
orders.order.created clear, its token encrypted and its customer's id sealed, same run).

Runs under scripts/with_test_services.py, which gives it a RabbitMQ vhost of its own
(``BROKER_URL``) and a database name (``TEST_DATABASE_NAME``); the bench creates that
database, migrates it and drops it at the end, and ends every process it started, whatever
happens. Prints progress while it runs, a table at the end, and writes the JSON of the run to
``bench/results/``.

Usage: bench/run.py [--rounds N] [--only 1-2,3,4,5,6,7,8,9,10,11,12,13,14] [--profile]
"""

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (  # noqa: E402
    app_figures,
    bus,
    cluster_figures,
    encryption_figures,
    gateway_figures,
    package_figures,
    pg_cluster_figures,
    relay_figures,
    saga_style_figures,
    tracing_figures,
)
from bench.common import (  # noqa: E402
    BASE_DIR,
    BENCH_ENCRYPTION_KEYS,
    PY,
    STARTED,
    Bench,
    Db,
    Processes,
    create_database,
    database_url,
    drop_database,
    progress,
)
from bench.report import table  # noqa: E402

FIGURES = {
    "1-2": relay_figures.throughput,
    "3": relay_figures.latency,
    "4": relay_figures.growth,
    "5": app_figures.consumers,
    "6": app_figures.end_to_end,
    "7": app_figures.web,
    "8": tracing_figures.tracing,
    "9": cluster_figures.cluster,
    "10": gateway_figures.gateway_pace,
    "11": pg_cluster_figures.pg_cluster,
    "12": saga_style_figures.saga_styles,
    "13": package_figures.package_cost,
    "14": encryption_figures.encryption_cost,
}


def child_env(db_url: str, var_dir: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": db_url,
        "GATEWAY_DATABASE_URL": db_url,
        "DEBUG": "0",
        "SECRET_KEY": "bench-only-not-a-secret",
        "MESSAGING_ENCRYPTION_KEYS": BENCH_ENCRYPTION_KEYS,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "BENCH_APP": "1",
        "FAKE_GATEWAY": "1",  # the fake card gateway, a development service, with DEBUG off too
        "LOG_LEVEL": "WARNING",
        "CHECKOUT_THROTTLE": "off",
        "VAR_DIR": var_dir,
        "PYTHONUNBUFFERED": "1",
    }


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def profile_relay(bench: Bench, out_dir: Path) -> str:
    """cProfile of one relay draining 50,000 rows with --once: where its time goes."""
    import pstats

    bench.db.reset_outbox()
    bench.db.insert_outbox(relay_figures.DRAIN_ROWS)
    stats_file = out_dir / "relay.pstats"
    bench.procs.run([PY, "-m", "cProfile", "-o", str(stats_file), "manage.py", "run_outbox_relay", "--once"])
    bus.purge()
    text = tempfile.SpooledTemporaryFile(mode="w+")
    stats = pstats.Stats(str(stats_file), stream=text)
    stats.sort_stats("tottime").print_stats(25)
    text.seek(0)
    return text.read()


def profile_consumer(bench: Bench, out_dir: Path) -> str:
    """cProfile of one consumer process handling 3,000 messages with --once."""
    import pstats

    bus.purge()
    bench.worker("preload", app_figures.CONSUMER_MESSAGES, app_figures.TICK)
    bus.wait_depth("bench_queue", app_figures.CONSUMER_MESSAGES, 60)
    stats_file = out_dir / "consumer.pstats"
    bench.procs.run([PY, "-m", "cProfile", "-o", str(stats_file), "manage.py", "run_consumers", "bench", "--once"])
    bus.purge()
    text = tempfile.SpooledTemporaryFile(mode="w+")
    pstats.Stats(str(stats_file), stream=text).sort_stats("tottime").print_stats(25)
    text.seek(0)
    return text.read()


def profile_checkout(bench: Bench) -> str:
    """cProfile of 300 checkouts through Django's test client (needs figure 6's product)."""
    env = {"ALLOWED_HOSTS": "testserver"}
    return bench.procs.run([PY, "-m", "bench.profile_checkout", "300"], env=env)


def phases_line(phases: dict) -> str:
    shares = ", ".join(f"{name} {share:.0%}" for name, share in phases["phases_share"].items())
    return (
        f"{phases['rows_per_s']:,.0f} rows/s in-process, CPU {phases['cpu_s'] / phases['wall_s']:.0%} of wall: {shares}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", default=",".join(FIGURES), help=f"figures to run, e.g. 1-2,3 (of {','.join(FIGURES)})"
    )
    parser.add_argument("--profile", action="store_true", help="also profile one relay (cProfile)")
    args = parser.parse_args()
    wanted = [key for key in args.only.split(",") if key]
    if unknown := set(wanted) - set(FIGURES):
        parser.error(f"unknown figures: {unknown}; known: {list(FIGURES)}")

    if not os.environ.get("BROKER_URL", "").startswith("amqp") or "DATABASE_URL" not in os.environ:
        sys.exit("run it with `make bench` (scripts/with_test_services.py gives it PostgreSQL and RabbitMQ)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    name = os.environ.get("TEST_DATABASE_NAME") or f"bench_{int(time.time())}"
    results_dir = BASE_DIR / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = Path(tempfile.mkdtemp(prefix="bench-"))
    db_url = database_url(name)
    procs = Processes(child_env(db_url, str(run_dir)), run_dir)
    report = {"started_at": stamp, "machine": machine(), "rounds": args.rounds, "figures": {}}
    db = None
    try:
        progress(f"database {name}, broker {os.environ['BROKER_URL'].rsplit('/', 1)[-1]}, logs in {run_dir}")
        app_figures.ensure_wrk()
        create_database(name)
        # Every context's tables, the orchestrator's too (figure 12 runs orchestrated orders).
        procs.run([PY, "manage.py", "migrate", "--noinput", "-v0"], env={"ORCHESTRATOR": "1"})
        procs.run([PY, "manage.py", "migrate", "--database", "gateway", "--noinput", "-v0"])
        db = Db(db_url)
        report["machine"]["postgresql"] = db.one("SHOW server_version")[0]
        # Declare the topology (the bench's queue included) once, as every relay would.
        procs.run([PY, "manage.py", "run_outbox_relay", "--once"])
        bench = Bench(db, procs, args.rounds)
        for key in wanted:
            progress(f"figure {key}")
            FIGURES[key](bench)
            report["figures"] = bench.figures
        if args.profile:
            out = procs.run([PY, "-m", "bench.relay_phases", str(relay_figures.DRAIN_ROWS)])
            report["relay_phases"] = json.loads(out.strip().splitlines()[-1])
            bus.purge()
            progress("relay phases: " + phases_line(report["relay_phases"]))
            report["relay_profile"] = profile_relay(bench, run_dir)
            report["consumer_profile"] = profile_consumer(bench, run_dir)
            if "6" in wanted:
                report["checkout_profile"] = profile_checkout(bench)
            for key in ("relay_profile", "consumer_profile", "checkout_profile"):
                if key in report:
                    (results_dir / f"bench-{stamp}-{key}.txt").write_text(report[key])
            progress(f"profiles written to bench/results/bench-{stamp}-*_profile.txt")
        report["machine"]["load_average_at_end"] = os.getloadavg()
        report["seconds"] = round(time.monotonic() - STARTED)
        print(table(report["figures"]))
        out = results_dir / f"bench-{stamp}.json"
        out.write_text(json.dumps(report, indent=2, default=str))
        progress(f"wrote {out.relative_to(BASE_DIR)} in {report['seconds']} s")
        return 0
    finally:
        procs.stop_all()
        if db is not None:
            db.close()
        if not os.environ.get("BENCH_KEEP_DATABASE"):
            drop_database(name)


if __name__ == "__main__":
    sys.exit(main())
