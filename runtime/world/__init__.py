"""The world room: `World`, its state and inputs, effects, actions, behaviours and digest.

`World` (``world.py``) is the API; its run loops are in ``loop.py``; what the tick thread
keeps per agent is in ``state.py``; what enters between ticks is in ``inputs.py``. The host
ECS (the host's components, entities, systems and actions) is `SystemContext`
(``context.py``), its bookkeeping (``host.py``), the world's methods for it (``host_api.py``)
and what a host component is (``host_data.py``). `Resource` (``resource.py``) is a
shared capacity in world time, and the reference example of a host action.
"""

from runtime.world.actions import Action, Ask, Behavior, CallTools, Join, Sleep, Spawn, Think, Turn
from runtime.world.behaviors import BehaviorRegistry, behavior, register_behavior
from runtime.world.context import PENDING, SystemContext
from runtime.world.loop import REDRIVE_SECS
from runtime.world.metrics import Histogram, WorldMetrics
from runtime.world.probe import Probe, ProbeFanout
from runtime.world.recorder import Recorder
from runtime.world.report import TickReport
from runtime.world.resource import Acquire, Release, Resource, ResourceStats, Use
from runtime.world.world import World

__all__ = [
    "PENDING",
    "REDRIVE_SECS",
    "Acquire",
    "Action",
    "Ask",
    "Behavior",
    "BehaviorRegistry",
    "CallTools",
    "Histogram",
    "Join",
    "Probe",
    "ProbeFanout",
    "Recorder",
    "Release",
    "Resource",
    "ResourceStats",
    "Sleep",
    "Spawn",
    "SystemContext",
    "Think",
    "TickReport",
    "Turn",
    "Use",
    "World",
    "WorldMetrics",
    "behavior",
    "register_behavior",
]
