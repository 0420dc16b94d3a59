"""The pipeline: the systems of a tick, in order, each with the reason for its place."""

from __future__ import annotations

from collections.abc import Callable

import esper

from components import LaneStats

from .abort_terminal import AbortTerminalWork
from .apply_inputs import ApplyInputs
from .collect_outcomes import CollectOutcomes
from .dispatch_work import DispatchWork
from .expire_prompts import ExpirePrompts
from .handle_interrupts import HandleInterrupts
from .mirror_lane_stats import MirrorLaneStats
from .reflect_status import ReflectInteractionStatus
from .step_behaviors import StepBehaviors

__all__ = ["build_pipeline"]


def build_pipeline(lane_stats: dict[str, Callable[[], LaneStats]]) -> list[esper.Processor]:
    """The systems of one tick, in the order they run."""
    return [
        # Commands first: everything below sees this tick's spawns, pauses and cancels.
        ApplyInputs(),
        # Before any outcome is matched: a cancelled agent's late work must not land.
        AbortTerminalWork(),
        # Before outcomes too: an outcome of an abandoned turn is then already stale.
        HandleInterrupts(),
        # Before collecting: an expiry settles a prompt for the next tick, in order.
        ExpirePrompts(),
        # Before stepping: an agent whose result arrived this tick steps this tick.
        CollectOutcomes(),
        # The behaviours move: each ready agent advances by one action.
        StepBehaviors(),
        # After every step: the tick's work goes out together, none lands this tick.
        DispatchWork(),
        # After dispatch: prompts opened or settled show in status at the tick's end.
        ReflectInteractionStatus(),
        # Last: the lane snapshot describes the lanes after this tick's dispatch.
        MirrorLaneStats(lane_stats),
    ]
