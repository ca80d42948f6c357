"""A producer's upcasters, bound by its readers instead of copied into each one.

A producer keeps the upcasters of its events beside their schemas: ``<its schemas folder>/upcasters.py``,
a table ``UPCASTERS`` (event type -> one function per version step, v1 -> v2 first) of plain
functions that import nothing. A reader binds each step in its own ``upcasters`` module and declares
it under ``[upcasters]`` in its context.toml, as the bus wants it (a function of its own package)::

    <event>_v1_to_v2 = producer_upcaster("<producer>.<aggregate>.<event>", 1)

The file is read from the producer's schemas folder where this deployment knows its declaration
(the monolith, a split tree: they carry every declaration and its schemas). ``startcontext``
writes these bindings for a consumed event with several versions (docs/adding-a-context.md).
"""

import importlib.util
from collections.abc import Callable
from functools import cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from reliable_messaging.hosting import context_of, installed, schema_folder

UPCASTERS_FILE = "upcasters.py"
Upcaster = Callable[[dict], dict]


def producer_upcaster(event_type: str, version: int) -> Upcaster:
    """The producer's step of ``event_type`` from ``version`` to ``version + 1``."""
    producer = context_of(event_type)
    declaration = next((d for d in installed() if d.name == producer), None)
    folder = schema_folder(Path(settings.BASE_DIR), declaration) if declaration is not None else None
    steps = upcasters_in(folder).get(event_type, []) if folder is not None else []
    if not 1 <= version <= len(steps):
        raise ImproperlyConfigured(
            f"no upcaster of {event_type} from v{version} is known here: its producer, {producer}, keeps its "
            f"upcasters in its schemas folder's {UPCASTERS_FILE} (UPCASTERS), which this tree must carry"
        )
    return steps[version - 1]


@cache
def upcasters_in(folder: Path) -> dict[str, list[Upcaster]]:
    """The ``UPCASTERS`` table of a schemas folder's ``upcasters.py``; empty without one."""
    path = folder / UPCASTERS_FILE
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location(f"_upcasters_of_{folder.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.UPCASTERS)
