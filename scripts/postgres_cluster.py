#!/usr/bin/env python3
"""A three-member PostgreSQL cluster of the project's own under Patroni (development, tests, chaos).

Never the machine's PostgreSQL (5432): members ``<name>1`` .. ``<name>3`` listen on ``BASE``,
``BASE+1``, ``BASE+2`` (Patroni's REST API on ``BASE+3000`` ..), with one etcd of their own on
``BASE+10`` (peers ``BASE+11``), every folder under the state folder (default
``var/postgres-cluster/<name>``). Patroni keeps its state in etcd through the v2 API (its ``etcd``
section; etcd 3.4 serves v2 only with ``--enable-v2``), not v3 (``etcd3``): Debian's Patroni 3.0.2
renews its leader key over v3 without a compare, from a cached view, so a primary frozen past the
TTL took the key back from its promoted successor when it resumed (seen here; the successor was
demoted and rewound, its commits lost). Over v2 that renewal is a compare-and-swap on the owner's
name. ``synchronous_mode`` is on: a
commit returns once a standby has it, so the standby Patroni promotes holds every committed row.
Debian's ``patroni`` and ``etcd-server`` are installed when missing (root). PostgreSQL runs as
the ``postgres`` user (it refuses root); every member trusts 127.0.0.1 (a test cluster).

Usage (``--name`` sagapg, ``--base-port`` 5441, ``--root`` the state folder):

    scripts/postgres_cluster.py start          # start etcd and the members (reusing running ones)
    scripts/postgres_cluster.py url shop       # a libpq multi-host URL to the writable member; creates shop
    scripts/postgres_cluster.py status         # each member: role, state, pids
    scripts/postgres_cluster.py primary        # the current primary's name
    scripts/postgres_cluster.py kill-primary   # SIGKILL the primary's Patroni and postmaster (a crash)
    scripts/postgres_cluster.py freeze         # SIGSTOP the primary (Patroni and every postgres process)
    scripts/postgres_cluster.py thaw           # SIGCONT every frozen member
    scripts/postgres_cluster.py stop           # stop everything, whatever its state, and remove the folders

``kill-primary`` kills Patroni with the postmaster: a Patroni left alive restarts its postmaster in
place, still primary, and no failover happens. ``start`` brings a killed member back, as a replica
when another member has been promoted meanwhile. Tests import ``Cluster`` and always ``stop()`` it.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MEMBERS = 3
REST_OFFSET = 3000
ETCD_CLIENT_OFFSET, ETCD_PEER_OFFSET = 10, 11
STARTUP_TIMEOUT = 120  # seconds: etcd, three initdb/basebackups, a leader and a synchronous standby
STOP_TIMEOUT = 30
PG_BIN = Path("/usr/lib/postgresql/15/bin")
# Failure detection: the leader key lives TTL seconds unless renewed; Patroni runs a cycle every LOOP_WAIT.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 1, 4
BASE_DIR = Path(__file__).resolve().parents[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def signal_pids(pids, sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def get_json(port: int, path: str, timeout: float = 2) -> tuple[int, dict]:
    """(HTTP status, body) of a Patroni REST call; (0, {}) when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError):
        return 0, {}


def ensure_packages() -> None:
    """Debian's patroni and etcd-server, installed when their binaries are missing."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from debian_packages import DebianPackage, install

    for package, binary in (("etcd-server", "etcd"), ("patroni", "patroni")):
        if shutil.which(binary) is None:
            install(
                DebianPackage(
                    name=package,
                    how_to=f"As root: apt-get install -y {package}",
                    not_root=f"{binary} is missing and only root can install it.",
                    still_running=f"the packaged {package} service is still running (pids {{pids}}); stop it by hand",
                    daemon_pids=lambda binary=binary: packaged_daemons(binary),
                )
            )


def packaged_daemons(binary: str) -> list[int]:
    """The package's own service, if its install started one: ``binary`` processes not ours
    (ours always name their data folder or configuration file on the command line)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if words and any(Path(w).name == binary for w in words[:2]):
            if not any(w.startswith("--data-dir") or w.endswith(".yml") for w in words):
                pids.append(int(entry.name))
    return pids


