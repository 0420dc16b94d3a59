"""Switching telemetry on for a world: spans, recorded metrics, a ``/metrics`` endpoint.

``instrument(world)`` is the one call a host makes: it switches on the world's metric
recording (``World.metrics()`` then has histograms and token counts) and, when
``opentelemetry-api`` is installed, attaches a `runtime.telemetry.tracing.Tracing` probe,
whose spans go to whatever tracer provider the host set up. ``serve_metrics`` serves the
figures to Prometheus. Both optional packages are imported only here, when asked for, so
``runtime.telemetry`` imports without them.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from runtime.errors import ConfigError, WorldClosedError
from runtime.lane.values import shown
from runtime.world import Probe, World

if TYPE_CHECKING:
    from runtime.telemetry.prometheus import MetricsServer
    from runtime.telemetry.tracing import Tracing

__all__ = [
    "Telemetry",
    "configured_tracing",
    "instrument",
    "serve_metrics",
    "tracing_available",
    "tracing_configured",
]


def tracing_available() -> bool:
    """Whether ``opentelemetry-api`` can be imported (the ``telemetry`` extra)."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def tracing_configured() -> bool:
    """Whether this process has a tracer provider of its own (set by the host, or by
    ``opentelemetry-instrument``): only then do spans go anywhere."""
    if not tracing_available():
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


class Telemetry:
    """What ``instrument`` switched on for one world; ``close()`` detaches the tracing probe
    it attached and ends its open spans (metric recording stays on: the figures keep
    counting). A probe that was there already (the host's, for its global provider) stays:
    a library's scoped ``with instrument(world):`` took the host's tracing away."""

    def __init__(self, world: World, tracing: Tracing | None, *, owned: bool = True) -> None:
        self.world = world
        self.tracing = tracing
        self._owned = owned

    def close(self) -> None:
        tracing, self.tracing = self.tracing, None
        if tracing is not None and self._owned:
            self.world.remove_probe(tracing)
            tracing.close()

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def instrument(
    world: World,
    *,
    traces: bool | None = None,
    metrics: bool = True,
    tracer_provider: Any = None,
) -> Telemetry:
    """Switch telemetry on for ``world``'s live ticks (replays stay dark).

    ``traces``: True attaches tracing, False does not, None (the default) attaches it when
    ``opentelemetry-api`` is installed. ``tracer_provider`` is an OpenTelemetry
    ``TracerProvider`` (default: the global one the host set, a no-op until it sets one).
    ``metrics`` switches on ``world.record_metrics()``.

    Called again for the same provider, it hands back the probe already attached (every
    span once, never twice).

    Raises:
        ConfigError: ``traces=True`` and ``opentelemetry-api`` is not installed.
        TypeError: ``world`` is not a `World`.
        WorldClosedError: the world is closed.
    """
    if not isinstance(world, World):
        raise TypeError(f"instrument takes a World, got {shown(world)}")
    if world.closed:
        raise WorldClosedError("the world is closed: there is nothing to instrument")
    if traces is None:
        traces = tracing_available()
    elif traces and not tracing_available():
        raise ConfigError(
            "`traces=True` needs opentelemetry-api: pip install 'tickwork[telemetry]'"
        )
    if metrics:
        world.record_metrics()
    tracing = None
    if traces:
        from runtime.telemetry.tracing import Tracing

        attached = [
            p
            for p in world.probes()
            if isinstance(p, Tracing) and p.tracer_provider is tracer_provider
        ]
        if attached:  # the world traces to that provider already: the same spans, once
            return Telemetry(world, attached[0], owned=False)
        tracing = Tracing(tracer_provider)
        world.add_probe(tracing)
    return Telemetry(world, tracing)


def configured_tracing() -> Probe | None:
    """A tracing probe when the host has set an OpenTelemetry tracer provider, else None.

    Registered in `runtime.world.probe.PROBE_FACTORIES`: every live world made after the host
    configured tracing emits spans without an ``instrument`` call (a library instruments
    through the API; the host decides where spans go). ``instrument`` attaches one
    explicitly, for a provider of the host's own or a provider set after the world was made.
    """
    if not tracing_configured():
        return None
    from runtime.telemetry.tracing import Tracing

    return Tracing(None)


def serve_metrics(world: World, address: str, *, name: str = "address") -> MetricsServer:
    """Serve ``world``'s figures as Prometheus text at ``http://ADDRESS/metrics``.

    ``address`` is ``HOST:PORT`` (port 0: any free port; the server's ``port`` says which).
    Switches the world's metric recording on. ``name`` is what an error calls the address
    (``--metrics`` on the command line). The metric names are in the README ("Observing a
    run").

    Raises:
        ConfigError: ``address`` is malformed, nothing can listen there, or
            ``prometheus-client`` is not installed (the ``metrics`` extra).
    """
    from runtime.telemetry.address import parse_address

    parse_address(address, name=name)  # a bad value is named before a missing extra
    try:
        from runtime.telemetry import prometheus
    except ImportError:
        raise ConfigError(
            f"`{name}` needs prometheus-client: pip install 'tickwork[metrics]'"
        ) from None
    return prometheus.serve_metrics(world, address, name=name)
