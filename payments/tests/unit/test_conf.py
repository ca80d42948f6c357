"""Payments' own settings (payments/conf.py): the gateway's URL, unset, follows the fake gateway's
port. Every context's defaults and the monolith's overrides: tests/unit/test_context_settings.py."""

from payments import conf as payments_conf


def test_the_gateway_url_follows_the_fake_gateways_port(settings):
    del settings.GATEWAY_URL
    settings.GATEWAY_PORT = 8290
    assert payments_conf.setting("GATEWAY_URL") == "http://127.0.0.1:8290"
