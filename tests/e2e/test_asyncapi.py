"""The AsyncAPI document: docs/asyncapi.yaml for the whole system, `python manage.py asyncapi`'s output,
checked by the official parser (@asyncapi/parser, scripts/asyncapi/). What the command writes for the
hosted contexts: the bus's own tests, test_asyncapi.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from django.conf import settings

from scripts.ensure_asyncapi_parser import ensure

DOCUMENT = Path(settings.BASE_DIR) / "docs" / "asyncapi.yaml"


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
