"""The telemetry room: OpenTelemetry spans and Prometheus metrics of a running world.

A live world made after the host set an OpenTelemetry tracer provider emits spans on its
own (``configured_tracing`` is registered for every new world); ``instrument(world)``
switches spans and recorded metrics on explicitly for a world's live ticks (``tracing.py`` holds the
spans); ``serve_metrics(world, "127.0.0.1:9464")`` serves ``/metrics`` (``prometheus.py``).
tickwork never configures an OpenTelemetry provider or exporter: the host does. The
optional packages (the ``telemetry`` and ``metrics`` extras) are imported only when used.
"""

from runtime.telemetry.address import parse_address
from runtime.telemetry.instrument import (
    Telemetry,
    configured_tracing,
    instrument,
    serve_metrics,
    tracing_available,
    tracing_configured,
)
from runtime.world.probe import PROBE_FACTORIES

if configured_tracing not in PROBE_FACTORIES:
    PROBE_FACTORIES.append(configured_tracing)

__all__ = [
    "Telemetry",
    "instrument",
    "parse_address",
    "serve_metrics",
    "tracing_available",
    "tracing_configured",
]
