"""service_platform.telemetry: when tracing is set up, and what each process is called in a trace."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from service_platform.telemetry import configure_tracing, process_role, service_name, tracing_requested

ALL = ["orders", "payments", "inventory"]


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),  # the default endpoint, localhost:4318
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "shop"}, False),  # a name alone exports nothing
    ],
)
def test_tracing_is_set_up_only_when_an_exporter_is_asked_for(environ, requested):
    assert tracing_requested(environ) is requested


def test_an_exporter_that_is_not_installed_is_refused_in_one_clear_line():
    with pytest.raises(ImproperlyConfigured, match="only 'otlp'"):
        tracing_requested({"OTEL_TRACES_EXPORTER": "zipkin"})
    grpc = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(ImproperlyConfigured, match="only 'http/protobuf' is installed"):
        configure_tracing(argv=["manage.py", "runserver"], hosted=ALL, installed=ALL, environ=grpc)


def test_nothing_is_set_up_without_the_variables():
    assert configure_tracing(argv=["manage.py", "run_outbox_relay"], hosted=ALL, installed=ALL, environ={}) is False


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (["manage.py", "runserver", "127.0.0.1:8000", "--noreload"], "web"),
        (["/srv/.venv/bin/gunicorn", "config.wsgi", "-c", "service_platform/gunicorn.conf.py"], "web"),
        (["manage.py", "run_outbox_relay", "--metrics-port", "9101"], "relay"),
        (
            ["manage.py", "run_consumers", "payments", "inventory", "--metrics-port", "9102"],
            "consumers-payments-inventory",
        ),
        (["manage.py", "run_consumers", "--once"], "consumers"),
        (
            ["manage.py", "run_consumers", "--except", "orders,events", "--metrics-port", "9102"],
            "consumers-payments-shipping",
        ),
        (["manage.py", "run_consumers", "--except=orders"], "consumers-events-payments-shipping"),
        (["manage.py", "expire_pending_orders", "--loop"], "deadline"),
        (["manage.py", "dead_letters", "replay", "--all"], "dead_letters"),
        (["/usr/bin/python3"], "python3"),
        ([], "python"),
    ],
)
def test_a_process_role_comes_from_its_command_line(argv, role):
    assert process_role(argv, ["orders", "events", "payments", "shipping"]) == role


def test_the_service_name_says_the_role_and_in_a_split_the_contexts():
    assert service_name("relay", ALL, ALL) == "saga-shop-relay"
    assert service_name("consumers-orders-events", ["inventory", "orders", "payments"], ALL) == (
        "saga-shop-consumers-orders-events"
    )
    assert service_name("web", ["orders"], ALL) == "saga-shop-orders-web"
    assert service_name("consumers", ["payments", "inventory"], ALL) == "saga-shop-payments-inventory-consumers"