@dataclass(frozen=True)
class Member:
    index: int  # 1-based
    name: str
    port: int
    folder: Path

    @property
    def rest_port(self) -> int:
        return self.port + REST_OFFSET

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    def patroni_pid(self) -> int | None:
        try:
            pid = int((self.folder / "patroni.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def processes(self) -> list[int]:
        """Patroni, the postmaster and its children (backends, walsender, ...), in that order."""
        postmaster = self.postmaster_pid()
        pids = [self.patroni_pid(), postmaster, *(children(postmaster) if postmaster else [])]
        return [p for p in pids if p]


class Cluster:
    def __init__(self, name: str = "sagapg", base_port: int = 5441, root: Path | None = None) -> None:
        self.name = name
        self.base_port = base_port
        self.root = Path(root or BASE_DIR / "var" / "postgres-cluster" / name).resolve()
        self.members = [
            Member(i, f"{name}{i}", base_port + i - 1, self.root / f"member{i}") for i in range(1, MEMBERS + 1)
        ]
        self.etcd_port = base_port + ETCD_CLIENT_OFFSET
        self.etcd_peer_port = base_port + ETCD_PEER_OFFSET

    def member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    def ports(self) -> list[int]:
        return [p for m in self.members for p in (m.port, m.rest_port)] + [self.etcd_port, self.etcd_peer_port]

    def url(self, dbname: str) -> str:
        """libpq's multi-host URL: tried in turn, kept only where writes are accepted."""
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in self.members)
        return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start etcd and every member not running (a killed one comes back as a replica); wait
        until there is a primary, a synchronous standby and three running members. Idempotent."""
        ensure_packages()
        self.root.mkdir(parents=True, exist_ok=True)
        if not pid_alive(self._etcd_pid()):
            self._check_free([self.etcd_port, self.etcd_peer_port])
            self._launch_etcd()
        try:
            self._wait(lambda: get_json(self.etcd_port, "/health")[1].get("health") == "true", "etcd to answer")
        except RuntimeError as exc:
            # Its own log says why (a port, a data folder): a start-up that times out shows it.
            log = self.root / "etcd.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no etcd.log)"
            raise RuntimeError(f"{exc}; etcd alive: {pid_alive(self._etcd_pid())}; etcd.log ends:\n{tail}") from None
        for member in self.members:
            if member.patroni_pid() is None:
                if member.postmaster_pid() is not None:  # left by a killed Patroni: Patroni starts its own
                    signal_pids([member.postmaster_pid()], signal.SIGKILL)
                    self._wait(lambda m=member: m.postmaster_pid() is None, f"{member.name}'s old postmaster")
                self._check_free([member.port, member.rest_port])
                self._launch(member)
        self._wait(self.healthy, "a primary, a synchronous standby and three running members")

    def stop(self, *, remove: bool = True) -> None:
        """Stop every member and etcd whatever their state (frozen, killed, running); remove the folders."""
        self.thaw()
        patronis = [m.patroni_pid() for m in self.members]
        signal_pids([p for p in patronis if p], signal.SIGTERM)  # Patroni stops its PostgreSQL first
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(m.processes() for m in self.members) and time.monotonic() < deadline:
            time.sleep(0.2)
        for member in self.members:
            signal_pids(member.processes(), signal.SIGKILL)
        etcd = self._etcd_pid()
        if pid_alive(etcd):
            signal_pids([etcd], signal.SIGTERM)
            deadline = time.monotonic() + 10
            while pid_alive(etcd) and time.monotonic() < deadline:
                time.sleep(0.1)
            signal_pids([etcd], signal.SIGKILL)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def kill_primary(self) -> str:
        """SIGKILL the primary's Patroni and postmaster; its name. Its backends end with the postmaster."""
        primary = self.member(self.primary())
        patroni, postmaster = primary.patroni_pid(), primary.postmaster_pid()
        signal_pids([p for p in (patroni, postmaster) if p], signal.SIGKILL)
        # gone before anyone restarts it: nothing of it answers on its port any more
        self._wait(lambda: not primary.processes() or not port_open(primary.port), f"{primary.name} to die", 15)
        return primary.name

    def freeze(self, name: str | None = None) -> str:
        """SIGSTOP a member (default the primary): Patroni first, so it cannot react, then PostgreSQL."""
        member = self.member(name or self.primary())
        signal_pids(member.processes(), signal.SIGSTOP)
        (member.folder / "frozen").touch()
        return member.name

    def thaw(self) -> list[str]:
        thawed = []
        for member in self.members:
            if (member.folder / "frozen").exists():
                signal_pids(member.processes(), signal.SIGCONT)
                (member.folder / "frozen").unlink(missing_ok=True)
                thawed.append(member.name)
        return thawed

    # --- state -------------------------------------------------------------------------------
    def topology(self) -> list[dict]:
        """Patroni's view of the members (name, role, state, lag), asked of any member that answers."""
        for member in self.members:
            if not (member.folder / "frozen").exists():
                status, body = get_json(member.rest_port, "/cluster")
                if status == 200 and body.get("members"):
                    return body["members"]
        return []

    def primary(self, timeout: float = 60) -> str:
        """The running primary's name, waiting for one (a failover) up to ``timeout`` seconds."""
        found: list[str] = []

        def leader() -> bool:
            found[:] = [m["name"] for m in self.topology() if m["role"] == "leader" and self.answers(m["name"])]
            return bool(found)

        self._wait(leader, "a running primary", timeout)
        return found[0]

    def answers(self, name: str) -> bool:
        """Its Patroni answers and says its PostgreSQL runs (etcd's view lags a killed member by the TTL)."""
        return get_json(self.member(name).rest_port, "/health")[0] == 200

    def roles(self) -> list[str]:
        """The roles of the members that run and answer, sorted."""
        members = [m for m in self.topology() if m["state"] in ("running", "streaming") and self.answers(m["name"])]
        return sorted(m["role"] for m in members)

    def healthy(self) -> bool:
        return self.roles() == ["leader", "replica", "sync_standby"]

    def status(self) -> list[str]:
        seen = {m["name"]: m for m in self.topology()}
        lines = [f"etcd port {self.etcd_port}: {'running' if pid_alive(self._etcd_pid()) else 'down'}"]
        for member in self.members:
            info = seen.get(member.name, {})
            frozen = " FROZEN" if (member.folder / "frozen").exists() else ""
            lines.append(
                f"{member.name} port {member.port}: {info.get('role', '-')} {info.get('state', 'down')}{frozen}"
                f" (patroni {member.patroni_pid() or '-'}, postmaster {member.postmaster_pid() or '-'})"
            )
        return lines

    def create_database(self, dbname: str) -> None:
        """Create ``dbname`` on the primary if it is not there (through the writable member)."""
        exists = self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{dbname}'")
        if exists.strip() != "1":
            self._psql(f'CREATE DATABASE "{dbname}"')

    # --- helpers -----------------------------------------------------------------------------
    def _psql(self, sql: str) -> str:
        done = subprocess.run(["psql", "-X", "-tA", "-v", "ON_ERROR_STOP=1", "-d", self.url("postgres"), "-c", sql],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"psql {sql!r}: {done.stderr.strip()}")
        return done.stdout

    @staticmethod
    def _check_free(ports: list[int]) -> None:
        for port in ports:
            if port_open(port):
                raise RuntimeError(f"port {port} is taken by another process")

    @staticmethod
    def _wait(predicate, what: str, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.2)

    def _etcd_pid(self) -> int | None:
        try:
            return int((self.root / "etcd.pid").read_text())
        except (OSError, ValueError):
            return None

    def _spawn(self, argv: list[str], log: Path, pid_file: Path) -> None:
        postgres = os.geteuid() == 0  # PostgreSQL refuses to run as root: everything runs as postgres
        if postgres:
            shutil.chown(self.root, "postgres", "postgres")
            for path in self.root.rglob("*"):
                shutil.chown(path, "postgres", "postgres")
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.root, start_new_session=True,
                                    user="postgres" if postgres else None,
                                    group="postgres" if postgres else None)  # fmt: skip
        pid_file.write_text(str(proc.pid))

    def _launch_etcd(self) -> None:
        peer, client = f"http://127.0.0.1:{self.etcd_peer_port}", f"http://127.0.0.1:{self.etcd_port}"
        argv = ["etcd", "--name", f"{self.name}-etcd", "--data-dir", str(self.root / "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"{self.name}-etcd={peer}", "--initial-cluster-token", self.name,
                "--initial-cluster-state", "new", "--enable-v2=true"]  # fmt: skip
        self._spawn(
            argv,
            self.root / "etcd.log",
            self.root / "etcd.pid",
        )

    def _launch(self, member: Member) -> None:
        member.folder.mkdir(parents=True, exist_ok=True)
        config = member.folder / "patroni.yml"
        config.write_text(json.dumps(self._patroni_config(member), indent=1))  # JSON is YAML
        self._spawn(["patroni", str(config)], member.folder / "patroni.log", member.folder / "patroni.pid")

    def _patroni_config(self, member: Member) -> dict:
        trust = ["local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"]
        return {
            "scope": self.name,
            "namespace": "/patroni/",
            "name": member.name,
            "restapi": {"listen": f"127.0.0.1:{member.rest_port}", "connect_address": f"127.0.0.1:{member.rest_port}"},
            "etcd": {"hosts": [f"127.0.0.1:{self.etcd_port}"], "protocol": "http"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {"wal_log_hints": "on", "max_connections": 200, "max_wal_senders": 10},
                        "pg_hba": trust,
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{member.port}",
                "connect_address": f"127.0.0.1:{member.port}",
                "data_dir": str(member.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(member.folder / "pgpass"),
                "pg_hba": trust,
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "postgres", "password": "postgres"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(member.folder), "fsync": "on"},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "url", "primary", "kill-primary",
                                            "freeze", "thaw"])  # fmt: skip
    parser.add_argument("dbname", nargs="?", help="url: the database (created if missing)")
    parser.add_argument("--name", default="sagapg", help="member names <name>1..3; default sagapg")
    parser.add_argument("--base-port", type=int, default=5441, help="PostgreSQL port of member 1; default 5441")
    parser.add_argument("--root", type=Path, default=None, help="state folder; default var/postgres-cluster/<name>")
    parser.add_argument("--keep", action="store_true", help="stop: keep the data folders")
    args = parser.parse_args(argv)
    cluster = Cluster(args.name, args.base_port, args.root)
    if args.command == "url" and not args.dbname:
        parser.error("url needs a database name")
    try:
        if args.command == "start":
            cluster.start()
            print("\n".join(cluster.status()))
        elif args.command == "stop":
            cluster.stop(remove=not args.keep)
        elif args.command == "status":
            print("\n".join(cluster.status()))
        elif args.command == "url":
            cluster.create_database(args.dbname)
            print(cluster.url(args.dbname))
        elif args.command == "primary":
            print(cluster.primary(timeout=30))  # long enough for a failover to end
        elif args.command == "kill-primary":
            print(cluster.kill_primary())
        elif args.command == "freeze":
            print(cluster.freeze())
        elif args.command == "thaw":
            print(" ".join(cluster.thaw()))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
