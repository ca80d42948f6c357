from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from kombu import Connection

from reliable_messaging import _broker as broker
from reliable_messaging._conf import setting
from reliable_messaging._permissions import apply, shell_lines, user_permissions


class Command(BaseCommand):
    help = (
        "Print the RabbitMQ permissions and topic permissions of each broker user of BROKER_PRODUCERS "
        "(each writes only its own contexts' routing keys and reads only its own queues), as rabbitmqctl "
        "commands; --apply runs them (on the broker's host) and declares the whole topology as --admin-url's "
        "user. Create the users first (rabbitmqctl add_user). docs/operations.md, 'Broker users and permissions'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--vhost", help="the virtual host (default: BROKER_URL's)")
        parser.add_argument("--apply", action="store_true", help="run the commands with rabbitmqctl")
        parser.add_argument(
            "--admin-url", help="a broker URL whose user may configure every queue (default: BROKER_URL)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        permissions = user_permissions()
        if not permissions:
            raise CommandError("BROKER_PRODUCERS is not set: name each context's broker user, <context>=<user>,...")
        vhost = options["vhost"] or Connection(setting("BROKER_URL").split(";")[0]).virtual_host or "/"
        for entry in permissions:
            self.stdout.write(f"# {entry.user}: publishes {', '.join(entry.contexts)}; "
                              f"consumes {', '.join(entry.consumers) or 'nothing'}")  # fmt: skip
        self.stdout.write("\n".join(shell_lines(permissions, vhost)))
        if not options["apply"]:
            return
        try:
            apply(permissions, vhost)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        with Connection(options["admin_url"] or setting("BROKER_URL"), connect_timeout=5) as connection:
            connection.connect()
            broker.declare_topology(connection, whole=True)
        self.stdout.write(f"applied to vhost {vhost}; the whole topology is declared")
