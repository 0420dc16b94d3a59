"""Prometheus text at ``/metrics``: a world's `WorldMetrics`, read afresh at every scrape.

Built on ``prometheus-client`` (the ``metrics`` extra): `WorldCollector` is a custom
collector that turns one ``world.metrics()`` snapshot into metric families, so a scrape
costs one snapshot and the tick thread never touches a Prometheus object. `serve_metrics`
runs the client's HTTP server on its own thread, with a registry of its own (the world's
families plus the process and GC collectors), never the client's global one.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from components import StatusKind
from runtime.errors import ConfigError
from runtime.telemetry.address import parse_address
from runtime.world import World
from runtime.world.metrics import Histogram

__all__ = ["MetricsServer", "WorldCollector", "serve_metrics"]

_LANE_GAUGES = (
    ("busy", "jobs running on the lane, each holding a permit"),
    ("queued", "jobs waiting for a permit"),
    ("parked", "jobs running off the lane (waiting on a person), holding no permit"),
    ("capacity", "the lane's permits"),
)
_HISTOGRAMS = (
    ("tick_seconds", "wall time of each live tick"),
    ("tool_seconds", "time each tool batch ran on the tool lane"),
    ("model_seconds", "time each model call ran on the inference lane"),
    ("prompt_wait_seconds", "world time from a prompt's opening to its settlement"),
)


class WorldCollector(Collector):
    """A collector of one world's figures (see `runtime.world.metrics.WorldMetrics`)."""

    def __init__(self, world: World) -> None:
        self._world = world

    def collect(self) -> Iterator[Metric]:
        m = self._world.metrics()
        agents = GaugeMetricFamily("tickwork_agents", "agents by status", labels=["status"])
        for kind in StatusKind:
            agents.add_metric([kind.value], m.agents.get(kind.value, 0))
        yield agents
        for field, doc in _LANE_GAUGES:
            gauge = GaugeMetricFamily(f"tickwork_lane_{field}", doc, labels=["lane"])
            for name, stats in m.lanes.items():
                gauge.add_metric([name], getattr(stats, field))
            yield gauge
        yield GaugeMetricFamily("tickwork_prompts_open", "prompts waiting for a person",
                                value=m.prompts_open)  # fmt: skip
        yield CounterMetricFamily("tickwork_ticks", "ticks the world has run", value=m.tick)
        for field, doc in _HISTOGRAMS:
            yield _histogram(f"tickwork_{field}", doc, getattr(m, field))
        tokens = CounterMetricFamily(
            "tickwork_tokens", "model tokens used, by type (from replies' usage)", labels=["type"]
        )
        tokens.add_metric(["input"], m.input_tokens)
        tokens.add_metric(["output"], m.output_tokens)
        yield tokens


def _histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
    buckets = [(_le(bound), count) for bound, count in hist.cumulative()]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=hist.sum)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class MetricsServer:
    """A running ``/metrics`` endpoint; ``close()`` stops it (idempotent)."""

    def __init__(self, httpd: Any, thread: Any) -> None:
        self._httpd = httpd
        self._thread = thread
        host, port = httpd.server_address[:2]
        self.host: str = host
        self.port: int = port

    @property
    def url(self) -> str:
        """Where to scrape: ``http://HOST:PORT/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        if self._httpd is None:
            return
        httpd, self._httpd = self._httpd, None
        httpd.shutdown()
        httpd.server_close()
        self._thread.join(5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(world: World, address: str, *, name: str = "address") -> MetricsServer:
    """Serve ``world``'s figures as Prometheus text at ``http://ADDRESS/metrics``.

    Switches the world's metric recording on (``world.record_metrics()``). ``name`` is what
    an error calls the address (``--metrics`` on the command line).

    Raises:
        ConfigError: ``address`` is malformed, or nothing can listen there (in use, not an
            address of this machine).
    """
    host, port = parse_address(address, name=name)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(WorldCollector(world))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    try:
        httpd, thread = _start_server(host, port, registry)
    except (OSError, UnicodeError, ValueError) as exc:
        # UnicodeError: a host name IDNA cannot encode ("a..b", a label past 63 bytes),
        # raised by the name's lookup (it was an internal error, exit 70).
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        raise ConfigError(f"`{name}` cannot listen on {address!r}: {reason}") from None
    world.record_metrics()
    return MetricsServer(httpd, thread)


class _Handler(WSGIRequestHandler):
    """A scrape's connection: dropped after ``timeout`` seconds without a byte (a client
    that connected and stalled kept its thread for good, and outlived ``close``), and no
    log line per request."""

    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _only_metrics(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """``app`` at ``/metrics``; any other path is a 404 (every path answered the metrics)."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") not in ("/metrics", "/metrics/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: scrape /metrics\n"]
        return app(environ, start_response)

    return serve


def _start_server(
    host: str, port: int, registry: CollectorRegistry
) -> tuple[ThreadingWSGIServer, threading.Thread]:
    """The endpoint on a daemon thread, as ``prometheus_client.start_http_server`` makes
    it, with `_Handler`'s timeout and `/metrics` alone.

    Raises:
        OSError: nothing can listen there. UnicodeError: a name IDNA cannot encode.
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(
        host, port, _only_metrics(make_wsgi_app(registry)), Server, handler_class=_Handler
    )
    thread = threading.Thread(target=httpd.serve_forever, name="tickwork-metrics", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: the socket must not stay bound
        httpd.server_close()
        raise
    return httpd, thread
