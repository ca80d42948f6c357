"""OpenTelemetry tracing for this process, configured only by the standard ``OTEL_*`` variables.

Nothing is set up unless an exporter is asked for (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_TRACES_EXPORTER=otlp``): no SDK, no
instrumentation, no cost. Otherwise, at start-up (``service_platform.apps``):

- an SDK tracer provider exporting over OTLP/HTTP with protobuf (``http/protobuf``, the one
  protocol installed), its sampler from ``OTEL_TRACES_SAMPLER``/``_ARG`` (default: follow the
  caller, record new traces), its batching from ``OTEL_BSP_*``;
- ``service.name`` from ``OTEL_SERVICE_NAME``, else one per process role, so a trace shows which
  process did what: ``saga-shop-web``, ``saga-shop-relay``, ``saga-shop-deadline``,
  ``saga-shop-consumers-payments-inventory``; in a split deployment with its contexts' names,
  ``saga-shop-payments-relay``;
- the official Django (SERVER spans continuing an incoming ``traceparent``) and psycopg (a span
  per query) instrumentations; messaging makes the PRODUCER and CONSUMER spans itself
  (``reliable_messaging._telemetry``). A query outside any request or message (a relay's poll, a consumer's
  housekeeping) is not traced: it would be a trace of its own every fraction of a second.
"""

import os
from pathlib import PurePath

from django.core.exceptions import ImproperlyConfigured

PROTOCOL = "http/protobuf"
NAMESPACE = "saga-shop"
UNTRACED_URLS = "healthz,readyz,metrics"


def tracing_requested(environ=os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if exporter not in ("", "otlp"):
        raise ImproperlyConfigured(f"OTEL_TRACES_EXPORTER={exporter!r}: only 'otlp' (or 'none') is installed")
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return bool(endpoint or exporter == "otlp")


def process_role(argv: list[str], local_consumers: list[str] | None = None) -> str:
    """What this process is, from its command line: ``web``, ``relay``, ``deadline``,
    ``consumers-<names>`` (``--except`` resolved against ``local_consumers``), or the command's name."""
    program = PurePath(argv[0]).name if argv else ""
    if "gunicorn" in program:
        return "web"
    command = argv[1] if len(argv) > 1 and program in ("manage.py", "django-admin") else program
    if command == "run_consumers":
        return "-".join(["consumers", *_consumer_names(argv[2:], local_consumers or [])])
    return {"runserver": "web", "run_outbox_relay": "relay", "expire_pending_orders": "deadline"}.get(
        command, command or "python"
    )


def _consumer_names(args: list[str], local_consumers: list[str]) -> list[str]:
    """The consumers ``run_consumers`` was asked for: its names (before its options), or with
    ``--except A,B`` every local consumer but those; none for all of them."""
    names = []
    for arg in args:
        if arg.startswith("-"):
            break
        names.append(arg)
    excepted = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--except"), None)
    if excepted is None:
        excepted = next((arg.split("=", 1)[1] for arg in args if arg.startswith("--except=")), None)
    if excepted is not None and not names:
        left_out = {name.strip() for name in excepted.split(",")}
        names = [name for name in local_consumers if name not in left_out]
    return names


def service_name(role: str, hosted: list[str], installed: list[str]) -> str:
    contexts = [] if set(hosted) == set(installed) else hosted
    return "-".join([NAMESPACE, *contexts, role])


def configure_tracing(
    *, argv: list[str], hosted: list[str], installed: list[str], consumers: list[str] | None = None, environ=os.environ
) -> bool:
    """Set up the SDK, the exporter and the instrumentations when ``OTEL_*`` ask for it; True if so."""
    if not tracing_requested(environ):
        return False
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or PROTOCOL
    )
    if protocol != PROTOCOL:
        raise ImproperlyConfigured(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: only {PROTOCOL!r} is installed "
            "(OTLP over HTTP; point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's port 4318)"
        )
    # Imported here: a process that does not trace never loads the SDK.
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from reliable_messaging.hosting import enable_tracing

    attributes = {"service.namespace": NAMESPACE, "shop.contexts": ",".join(hosted)}
    if not environ.get("OTEL_SERVICE_NAME") and "service.name=" not in environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes[SERVICE_NAME] = service_name(process_role(argv, consumers), hosted, installed)
    provider = TracerProvider(resource=Resource.create(attributes), sampler=_no_orphan_queries())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    os.environ.setdefault("OTEL_PYTHON_DJANGO_EXCLUDED_URLS", UNTRACED_URLS)  # probes and scrapes
    DjangoInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False)
    enable_tracing(provider.get_tracer("saga-shop.messaging"))
    return True


def _no_orphan_queries():
    """The sampler the variables ask for, except that a query starting a trace of its own is dropped."""
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult, _get_from_env_or_default
    from opentelemetry.trace import SpanKind, get_current_span

    configured = _get_from_env_or_default()

    class NoOrphanQueries(Sampler):
        def should_sample(
            self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None
        ):
            parent = get_current_span(parent_context).get_span_context()
            if kind is SpanKind.CLIENT and not parent.is_valid:
                return SamplingResult(Decision.DROP)
            return configured.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

        def get_description(self) -> str:
            return f"NoOrphanQueries{{{configured.get_description()}}}"

    return NoOrphanQueries()
