"""What ``python manage.py startcontext`` writes: a working context from the declarations' own vocabulary.

A new context only follows the order saga (``follows = true``): it hears the events it consumes,
keeps one row per message it received, and publishes nothing until its services are written.
Its package holds everything of its own: the declaration, models and first migration, thin
handlers over services, one JSON Schema per event it publishes, a read-only admin and its tests
(docs/adding-a-context.md). Installing it is one line of ``INSTALLED_CONTEXTS``.
"""

import importlib.util
import json
import keyword
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from reliable_messaging.hosting import (
    CONTEXT_NAME,
    EVENT_TYPE,
    RESERVED_NAMES,
    ContextDeclaration,
    context_of,
    schema_folder,
)

from kernel.upcasters import UPCASTERS_FILE, upcasters_in

MAX_NAME = 40  # a consumer's name in the inbox and dead letters (50 characters), with room
INSTALLED_LIST = re.compile(r"^INSTALLED_CONTEXTS = \[\n(?P<items>(?:    \"[^\"]+\",\n)*)\]", re.MULTILINE)


class ScaffoldError(ValueError):
    """What is wrong with the request, and what to do instead."""


@dataclass(frozen=True)
class Request:
    name: str
    consumes: tuple[str, ...]
    publishes: tuple[str, ...]
    # consumed key -> its newest version, for those with several (their upcasters are bound)
    newest: dict[str, int] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return self.name.replace("_", " ").capitalize()

    @property
    def class_prefix(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    def handler_of(self, key: str) -> str:
        """``on_<aggregate>_<event>``; with the producer too when two producers share the rest."""
        short = "_".join(key.split(".")[1:])
        clash = sum("_".join(k.split(".")[1:]) == short for k in self.consumes) > 1
        return f"on_{key.replace('.', '_')}" if clash else f"on_{short}"


def check(request: Request, base_dir: Path, installed: tuple[ContextDeclaration, ...]) -> Request:
    """Raise ``ScaffoldError`` for a request that would not give a working, installable context;
    else the request, with the newest version of each consumed event that has several."""
    name = request.name
    if not CONTEXT_NAME.match(name) or name in RESERVED_NAMES:
        raise ScaffoldError(f"{name!r}: a context's name is lower_snake_case and not one of {sorted(RESERVED_NAMES)}")
    if (base_dir / name).exists():
        raise ScaffoldError(f"{name}/ exists already: choose another name or remove the folder")
    if len(name) > MAX_NAME or keyword.iskeyword(name) or importlib.util.find_spec(name) is not None:
        raise ScaffoldError(
            f"{name!r}: a context's name is a Python package name of at most {MAX_NAME} characters that no "
            "installed module or Django app already has"
        )
    if INSTALLED_LIST.search((base_dir / "config" / "settings.py").read_text()) is None:
        raise ScaffoldError("config/settings.py: no INSTALLED_CONTEXTS = [...] list, one quoted name per line, found")
    handlers = [request.handler_of(key) for key in request.consumes]
    if len(set(handlers)) != len(handlers):
        raise ScaffoldError(f"--consumes: two keys would have the same handler name ({', '.join(handlers)})")
    if name in {d.name for d in installed}:
        raise ScaffoldError(f"{name!r} is installed already")
    published_by = {event_type: d for d in installed for event_type in d.publishes}
    newest = {}
    for key in request.consumes:
        if key not in published_by:
            raise ScaffoldError(
                f"--consumes {key}: no installed context publishes it; choose among {', '.join(sorted(published_by))}"
            )
        versions = schema_versions(base_dir, published_by[key], key)
        folder = schema_folder(base_dir, published_by[key])
        steps = upcasters_in(folder).get(key, []) if folder is not None else []
        if len(steps) < len(versions) - 1:
            raise ScaffoldError(
                f"--consumes {key}: it has versions {versions[0]}..{versions[-1]}, and its producer keeps "
                f"{len(steps)} upcaster(s) of it beside its schemas ({UPCASTERS_FILE}, kernel/upcasters.py): its "
                "reader needs one per step (docs/evolving-events.md)"
            )
        if len(versions) > 1:
            newest[key] = versions[-1]
    for event_type in request.publishes:
        if not EVENT_TYPE.match(event_type) or context_of(event_type) != name:
            raise ScaffoldError(f"--publishes {event_type}: a context publishes only '{name}.<aggregate>.<event>'")
    return replace(request, newest=newest)


def schema_versions(base_dir: Path, declaration: ContextDeclaration, event_type: str) -> list[int]:
    folder = schema_folder(base_dir, declaration)
    files = folder.glob(f"{event_type}.v*.json") if folder else []
    return sorted(int(f.name.removesuffix(".json").rsplit(".v", 1)[1]) for f in files)


def files_of(request: Request) -> dict[str, str]:
    """Path (relative to the tree) -> content, for every file of the new package."""
    name, files = request.name, {}
    files[f"{name}/__init__.py"] = ""
    files[f"{name}/migrations/__init__.py"] = ""
    files[f"{name}/tests/__init__.py"] = ""
    files[f"{name}/tests/integration/__init__.py"] = ""
    files[f"{name}/context.toml"] = _declaration(request)
    files[f"{name}/pyproject.toml"] = _pyproject(request)
    files[f"{name}/apps.py"] = _apps(request)
    files[f"{name}/models.py"] = _models(request)
    files[f"{name}/services.py"] = _services(request)
    files[f"{name}/handlers.py"] = _handlers(request)
    files[f"{name}/admin.py"] = _admin(request)
    if request.newest:
        files[f"{name}/upcasters.py"] = _upcasters(request)
    files[f"{name}/tests/invariants.py"] = _invariants(request)
    files[f"{name}/tests/integration/test_{name}.py"] = _tests(request)
    for event_type in request.publishes:
        files[f"{name}/schemas/{event_type}.v1.json"] = _schema(event_type)
    return files


def install(settings_file: Path, name: str) -> None:
    """Append ``name`` to ``INSTALLED_CONTEXTS`` in config/settings.py (its one line)."""
    text = settings_file.read_text()
    match = INSTALLED_LIST.search(text)
    if match is None:
        raise ScaffoldError(f"{settings_file}: no INSTALLED_CONTEXTS = [...] list, one quoted name per line, found")
    end = match.end("items")
    settings_file.write_text(f'{text[:end]}    "{name}",\n{text[end:]}')


def _declaration(request: Request) -> str:
    lines = [
        f"# The {request.name} context, as every deployment reads it (docs/adding-a-context.md).",
        f'name = "{request.name}"',
        "# It follows the order saga: it hears the saga's events, never changes its outcome, and nobody",
        "# waits for it. Set false only if the saga's outcome depends on it (then the saga's tests do too).",
        "follows = true",
    ]
    if request.publishes:
        lines += [
            "# The JSON Schema of each event it publishes, one file per version: schemas/<event type>.v<N>.json.",
            'schemas = "schemas"',
        ]
    lines += ["", f"# What {request.name}_queue is bound to, and the handler of each key.", "[consumes]"]
    lines += [f'"{key}" = "{request.name}.handlers.{request.handler_of(key)}"' for key in request.consumes]
    lines += [
        "",
        "# The events it publishes, and how the swimlane draws each: step, outcome, failure, compensation.",
        "[publishes]",
    ]
    lines += [f'"{event_type}" = "step"' for event_type in request.publishes]
    if request.newest:
        lines += [
            "",
            "# Older versions of what it reads, brought to the newest one step at a time before the handler",
            "# (upcasters.py binds its producers' own steps, kept beside their schemas).",
            "[upcasters]",
        ]
        for key, newest in request.newest.items():
            lines.append(f'"{key}" = {json.dumps([f"{request.name}.upcasters.{s}" for s in _steps(key, newest)])}')
    return "\n".join(lines) + "\n"


def _pyproject(request: Request) -> str:
    """Its distribution, as each context's: what its code imports (Django, the bus, the shared kernel)."""
    name = request.name
    return f"""# The {name} distribution: what its code needs. make service installs it (editable, in the
# service's tree, at the versions the root requirements.txt pins); the monolith runs it from the checkout.
[build-system]
requires = ["setuptools==84.0.0"]
build-backend = "setuptools.build_meta"

[project]
name = "saga-shop-{name.replace("_", "-")}"
version = "0.1.0"
description = "The {name} context: it follows the order saga"
requires-python = ">=3.11"
dependencies = [
    "Django>=5.2,<6",
    "django-reliable-messaging>=4,<5",
    "saga-shop-kernel>=0.1,<0.2",
]

# The package is this folder (so `import {name}` works from the repository's root as from a service's):
# found from the folder above, without its tests.
[tool.setuptools]
package-dir = {{"{name}" = "."}}

[tool.setuptools.packages.find]
where = [".."]
include = ["{name}", "{name}.*"]
exclude = ["{name}.tests", "{name}.tests.*"]

[tool.setuptools.package-data]
{name} = ["context.toml", "schemas/*", "templates/**/*"]
"""


def _steps(key: str, newest: int) -> list[str]:
    """The names of ``key``'s upcasters, one per step: ``<aggregate>_<event>_v1_to_v2``, ..."""
    short = "_".join(key.split(".")[1:])
    return [f"{short}_v{v}_to_v{v + 1}" for v in range(1, newest)]


def _upcasters(request: Request) -> str:
    lines = [
        f'"""Older versions of the events {request.name} reads, brought to the newest before its handler sees them',
        "(declared under ``upcasters``): their producers' own steps, kept beside their schemas and bound here",
        '(kernel/upcasters.py)."""',
        "",
        "from kernel.upcasters import producer_upcaster",
        "",
    ]
    for key, newest in request.newest.items():
        lines += [f'{step} = producer_upcaster("{key}", {v})' for v, step in enumerate(_steps(key, newest), 1)]
    return "\n".join(lines) + "\n"


def _apps(request: Request) -> str:
    return f'''from django.apps import AppConfig


class {request.class_prefix}Config(AppConfig):
    name = "{request.name}"
    verbose_name = "{request.title}"
'''


def _models(request: Request) -> str:
    return f'''"""{request.title}'s own tables: ids of other contexts are plain UUIDs, never foreign keys."""

import uuid

from django.db import models


class Received(models.Model):
    """One row per message {request.name} handled (its inbox row says the same, for as long as it is kept)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # as wide as messaging's inbox keeps them: any id a message may carry
    message_id = models.CharField(max_length=255, unique=True)
    event_type = models.CharField(max_length=200)
    # the saga's id (an order's), as the event's correlation id carries it
    correlation_id = models.CharField(max_length=100, blank=True, db_index=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "{request.name}_received"
        ordering = ["-received_at"]
        verbose_name = "message received"
        verbose_name_plural = "messages received"

    def __str__(self) -> str:
        return f"{{self.event_type}} {{self.message_id}}"
'''


def _services(request: Request) -> str:
    publishers = "".join(
        f'''

def {event_type.split(".", 1)[1].replace(".", "_")}_publish(*, order_id: str) -> None:
    """Announce {event_type} for ``order_id``'s saga (its schema: schemas/, v1)."""
    with transaction.atomic():
        publish(
            event_type="{event_type}",
            aggregate_type="{event_type.split(".")[1]}",
            aggregate_id=order_id,
            correlation_id=order_id,
            payload={{"order_id": order_id}},
        )
'''
        for event_type in request.publishes
    )
    imports = "from reliable_messaging.api import publish\n" if request.publishes else ""
    return f'''"""{request.title}'s writes, each in one transaction with the events it publishes (no dual writes)."""

from django.db import transaction

{imports}from {request.name}.models import Received


def received_record(*, message_id: str, event_type: str, correlation_id: str) -> Received:
    """Keep the message; a redelivery never gets here (messaging's inbox), and a second row is refused."""
    with transaction.atomic():
        return Received.objects.create(message_id=message_id, event_type=event_type, correlation_id=correlation_id)
{publishers}'''


def _handlers(request: Request) -> str:
    handlers = "".join(
        f"""

def {request.handler_of(key)}(event: IncomingEvent) -> None:
    services.received_record(
        message_id=event.message_id, event_type=event.event_type, correlation_id=event.correlation_id
    )
"""
        for key in request.consumes
    )
    return f'''"""{request.title}'s message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from {request.name} import services
from reliable_messaging.api import IncomingEvent
{handlers}'''


def _admin(request: Request) -> str:
    return f'''from django.contrib import admin
from reliable_messaging.operator import ReadOnlyAdmin

from {request.name}.models import Received


@admin.register(Received)
class ReceivedAdmin(ReadOnlyAdmin):
    """Read-only: rows change only through {request.name}'s services."""

    list_display = ["event_type", "correlation_id", "message_id", "received_at"]
    list_filter = ["event_type"]
    search_fields = ["correlation_id", "message_id"]
'''


def _invariants(request: Request) -> str:
    return f'''"""{request.title}'s invariants (kernel/invariants.py), checked after every fault test and
`make chaos` (faultlib.invariants finds them here): no order under test had an event handled twice,
under two message ids. Test code: {request.name}'s production code never imports it."""

from django.db.models import Count

from kernel.invariants import SagaFacts
from {request.name}.models import Received


def check(report, facts: SagaFacts) -> None:
    rows = Received.objects.filter(correlation_id__in=list(facts.outcomes))  # an order's, not a product's
    twice = rows.values("correlation_id", "event_type").annotate(n=Count("id")).filter(n__gt=1)
    report.check(
        "{request.name} handled each order's event at most once",
        [f"order {{row['correlation_id']}}: {{row['event_type']}} handled {{row['n']}} times" for row in twice],
        f"{{rows.count()}} rows",
    )
'''


def _tests(request: Request) -> str:
    consumer = request.name
    key = request.consumes[0] if request.consumes else ""
    if not key:
        return f'''"""{request.title}'s tests: it consumes nothing yet; add a test per handler as you add them."""

from reliable_messaging.operator import context_names


def test_{consumer}_is_installed():
    assert "{consumer}" in context_names()
'''
    return f'''"""{request.title}'s tests, in its package: its handlers, delivered to as the consumer loop does
(reliable_messaging.testing: the inbox, the schema check, the upcasters), with no broker."""

import uuid

import pytest

from reliable_messaging.testing import Outcome, deliver, example_payload
from {request.name}.models import Received

pytestmark = pytest.mark.django_db(transaction=True)

CONSUMER, KEY = "{consumer}", "{key}"


def test_a_message_is_handled_once_even_when_delivered_twice():
    message_id, order_id, payload = str(uuid.uuid4()), str(uuid.uuid4()), example_payload(KEY)
    first = deliver(CONSUMER, KEY, payload, message_id=message_id, correlation_id=order_id)
    again = deliver(CONSUMER, KEY, payload, message_id=message_id, correlation_id=order_id)
    assert (first.outcome, again.outcome) == (Outcome.HANDLED, Outcome.DUPLICATE)
    assert list(Received.objects.values_list("event_type", "correlation_id")) == [(KEY, order_id)]


def test_a_payload_its_schema_refuses_is_a_dead_letter_and_changes_nothing():
    decision = deliver(CONSUMER, KEY, {{"unexpected": True}})
    assert decision.outcome is Outcome.DEAD_LETTER and decision.reason
    assert Received.objects.count() == 0
'''


def _schema(event_type: str) -> str:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"{event_type} v1",
        "description": "Describe what happened; a released version's schema never breaks its readers.",
        "type": "object",
        "properties": {"order_id": {"type": "string", "format": "uuid"}},
        "required": ["order_id"],
    }
    return json.dumps(schema, indent=2) + "\n"
