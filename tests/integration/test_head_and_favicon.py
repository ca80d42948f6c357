"""``/favicon.ico`` is an icon, not a 404 on every page; the served application answers HEAD
without a body (service_platform/tests/unit/test_head_requests.py)."""

from django.test import Client

from config.wsgi import application
from service_platform.favicon import ICON
from service_platform.head_requests import WithoutBodyOnHead


def test_the_favicon_is_an_icon_cached_for_a_day():
    for method in ("get", "head"):
        response = getattr(Client(), method)("/favicon.ico")

        assert response.status_code == 200, method
        assert (response["Content-Type"], response["Cache-Control"]) == ("image/x-icon", "max-age=86400, public")
        assert response["Content-Length"] == str(len(ICON))
    assert Client().get("/favicon.ico").content == ICON
    assert ICON[:4] == b"\x00\x00\x01\x00" and ICON[22:30] == b"\x89PNG\r\n\x1a\n"  # an ICO holding a PNG


def test_what_gunicorn_and_runserver_serve_answers_head_without_a_body():
    assert isinstance(application, WithoutBodyOnHead)
