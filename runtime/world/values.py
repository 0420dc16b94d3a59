"""Values that cross into the world: what a journal can store and give back unchanged.

The rules live with the lane (`runtime.lane.values`), where tool outputs and model replies
cross; host inputs (messages) go through the same `json_value` when a journal records.
"""

from __future__ import annotations

from typing import Any

from runtime.lane.values import NotJSON, json_value

__all__ = ["NotJSON", "is_json", "json_value"]


def is_json(value: Any) -> bool:
    """Whether a journal can store ``value`` (tuples count: they come back as lists)."""
    try:
        json_value(value)
    except NotJSON:
        return False
    return True
