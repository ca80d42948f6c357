#!/usr/bin/env python3
"""A three-node RabbitMQ cluster of the project's own on this machine (development, tests, chaos).

Never the machine's node (rabbit@localhost on 5672): the nodes are ``<name>1@localhost`` ..
``<name>3@localhost`` with AMQP ports ``BASE``, ``BASE+1``, ``BASE+2``, distribution ports
``BASE+20000`` .., each with its own data folder (owned by the ``rabbitmq`` user, which
``rabbitmq-server`` drops to), config file and an empty enabled-plugins file (the machine's
plugins would clash on their ports). Nodes 2 and 3 ``join_cluster`` node 1. Needs root.

Usage (``--name`` saga, ``--base-port`` 5701 and ``--vhost`` / by default):

    scripts/rabbitmq_cluster.py start            # start (or reuse) the three nodes; prints the BROKER_URL
    scripts/rabbitmq_cluster.py url              # the BROKER_URL naming the three nodes, kombu's way
    scripts/rabbitmq_cluster.py status           # each node: running or not, its pid
    scripts/rabbitmq_cluster.py queues           # every queue of the vhost: type, leader, members
    scripts/rabbitmq_cluster.py kill 1           # SIGKILL node 1 (a crash)
    scripts/rabbitmq_cluster.py restart 1        # start a stopped or killed node again (it rejoins)
    scripts/rabbitmq_cluster.py freeze 2         # SIGSTOP node 2; ``thaw 2`` sends SIGCONT
    scripts/rabbitmq_cluster.py stop             # stop the three nodes and remove their folders

Tests import ``Cluster`` from this file and always ``stop()`` it (``finally``).
"""

import argparse
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

NODES = 3
DIST_PORT_OFFSET = 20000
STARTUP_TIMEOUT = 180  # seconds: a node's boot with the cluster's feature flags; over a minute with both cores busy


def rabbitmqctl(node: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["rabbitmqctl", "-q", "-n", node, *args], capture_output=True, text=True, check=False, timeout=timeout
    )


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class Node:
    index: int  # 1-based
    name: str  # e.g. saga1@localhost
    port: int
    folder: Path

    @property
    def dist_port(self) -> int:
        return self.port + DIST_PORT_OFFSET

    @property
    def pid_file(self) -> Path:
        return self.folder / "rabbitmq.pid"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def process_alive(self) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq"),  # .conf is appended
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.pid_file),
        }


