"""What the composition root uses to host the bus: OpenTelemetry for its spans (``telemetry``)."""

from reliable_messaging.telemetry import current as span_in_use
from reliable_messaging.telemetry import enable as enable_tracing
from reliable_messaging.telemetry import ids_of as trace_ids
from reliable_messaging.telemetry import server_span, trace_headers

__all__ = ["enable_tracing", "server_span", "span_in_use", "trace_headers", "trace_ids"]
