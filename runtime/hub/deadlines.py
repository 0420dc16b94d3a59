"""The hub's deadline heap: the earliest deadline among open prompts, with lazy deletion.

A prompt that settles before its deadline leaves its item in the heap (removing it from the
middle would cost O(n)); the item is stale from then on and is dropped when it reaches the
top, or when the heap is rebuilt. An item is live while the hub's open set maps its request
id to the very ``PromptOpened`` the item carries, so an item left by an earlier request with
the same id is recognised as stale too.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from components.interaction import PromptOpened

__all__ = ["DeadlineHeap"]

# The heap is rebuilt without its stale items once it holds more than twice as many items as
# there are open requests (and at least this many), so lazy deletion keeps `top` O(log n)
# amortised without letting answered prompts pile up in the heap.
_COMPACT_MIN = 64


class DeadlineHeap:
    """Deadlines of open prompts, earliest first; used under the hub's lock only.

    ``open_`` is the hub's open set (request id -> the event that opened it), read to tell
    live items from stale ones.
    """

    __slots__ = ("_items", "_open", "_seq")

    def __init__(self, open_: Mapping[str, PromptOpened]) -> None:
        self._open = open_
        # Items (deadline, seq, request id, opened); `seq` is unique, so two items never
        # compare their events, and equal deadlines pop in the order they were pushed.
        self._items: list[tuple[float, int, str, PromptOpened]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._items)

    def push(self, opened: PromptOpened) -> None:
        """Track ``opened``'s deadline (it must have one)."""
        assert opened.deadline is not None
        self._seq += 1
        heapq.heappush(self._items, (opened.deadline, self._seq, opened.request.id, opened))

    def top(self) -> PromptOpened | None:
        """Drop stale items off the top and return the earliest live one, if any."""
        items, open_ = self._items, self._open
        while items:
            item = items[0]
            if open_.get(item[2]) is item[3]:
                return item[3]
            heapq.heappop(items)
        return None

    def pop(self) -> None:
        """Remove the top item (after ``top`` returned it)."""
        heapq.heappop(self._items)

    def forget(self, opened: PromptOpened) -> None:
        """``opened`` just left the open set: drop its item now if it is on top (the common
        case, prompts answered in the order they opened), else compact when stale items
        have piled up."""
        items = self._items
        if not items:
            return
        if items[0][3] is opened:
            self.top()
        elif len(items) >= _COMPACT_MIN and len(items) > 2 * len(self._open):
            open_ = self._open
            live = [item for item in items if open_.get(item[2]) is item[3]]
            heapq.heapify(live)
            self._items = live
