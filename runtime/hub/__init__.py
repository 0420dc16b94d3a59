"""The interaction hub: prompts for a person, with deadlines, cancellation and wake-ups.

`runtime.hub.interaction_hub` holds `InteractionHub`, `runtime.hub.core` its bookkeeping
(the open set, settlements, the listener) and `runtime.hub.deadlines` its prompts'
deadlines (a FIFO, and a heap for those that arrive out of order). The names below are the
room's public face.
"""

from runtime.hub.core import HubEvent, HubListener, HubStats, check_request
from runtime.hub.interaction_hub import InteractionHub

__all__ = ["HubEvent", "HubListener", "HubStats", "InteractionHub", "check_request"]
