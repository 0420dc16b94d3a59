"""MirrorLaneStats: copy each lane's counters onto the lane's entity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import esper

from components import LaneStats

__all__ = ["LaneGauge", "MirrorLaneStats"]


@dataclass(slots=True)
class LaneGauge:
    """The component on a lane's entity: the latest ``LaneStats`` snapshot.

    A field that is overwritten, not a component that is replaced: replacing a component
    is a structural change, and every structural change clears esper's query cache.
    """

    name: str
    stats: LaneStats


class MirrorLaneStats(esper.Processor):
    """Runs last so the snapshot describes the lanes after this tick's dispatch. Lane
    counters depend on thread timing, so they are never part of the digest. The world's
    sources are the lanes' ``gauge`` methods, which never wait for a lane's lock (a tick
    thread blocked behind a worker gives the GIL away and queues to get it back)."""

    def __init__(self, sources: dict[str, Callable[[], LaneStats]]) -> None:
        self._sources = sources
        # Each gauge with its source, resolved once per query result: esper hands back the
        # same cached list until a structural change, so an unchanged list means unchanged
        # gauges, and a tick pays one call per lane instead of a lookup and a call.
        self._seen: list[tuple[int, LaneGauge]] | None = None
        self._pairs: list[tuple[LaneGauge, Callable[[], LaneStats]]] = []

    def process(self, state: object) -> None:
        gauges = esper.get_component(LaneGauge)
        if gauges is not self._seen:
            sources = self._sources
            self._pairs = [
                (gauge, sources[gauge.name]) for _entity, gauge in gauges if gauge.name in sources
            ]
            self._seen = gauges
        for gauge, source in self._pairs:
            gauge.stats = source()
