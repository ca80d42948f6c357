from typing import Any

from django.core.management.base import BaseCommand

from reliable_messaging._asyncapi import document_yaml


class Command(BaseCommand):
    help = (
        "Print the AsyncAPI 3.0 document (YAML) of the events of the contexts this deployment hosts: "
        "docs/asyncapi.yaml is the whole system's."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(document_yaml(), ending="")
