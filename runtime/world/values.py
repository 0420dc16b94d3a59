"""Values that cross into the world: what a journal can store as it was given."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["is_json"]


def is_json(value: Any) -> bool:
    """Whether ``value`` survives a JSON round trip unchanged in kind (no tuples or objects)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
