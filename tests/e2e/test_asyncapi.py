"""The AsyncAPI document: `python manage.py asyncapi` for the hosted contexts, docs/asyncapi.yaml
for the whole system, checked by the official parser (@asyncapi/parser, scripts/asyncapi/)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from reliable_messaging._contracts import schemas

from scripts.ensure_asyncapi_parser import ensure

DOCUMENT = Path(settings.BASE_DIR) / "docs" / "asyncapi.yaml"


def asyncapi() -> str:
    out = io.StringIO()
    call_command("asyncapi", stdout=out)
    return out.getvalue()


def parse(path: Path) -> tuple[int, list[dict]]:
    result = subprocess.run(["node", str(ensure()), str(path)], capture_output=True, text=True, timeout=120)
    return result.returncode, [json.loads(line) for line in result.stdout.splitlines()]


def test_the_committed_document_is_the_commands_output():
    """The document describes every context, the orchestrator's commands included (ORCHESTRATOR=1)."""
    whole = subprocess.run(
        [sys.executable, "manage.py", "asyncapi"],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DEBUG": "1", "ORCHESTRATOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert whole.returncode == 0, whole.stderr
    assert DOCUMENT.read_text() == whole.stdout, (
        "docs/asyncapi.yaml drifted: DEBUG=1 ORCHESTRATOR=1 .venv/bin/python manage.py asyncapi > docs/asyncapi.yaml"
    )


def test_the_official_parser_finds_no_error_in_it():
    returncode, diagnostics = parse(DOCUMENT)
    assert [d for d in diagnostics if d["severity"] == 0] == []
    assert returncode == 0


def test_the_parser_check_fails_on_a_broken_document(tmp_path):
    broken = yaml.safe_load(DOCUMENT.read_text())
    broken["operations"]["orders.sends.orders.order.created"]["action"] = "publish"  # AsyncAPI 2's word
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    returncode, diagnostics = parse(tmp_path / "broken.yaml")
    assert returncode == 1
    assert [d["path"] for d in diagnostics if d["severity"] == 0] == [
        "operations/orders.sends.orders.order.created/action"
    ]


def test_one_message_per_event_and_version_with_its_schema_and_headers():
    document = yaml.safe_load(asyncapi())
    assert document["asyncapi"] == "3.0.0"
    messages = document["components"]["messages"]
    assert sorted(messages) == sorted(f"{e}.v{v}" for e, v in schemas())
    assert list(document["channels"]["orders.order.created"]["messages"]) == [
        "orders.order.created.v1",
        "orders.order.created.v2",
    ]
    v2 = messages["orders.order.created.v2"]
    assert v2["payload"]["properties"]["total"]["required"] == ["amount", "currency"]
    assert v2["headers"]["properties"]["schema_version"]["const"] == 2
    assert v2["headers"]["required"] == ["event_type", "schema_version", "occurred_at", "source"]


def test_operations_say_who_sends_and_who_receives_which_version():
    operations = yaml.safe_load(asyncapi())["operations"]
    created = {
        name: [m["$ref"].rsplit("/", 1)[1] for m in op["messages"]]
        for name, op in operations.items()
        if name.endswith(".orders.order.created")
    }
    assert created == {
        "orders.sends.orders.order.created": ["orders.order.created.v2"],
        "payments.receives.orders.order.created": ["orders.order.created.v1", "orders.order.created.v2"],
    }
    with override_settings(MESSAGING={**settings.MESSAGING, "EVENT_VERSIONS": "orders.order.created=1"}):
        pinned = yaml.safe_load(asyncapi())["operations"]["orders.sends.orders.order.created"]
    assert pinned["messages"] == [{"$ref": "#/channels/orders.order.created/messages/orders.order.created.v1"}]


def test_a_deployment_documents_only_what_its_contexts_send_and_receive():
    with override_settings(MESSAGING={**settings.MESSAGING, "CONTEXTS": ["shipping"]}):
        document = yaml.safe_load(asyncapi())
    assert sorted(document["operations"]) == [
        "shipping.receives.orders.order.cancelled",
        "shipping.receives.orders.order.confirmed",
        "shipping.sends.shipping.shipment.cancelled",
        "shipping.sends.shipping.shipment.created",
        "shipping.sends.shipping.shipment.dispatched",
        "shipping.sends.shipping.shipment.refused",
        "shipping.sends.shipping.shipment.return_requested",
    ]
    assert sorted(document["channels"]) == sorted({name.split(".", 2)[2] for name in document["operations"]})
