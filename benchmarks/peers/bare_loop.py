"""The bare loop: ``gen.send`` on N generators and one field write each, per round.

The physical floor of "advance N coroutine-style agents by one step" in CPython: no
scheduler, no bookkeeping, one attribute write to remember what each agent yielded. The
generators yield a preallocated value, so not even an allocation is timed.
"""

from __future__ import annotations

from collections.abc import Generator

from ._timing import Stopwatch

__all__ = ["BareLoop"]

_STEP = object()


def _agent() -> Generator[object, None, None]:
    while True:
        yield _STEP


class _Slot:
    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: object = None


class BareLoop:
    """``n`` generators, each with a slot for the value it last yielded."""

    def __init__(self, n: int) -> None:
        self._pairs = []
        for _ in range(n):
            gen = _agent()
            next(gen)
            self._pairs.append((gen, _Slot()))

    def run(self, rounds: int) -> Stopwatch:
        """Advance every generator ``rounds`` times; return the time it took."""
        pairs = self._pairs
        with Stopwatch() as sw:
            for _ in range(rounds):
                for gen, slot in pairs:
                    slot.last = gen.send(None)
        return sw

    @property
    def agents(self) -> int:
        """How many generators the loop advances per round."""
        return len(self._pairs)
