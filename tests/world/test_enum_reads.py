"""The hot paths read enum members through module names, not through their classes.

On Python 3.11 `EnumType` defines `__getattr__`, so every `Phase.READY` or
`StatusKind.ACTIVE` runs the slot hook (~100 ns a read, against ~15 ns for a global); a turn
of model call, tool batch and prompt read ~24 of them on the tick thread before they became
module names (`components._members`). Counting the reads needs no clock: a turn that reads
them again fails here.
"""

from __future__ import annotations

import contextlib
import enum
import sys
from collections import Counter
from collections.abc import Generator, Iterator
from typing import Any

from components import PromptOpened
from runtime import (
    Ask,
    CallTools,
    CancelToken,
    InteractionRequest,
    InteractionResponse,
    ManualClock,
    ModelReply,
    ModelRequest,
    Resource,
    Sleep,
    StatusKind,
    Think,
    TickReport,
    ToolCall,
    ToolRegistry,
    Use,
    World,
)

AGENTS = 200


class _Instant:
    def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
        return ModelReply("plan")


def _turn(turn: Any) -> Generator[Any, Any, str]:
    yield Think("go")
    results = yield CallTools(*(ToolCall(f"c{i}", "io", {"i": i}) for i in range(3)))
    assert all(r.ok for r in results)
    answer = yield Ask(InteractionRequest.free_text("", "go on?"))
    return str(answer.value)


def _io(args: Any, ctx: Any = None) -> int:
    return 1


@contextlib.contextmanager
def _counting_reads() -> Iterator[Counter[str]]:
    """Count the enum members read through their classes while the block runs, by caller."""
    reads: Counter[str] = Counter()
    plain = type.__getattribute__

    def counting(cls: type, name: str) -> Any:
        value = plain(cls, name)
        if isinstance(value, enum.Enum) and not name.startswith("_"):
            caller = sys._getframe(1).f_code
            reads[f"{cls.__name__}.{name} in {caller.co_name}"] += 1
        return value

    enum.EnumType.__getattribute__ = counting  # type: ignore[assignment]
    try:
        yield reads
    finally:
        del enum.EnumType.__getattribute__  # type: ignore[attr-defined]


def test_a_turn_reads_enum_members_through_module_names_not_their_classes() -> None:
    tools = ToolRegistry()
    tools.tool("io")(_io)
    world = World(tools=tools, models={"default": _Instant()}, interaction_timeout_secs=0)

    def operator(report: TickReport, inputs: list[tuple[int, object]]) -> None:
        for _seq, item in inputs:
            if isinstance(item, PromptOpened):
                world.hub.answer(InteractionResponse.text(item.request.id, "yes"))

    world.observe(operator)
    try:
        world.run_until_idle(timeout=30)  # warm: the first turns of a world are not the point
        ids = [world.spawn(_turn) for _ in range(AGENTS)]
        with _counting_reads() as reads:
            world.run_until_idle(timeout=60)
        assert all(world.status(a).kind is StatusKind.COMPLETE for a in ids)
        # ~24 a turn read through the classes; ~0.2 now (a few per run, not per turn).
        assert sum(reads.values()) <= AGENTS // 2, reads.most_common(10)
    finally:
        world.close()


def _visitor(turn: Any) -> Generator[Any, Any, None]:
    for think, service in turn.message:
        yield Sleep(think)
        yield Use("counter", service)


def test_resource_visits_read_enum_members_through_module_names() -> None:
    # A capacity-2 counter and 40 visitors arriving together: most visits queue, so the
    # step's claim, grant and take all run (~1.6 reads a visit before they were names).
    world = World(clock=ManualClock())
    try:
        counter = Resource(world, "counter", capacity=2)
        for n in range(40):
            world.spawn(_visitor, [[0.5, 1.0 + n % 3], [0.25, 0.5]])
        with _counting_reads() as reads:
            world.run_until_idle(max_ticks=10_000)
        assert counter.stats().acquired == 80 and counter.stats().peak_queued > 10
        assert sum(reads.values()) <= 10, reads.most_common(10)
    finally:
        world.close()
