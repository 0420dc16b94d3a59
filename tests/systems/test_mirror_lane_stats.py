"""MirrorLaneStats keeps every lane gauge current, including gauges that appear later."""

from __future__ import annotations

import esper

from components import LaneStats
from systems import LaneGauge, MirrorLaneStats


def test_a_gauge_created_after_the_first_tick_is_mirrored_from_then_on() -> None:
    counter = {"n": 0}

    def source() -> LaneStats:
        return LaneStats(name="tools", enqueued=counter["n"])

    esper.switch_world("test-mirror-lane-stats")
    try:
        mirror = MirrorLaneStats({"tools": source})
        first = LaneGauge("tools", LaneStats(name="tools"))
        esper.create_entity(first)
        esper.create_entity(LaneGauge("unknown", LaneStats(name="unknown")))
        counter["n"] = 1
        mirror.process(None)
        assert first.stats.enqueued == 1
        # A structural change rebuilds esper's query result: the new gauge is seen.
        later = LaneGauge("tools", LaneStats(name="tools"))
        esper.create_entity(later)
        counter["n"] = 2
        mirror.process(None)
        assert (first.stats.enqueued, later.stats.enqueued) == (2, 2)
    finally:
        esper.switch_world("default")
        esper.delete_world("test-mirror-lane-stats")
