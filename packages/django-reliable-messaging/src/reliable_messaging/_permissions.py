"""The RabbitMQ permissions of a broker user per context, derived from the declarations.

For each user of ``BROKER_PRODUCERS`` (the contexts it publishes for, the consumers those
contexts run): configure, write and read only on its own consumers' queues (their dead-letter
exchange, dead-letter queue and delay queues); write on the events exchange (limited by a topic
permission to its own contexts' routing keys: ``^(<context>)\\.``) and on the default exchange (its
retries and replays go to its own delay queues and queue through it); read on the events exchange
(to bind its queues). It cannot read another context's queue, publish another context's routing
key, or configure (so delete) a queue of another context.
"""

import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from reliable_messaging._conf import exchange_name, queue_name, setting
from reliable_messaging._declarations import installed
from reliable_messaging._topology import EVENT_LOG_CONSUMER, queue_bindings


@dataclass(frozen=True)
class UserPermissions:
    user: str
    contexts: tuple[str, ...]
    consumers: tuple[str, ...]
    configure: str
    write: str
    read: str
    topic_write: str
    topic_read: str = ".*"

    def rabbitmqctl_commands(self, vhost: str) -> list[list[str]]:
        return [
            ["set_permissions", "-p", vhost, self.user, self.configure, self.write, self.read],
            ["set_topic_permissions", "-p", vhost, self.user, exchange_name(), self.topic_write, self.topic_read],
        ]


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(re.escape(n) for n in names)


def consumers_run_by(contexts: tuple[str, ...]) -> tuple[str, ...]:
    """The consumers the deployments of ``contexts`` run: theirs, and the event log where one of them
    declares it."""
    bindings = queue_bindings()
    declarations = [d for d in installed() if d.name in contexts]
    own = [d.name for d in declarations if d.name in bindings]
    if any(d.event_log for d in declarations) and EVENT_LOG_CONSUMER in bindings:
        own.append(EVENT_LOG_CONSUMER)
    return tuple(own)


def user_permissions(producers: dict[str, str] | None = None) -> list[UserPermissions]:
    """One entry per broker user of ``producers`` (default ``BROKER_PRODUCERS``)."""
    producers = setting("PRODUCERS") if producers is None else producers
    users: dict[str, list[str]] = {}
    for context, user in producers.items():
        users.setdefault(user, []).append(context)
    exchange = re.escape(exchange_name())
    result = []
    for user, contexts in users.items():
        consumers = consumers_run_by(tuple(contexts))
        queues = f"({_alternatives(queue_name(c) for c in consumers)})(_dlx|_dead_letters|_delay_[0-9]+ms)?"
        own = f"^{queues}$" if consumers else "^$"
        result.append(
            UserPermissions(
                user=user,
                contexts=tuple(contexts),
                consumers=consumers,
                configure=own,
                write=f"^({exchange}|amq\\.default{'|' + queues if consumers else ''})$",
                read=f"^({exchange}{'|' + queues if consumers else ''})$",
                topic_write=f"^({_alternatives(contexts)})\\.",
            )
        )
    return result


def shell_lines(permissions: list[UserPermissions], vhost: str) -> list[str]:
    return [
        shlex.join(["rabbitmqctl", *command]) for entry in permissions for command in entry.rabbitmqctl_commands(vhost)
    ]


def apply(permissions: list[UserPermissions], vhost: str) -> None:
    """Run the commands through ``rabbitmqctl`` (on the broker's host, with its Erlang cookie)."""
    for entry in permissions:
        for command in entry.rabbitmqctl_commands(vhost):
            result = subprocess.run(["rabbitmqctl", "-q", *command], capture_output=True, text=True, check=False)
            if result.returncode:
                raise RuntimeError(f"rabbitmqctl {shlex.join(command)}: {(result.stderr or result.stdout).strip()}")
