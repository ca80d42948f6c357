from django.apps import AppConfig


class FakeGatewayConfig(AppConfig):
    name = "fake_gateway"
    verbose_name = "Fake card gateway (development)"
