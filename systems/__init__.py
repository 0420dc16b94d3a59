"""esper Processors, one system per module, and the ordered pipeline that runs them."""

from .abort_terminal import AbortTerminalWork
from .apply_inputs import ApplyInputs
from .collect_outcomes import CollectOutcomes
from .dispatch_work import DispatchWork
from .expire_prompts import ExpirePrompts
from .handle_interrupts import HandleInterrupts
from .mirror_lane_stats import LaneGauge, MirrorLaneStats
from .pipeline import build_pipeline
from .reflect_status import ReflectInteractionStatus
from .step_behaviors import StepBehaviors

__all__ = [
    "AbortTerminalWork",
    "ApplyInputs",
    "CollectOutcomes",
    "DispatchWork",
    "ExpirePrompts",
    "HandleInterrupts",
    "LaneGauge",
    "MirrorLaneStats",
    "ReflectInteractionStatus",
    "StepBehaviors",
    "build_pipeline",
]
