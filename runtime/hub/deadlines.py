"""The hub's deadlines: the earliest deadline among open prompts, with lazy deletion.

A hub gives every prompt the same timeout on a clock that does not go back, so deadlines
almost always arrive in order: those go on a FIFO (a deque, one pointer each), and only a
deadline earlier than one already queued (a lowered timeout, a prompt put back by
``reopen``) goes on a heap. The earliest deadline is at the front of one of the two.

A prompt that settles before its deadline leaves its item behind (removing it from the
middle would cost O(n)); the item is stale from then on and is dropped when it reaches the
front, or when the structure is rebuilt. An item is live while the hub's open set maps its
request id to the very ``PromptOpened`` the item carries, so an item left by an earlier
request with the same id is recognised as stale too.

Equal deadlines come out in the order they were pushed. Within the FIFO and within the heap
(by a sequence number) that holds by construction; between the two, a deadline goes on the
FIFO only if it is later than every deadline on the heap, so of two equal deadlines, one on
each, the FIFO's was pushed first, and the FIFO wins ties.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping

from components.interaction import PromptOpened

__all__ = ["DeadlineHeap"]

# Both are rebuilt without their stale items once they hold more than twice as many items as
# there are open requests (and at least this many), so lazy deletion keeps `top` O(log n)
# amortised without letting answered prompts pile up.
_COMPACT_MIN = 64


class DeadlineHeap:
    """Deadlines of open prompts, earliest first; used under the hub's lock only.

    `HubCore` spells out the common cases of ``push`` (a deadline onto the FIFO) and
    ``forget`` (the FIFO's first item) on every opening and settlement, reading ``_fifo``,
    ``_heap_max`` and ``_items`` itself: keep those in step with the methods here.

    ``open_`` is the hub's open set (request id -> the event that opened it), read to tell
    live items from stale ones.
    """

    __slots__ = ("_fifo", "_heap_max", "_items", "_open", "_seq", "floor")

    def __init__(self, open_: Mapping[str, PromptOpened]) -> None:
        self._open = open_
        # Deadlines in the order they were pushed, never decreasing.
        self._fifo: deque[PromptOpened] = deque()
        # The rest, as (deadline, seq, request id, opened); `seq` is unique, so two items
        # never compare their events, and equal deadlines pop in the order they were pushed.
        self._items: list[tuple[float, int, str, PromptOpened]] = []
        self._seq = 0
        # At least the latest deadline on the heap (-inf while it is empty).
        self._heap_max = -math.inf
        # Invariant: at most the earliest live deadline (inf only while none is live).
        # Written under the hub's lock; read without it by `InteractionHub.expire_due` and
        # `next_deadline`, so a tick with nothing due never takes the lock: a push lowers
        # it after its item is queued, which a lock-free reader sees as the push landing
        # just after its read; a settlement only removes items, which keeps it a bound.
        self.floor = math.inf

    def __len__(self) -> int:
        return len(self._fifo) + len(self._items)

    def push(self, opened: PromptOpened) -> None:
        """Track ``opened``'s deadline (it must have one)."""
        deadline = opened.deadline
        assert deadline is not None
        fifo = self._fifo
        if deadline > self._heap_max and (not fifo or deadline >= fifo[-1].deadline):  # type: ignore[operator]
            fifo.append(opened)
        else:
            self._seq += 1
            heapq.heappush(self._items, (deadline, self._seq, opened.request.id, opened))
            self._heap_max = max(self._heap_max, deadline)
        if deadline < self.floor:  # noqa: PLR1730 (min() is a call, on every open)
            self.floor = deadline

    def top(self) -> PromptOpened | None:
        """Drop stale items off both fronts and return the earliest live one, if any
        (``floor`` becomes its deadline, or inf)."""
        top = self._top()
        self.floor = math.inf if top is None else top.deadline  # type: ignore[assignment]
        return top

    def _top(self) -> PromptOpened | None:
        open_ = self._open
        fifo = self._fifo
        first = None
        while fifo:
            first = fifo[0]
            if open_.get(first.request.id) is first:
                break
            fifo.popleft()
            first = None
        items = self._items
        if items:
            while items:
                item = items[0]
                if open_.get(item[2]) is item[3]:
                    if first is None or item[0] < first.deadline:  # type: ignore[operator]
                        return item[3]
                    return first
                heapq.heappop(items)
            self._heap_max = -math.inf
        return first

    def forget(self, opened: PromptOpened) -> None:
        """``opened`` just left the open set: drop its item now if it is at a front (the
        common case, prompts answered in the order they opened), else compact when stale
        items have piled up."""
        fifo = self._fifo
        if fifo and fifo[0] is opened:
            fifo.popleft()
            if not fifo and not self._items:
                self.floor = math.inf  # nothing left: the next tick need not look
            return
        items = self._items
        if items and items[0][3] is opened:
            self.top()
            return
        size = len(fifo) + len(items)
        if size >= _COMPACT_MIN and size > 2 * len(self._open):
            open_ = self._open
            self._fifo = deque(o for o in fifo if open_.get(o.request.id) is o)
            live = [item for item in items if open_.get(item[2]) is item[3]]
            heapq.heapify(live)
            self._items = live
            self._heap_max = max((item[0] for item in live), default=-math.inf)
