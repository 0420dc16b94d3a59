"""Values that cross into the world: what a journal can store and give back unchanged.

The rules live with the lane (`runtime.lane.values`), where tool outputs and model replies
cross; host inputs (messages) go through the same `json_value` when a journal records.
"""

from __future__ import annotations

from runtime.lane.values import NotJSON, json_value

__all__ = ["NotJSON", "json_value"]
