"""The saga admin's diagram is drawn by Mermaid from this project's own static files
(kernel/static/kernel/mermaid/): found as the kernel app's, collected by ``collectstatic`` and
served by WhiteNoise as a deployment serves it (DEBUG off), with the version its README records."""

import re
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client, override_settings

import kernel

ASSETS = Path(kernel.__file__).resolve().parent / "static" / "kernel" / "mermaid"


def test_mermaid_is_collected_and_served_from_our_own_static_files(tmp_path):
    with override_settings(STATIC_ROOT=tmp_path):
        call_command("collectstatic", "--noinput", verbosity=0)
        for name, kind in [
            ("mermaid.min.js", "text/javascript"),
            ("init.js", "text/javascript"),
            ("diagram.css", "text/css"),
        ]:
            assert finders.find(f"kernel/mermaid/{name}") == str(ASSETS / name)
            assert (tmp_path / "kernel" / "mermaid" / name).read_bytes() == (ASSETS / name).read_bytes()
            # A new client: WhiteNoise reads STATIC_ROOT as its middleware is made.
            response = Client().get(f"/static/kernel/mermaid/{name}")
            assert response.status_code == 200, name
            assert response["Content-Type"].startswith(kind), name
            assert b"".join(response.streaming_content) == (ASSETS / name).read_bytes()


def test_the_readme_names_the_bundles_version():
    [version] = set(re.findall(r'\{version:"([\d.]+)"\}', (ASSETS / "mermaid.min.js").read_text()))
    assert f"Mermaid **{version}**" in (ASSETS / "README.md").read_text()
