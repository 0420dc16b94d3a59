"""The interaction hub: prompts for a person, with deadlines, cancellation and wake-ups.

`runtime.hub.core` holds `InteractionHub` itself; `runtime.hub.deadlines` the heap of its
prompts' deadlines. The names below are the room's public face.
"""

from runtime.hub.core import HubEvent, HubListener, HubStats, InteractionHub

__all__ = ["HubEvent", "HubListener", "HubStats", "InteractionHub"]
