"""The package as installed: every module imports with only its declared dependencies, and the
admin shows the bus's tables read-only."""

import importlib
import pkgutil

import pytest
import reliable_messaging
from django.contrib.auth.models import User
from reliable_messaging.models import DeadLetter


def test_every_module_imports_with_only_the_declared_dependencies():
    names = [info.name for info in pkgutil.walk_packages(reliable_messaging.__path__, "reliable_messaging.")]

    for name in names:
        importlib.import_module(name)  # an undeclared dependency fails here: ModuleNotFoundError
    assert {"reliable_messaging.api", "reliable_messaging.operator", "reliable_messaging.testing"} <= set(names)


@pytest.mark.django_db
def test_the_admin_lists_the_bus_tables_and_adds_nothing(client):
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    DeadLetter.objects.create(
        consumer="archive", message_id="m1", correlation_id="c1", event_type="notes.note.written",
        reason="invalid_payload", error="refused", body=b"{}", headers={}, properties={},
    )  # fmt: skip

    for model in ("outboxmessage", "inboxmessage", "deadletter", "scheduledmessage", "eventlogentry"):
        assert client.get(f"/admin/messaging/{model}/").status_code == 200, model
        assert client.get(f"/admin/messaging/{model}/add/").status_code == 403, model
    page = client.get("/admin/messaging/deadletter/").content.decode()
    assert ">invalid_payload<" in page and ">m1<" in page
