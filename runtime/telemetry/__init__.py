"""The telemetry room: OpenTelemetry spans and Prometheus metrics of a running world.

``instrument(world)`` switches both on for a world's live ticks (``tracing.py`` holds the
spans); ``serve_metrics(world, "127.0.0.1:9464")`` serves ``/metrics`` (``prometheus.py``).
tickwork never configures an OpenTelemetry provider or exporter: the host does. The
optional packages (the ``telemetry`` and ``metrics`` extras) are imported only when used.
"""

from runtime.telemetry.address import parse_address
from runtime.telemetry.instrument import (
    Telemetry,
    instrument,
    serve_metrics,
    tracing_available,
    tracing_configured,
)

__all__ = [
    "Telemetry",
    "instrument",
    "parse_address",
    "serve_metrics",
    "tracing_available",
    "tracing_configured",
]
