"""Messaging settings, read once from ``settings.MESSAGING`` (see ``config/settings.py``)."""

from django.conf import settings


def setting(name: str):
    return settings.MESSAGING[name]


def exchange_name() -> str:
    return setting("EXCHANGE")


def queue_name(consumer: str) -> str:
    return f"{consumer}_queue"