class Cluster:
    def __init__(self, name: str = "saga", base_port: int = 5701, root: Path | None = None, nodes: int = NODES) -> None:
        self.name = name
        self.root = root or Path(f"/tmp/rabbitmq-cluster-{name}")
        self.nodes = [
            Node(i, f"{name}{i}@localhost", base_port + i - 1, self.root / f"node{i}") for i in range(1, nodes + 1)
        ]

    def node(self, index: int) -> Node:
        return self.nodes[index - 1]

    def url(self, vhost: str = "/") -> str:
        """kombu's multi-node URL: the nodes in order, separated by ``;`` (failover, round-robin)."""
        path = "/" if vhost == "/" else f"/{vhost}"
        return ";".join(f"amqp://guest:guest@127.0.0.1:{n.port}{path}" for n in self.nodes)

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the nodes (reusing running ones) and form the cluster; idempotent."""
        for node in self.nodes:
            if not self.running(node):
                self._prepare(node)
                self._launch(node)
        for node in self.nodes:
            self._await(node)
        first = self.nodes[0]
        for node in self.nodes[1:]:
            if first.name not in self.running_members(node):
                self._ctl(node, "stop_app")
                self._ctl(node, "reset")
                self._ctl(node, "join_cluster", first.name)
                self._ctl(node, "start_app")
        for node in self.nodes:
            self._await(node)

    def stop(self, *, remove: bool = True) -> None:
        """Stop every node whatever state it is in (frozen, killed, running); remove the folders."""
        for node in self.nodes:
            pid = node.pid()
            if pid is not None and node.process_alive():
                os.kill(pid, signal.SIGCONT)  # a frozen node cannot stop
                try:
                    rabbitmqctl(node.name, "stop", timeout=30)
                except subprocess.TimeoutExpired:
                    pass
                if node.process_alive():
                    os.kill(pid, signal.SIGKILL)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def kill(self, index: int) -> None:
        node = self.node(index)
        os.kill(self._pid(node), signal.SIGKILL)
        deadline = time.monotonic() + 10  # gone: a restart right after must not find it still alive
        while (node.process_alive() or port_open(node.port)) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, index: int) -> None:
        """Start a killed or stopped node again on its own data: it comes back as a member."""
        node = self.node(index)
        if not self.running(node):
            self._launch(node)
        self._await(node)

    def freeze(self, index: int) -> None:
        os.kill(self._pid(self.node(index)), signal.SIGSTOP)

    def thaw(self, index: int) -> None:
        os.kill(self._pid(self.node(index)), signal.SIGCONT)

    # --- state -------------------------------------------------------------------------------
    def running(self, node: Node) -> bool:
        """Its process is alive (it may still be booting, or frozen)."""
        return node.process_alive()

    def running_members(self, node: Node) -> list[str]:
        out = self._ctl(node, "eval", "rabbit_nodes:all_running().", check=False).stdout
        return [n.strip(" '[]\n") for n in out.split(",") if n.strip(" '[]\n")]

    def add_vhost(self, vhost: str) -> None:
        first = self.running_node()
        self._ctl(first, "add_vhost", vhost)
        self._ctl(first, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")

    def running_node(self) -> Node:
        for node in self.nodes:
            if self.running(node) and port_open(node.port):
                return node
        raise RuntimeError("no node of the cluster is running")

    def queues(self, vhost: str = "/") -> list[dict]:
        """Every queue of ``vhost``: name, type, leader and members (as one running node sees them)."""
        node = self.running_node()
        out = self._ctl(node, "list_queues", "-p", vhost, "--formatter", "json",
                        "name", "type", "leader", "members").stdout  # fmt: skip
        return json.loads(out or "[]")

    def status(self) -> list[str]:
        return [
            f"{n.name} port {n.port}: {'answering' if port_open(n.port) else 'running' if self.running(n) else 'down'}"
            f" (pid {n.pid() or '-'})"
            for n in self.nodes
        ]

    # --- helpers -----------------------------------------------------------------------------
    def _prepare(self, node: Node) -> None:
        for port in (node.port, node.dist_port):
            if port_open(port):
                raise RuntimeError(f"port {port} for {node.name} is taken by another process")
        (node.folder / "log").mkdir(parents=True, exist_ok=True)
        (node.folder / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{node.port}\nloopback_users = none\n"
        )
        (node.folder / "enabled_plugins").write_text("[].\n")
        rabbitmq = pwd.getpwnam("rabbitmq")
        for path in [self.root, *self.root.rglob("*")]:
            os.chown(path, rabbitmq.pw_uid, rabbitmq.pw_gid)

    def _launch(self, node: Node) -> None:
        subprocess.run(["rabbitmq-server", "-detached"], env=node.environment(), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def _await(self, node: Node) -> None:
        # await_startup needs the node registered with epmd: a node that is still booting is not yet.
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._answers(node) and time.monotonic() < deadline:
            time.sleep(0.5)
        result = self._ctl(node, "await_startup", "--timeout", str(STARTUP_TIMEOUT), check=False,
                           timeout=STARTUP_TIMEOUT + 10)  # fmt: skip
        if result.returncode:
            # Its log says why; stop() removes the folder, so the log goes along. A node that could not
            # bind its distribution port (held by another socket) dies before it writes one.
            logs = sorted((node.folder / "log").glob("*.log"))
            tails = "".join(f"\n--- {log.name} ends:\n{log.read_text(errors='replace')[-3000:]}" for log in logs)
            raise RuntimeError(
                f"{node.name} (AMQP port {node.port}, distribution port {node.dist_port}) did not start: "
                f"{result.stderr.strip()}{tails or ' (no log written)'}"
            )

    def _answers(self, node: Node) -> bool:
        """It answers a ping; a ping that takes past its 30 s (a busy machine) is an answer not yet."""
        try:
            return self._ctl(node, "ping", check=False, timeout=30).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def _pid(self, node: Node) -> int:
        pid = node.pid()
        if pid is None:
            raise RuntimeError(f"{node.name} has no pid file: is it running?")
        return pid

    @staticmethod
    def _ctl(node: Node, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        result = rabbitmqctl(node.name, *args, timeout=timeout)
        if check and result.returncode:
            raise RuntimeError(f"rabbitmqctl -n {node.name} {' '.join(args)}: {result.stderr.strip()}")
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "url", "queues", "kill", "restart",
                                            "freeze", "thaw"])  # fmt: skip
    parser.add_argument("node", nargs="?", type=int, choices=range(1, NODES + 1), help="1, 2 or 3")
    parser.add_argument("--name", default="saga", help="node names <name>1@localhost..; default saga")
    parser.add_argument("--base-port", type=int, default=5701, help="AMQP port of node 1; default 5701")
    parser.add_argument("--vhost", default="/", help="created by start; named in the URL; default /")
    parser.add_argument("--keep", action="store_true", help="stop: keep the data folders")
    args = parser.parse_args(argv)
    cluster = Cluster(args.name, args.base_port)
    if args.command in ("kill", "restart", "freeze", "thaw") and args.node is None:
        parser.error(f"{args.command} needs a node: 1, 2 or 3")
    try:
        if args.command == "start":
            cluster.start()
            if args.vhost != "/":
                cluster.add_vhost(args.vhost)
            print(cluster.url(args.vhost))
        elif args.command == "stop":
            cluster.stop(remove=not args.keep)
        elif args.command == "status":
            print("\n".join(cluster.status()))
        elif args.command == "url":
            print(cluster.url(args.vhost))
        elif args.command == "queues":
            for q in cluster.queues(args.vhost):
                print(f"{q['name']:40} {q['type']:8} leader {q.get('leader') or '-':20} members {q.get('members')}")
        else:
            getattr(cluster, args.command)(args.node)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
