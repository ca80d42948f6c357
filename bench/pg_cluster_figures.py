"""Figure 11: the cost of synchronous replication in PostgreSQL. The saga (a backlog of accepted
checkouts drained by the Procfile's processes, as figure 6) on the machine's PostgreSQL and on a
three-member Patroni cluster of the bench's own (``scripts/postgres_cluster.py``, ``synchronous_mode``),
alternately in each round of the same run."""

import contextlib
import importlib.util
import random
import shutil
import tempfile
import uuid
from pathlib import Path

from bench import bus
from bench.app_figures import BACKLOG, start_web
from bench.cluster_figures import saga_rate
from bench.common import BASE_DIR, PY, Bench, Db, median, progress

_spec = importlib.util.spec_from_file_location("postgres_cluster", BASE_DIR / "scripts" / "postgres_cluster.py")
postgres_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(postgres_cluster)


def _free_base_port() -> int:
    for _ in range(50):
        base = random.randrange(20000, 40000)
        if not any(postgres_cluster.port_open(p) for p in postgres_cluster.Cluster("probe", base).ports()):
            return base
    raise RuntimeError("no free ports for the bench's PostgreSQL cluster")


def _gateway_anew(bench: Bench) -> None:
    """Stop the fake gateway: the next consumer starts it again, its ledger on the database now in use."""
    gateway = getattr(bench.procs, "gateway", None)
    if gateway is not None:
        bench.procs.stop(gateway)
        bench.procs.gateway = None


@contextlib.contextmanager
def on_database(bench: Bench, url: str):
    """The bench's processes (the fake gateway too) and its own queries use the database at ``url`` meanwhile."""
    env = bench.procs.env
    saved = bench.db, env["DATABASE_URL"], env["GATEWAY_DATABASE_URL"]
    bench.db = Db(url)
    env["DATABASE_URL"] = env["GATEWAY_DATABASE_URL"] = url
    _gateway_anew(bench)
    try:
        yield
    finally:
        bench.db.close()
        bench.db, env["DATABASE_URL"], env["GATEWAY_DATABASE_URL"] = saved
        _gateway_anew(bench)


def pg_cluster(bench: Bench) -> None:
    """Figure 11: saga orders/s (BACKLOG) on one PostgreSQL server vs a synchronous Patroni cluster."""
    root = Path(tempfile.mkdtemp(prefix="bench-pg-cluster-"))
    members = postgres_cluster.Cluster(f"benchpg{uuid.uuid4().hex[:6]}", _free_base_port(), root=root)
    single = bench.procs.env["DATABASE_URL"]
    try:
        progress("11 starting a three-member PostgreSQL cluster (about 10 s)")
        members.start()
        name = f"bench_{uuid.uuid4().hex[:8]}"
        members.create_database(name)
        replicated = members.url(name)
        with on_database(bench, replicated):
            for alias in ("default", "gateway"):
                bench.procs.run([PY, "manage.py", "migrate", "--database", alias, "--noinput", "-v0"])
        rounds = []
        for n in range(1, bench.rounds + 1):
            row = {}
            for where, url in (("single", single), ("cluster", replicated)):
                with on_database(bench, url):
                    web, web_url = start_web(bench)
                    try:
                        bus.purge()
                        row[f"saga_{where}_per_s"] = saga_rate(bench, web_url)
                        bus.purge()
                    finally:
                        bench.stop([web])
            rounds.append(row)
            progress(
                f"11 PostgreSQL cluster round {n}/{bench.rounds}: saga {row['saga_single_per_s']:.0f} orders/s on one "
                f"server, {row['saga_cluster_per_s']:.0f} on the synchronous cluster"
            )
    finally:
        members.stop()
        shutil.rmtree(root, ignore_errors=True)
    keys = ("saga_single_per_s", "saga_cluster_per_s")
    figure = {key: median([r[key] for r in rounds]) for key in keys}
    bench.figures["11_pg_cluster"] = figure | {
        "saga_ratio": figure["saga_cluster_per_s"] / figure["saga_single_per_s"],
        "backlog": BACKLOG,
        "rounds": rounds,
    }
