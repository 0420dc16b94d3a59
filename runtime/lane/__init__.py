"""The lane room: `ToolLane` (permits, queue, counters), its jobs, deadlines and `off_lane`.

``core.py`` keeps the bookkeeping under one lock; ``tool_lane.py`` adds the threads (or an
executor); ``parking.py`` lets a running job step off the lane; ``deadlines.py`` is the one
timer thread for tool timeouts and give-ups; ``backend.py`` says what runs a world's tool jobs.
"""

from runtime.lane.backend import BackendInfo, ToolBackend
from runtime.lane.jobs import ToolJob, ToolOutcome
from runtime.lane.parking import off_lane
from runtime.lane.tool_lane import GIVE_UP_GRACE_SECS, ToolLane

__all__ = [
    "GIVE_UP_GRACE_SECS",
    "BackendInfo",
    "ToolBackend",
    "ToolJob",
    "ToolLane",
    "ToolOutcome",
    "off_lane",
]
