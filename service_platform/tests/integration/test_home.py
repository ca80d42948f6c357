"""``/`` is no page of its own: it sends a visitor to the API's docs (where the API is served),
never to Django's debug page listing every URL."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_root_sends_a_visitor_to_the_api_docs():
    response = Client().get("/")
    assert (response.status_code, response["Location"]) == (302, "/api/docs/")
