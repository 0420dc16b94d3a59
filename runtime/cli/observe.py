"""Telemetry for ``run`` and ``serve``: ``--metrics HOST:PORT``, and spans when the process
has a tracer provider (``opentelemetry-instrument tickwork serve ...`` sets one up)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from runtime.telemetry import instrument, parse_address, serve_metrics, tracing_configured
from runtime.world import World

if TYPE_CHECKING:
    from runtime.telemetry import Telemetry
    from runtime.telemetry.prometheus import MetricsServer

__all__ = ["CommandTelemetry", "check_metrics_address"]


def check_metrics_address(address: str | None) -> None:
    """Refuse a malformed ``--metrics`` value before anything runs.

    Raises:
        ConfigError: names ``--metrics`` and the value.
    """
    if address is not None:
        parse_address(address, name="--metrics")


class CommandTelemetry:
    """What a command switches on for its world: ``start()``, then ``close()`` (idempotent;
    the server stops, open spans end) before the world closes."""

    def __init__(self, world: World, metrics: str | None) -> None:
        self._world = world
        self._address = metrics
        self._server: MetricsServer | None = None
        self._telemetry: Telemetry | None = None

    def start(self) -> None:
        """Attach tracing (if configured) and serve ``--metrics`` (if asked for).

        Raises:
            ConfigError: ``--metrics`` cannot listen, or its extra is not installed.
        """
        traces = tracing_configured()
        if traces or self._address is not None:
            self._telemetry = instrument(self._world, traces=traces, metrics=False)
        if self._address is not None:
            self._server = serve_metrics(self._world, self._address, name="--metrics")
            print(f"metrics on {self._server.url}", file=sys.stderr, flush=True)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        telemetry, self._telemetry = self._telemetry, None
        if telemetry is not None:
            telemetry.close()
