"""wake_latency: from ``hub.answer()`` on another thread to the agent ACTIVE in a tick of a
parked ``run()``, against a raw ``threading.Event`` handoff."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Generator
from typing import Any

from components import PromptSettled, StatusKind
from runtime import Ask, InteractionRequest, InteractionResponse, Sleep, TickReport, World

from .harness import BENCHMARKS, Context, Result, benchmark, paired_result
from .peers.event_handoff import EventHandoff

__all__ = ["WorldWaker", "wake_latency"]

SETTLE = 0.002  # how long each side is left parked before it is woken


def asker(turn: Any) -> Generator[Any, Any, None]:
    """Ask; once answered, take the cheapest step there is (``Sleep(0)``) and ask again.

    The step after the answer is the agent's own work, not the runtime's: making it the
    cheapest action keeps the figure about waking, and the next prompt opens one tick
    later, outside the measured tick.
    """
    while True:
        yield Ask(InteractionRequest.free_text("", "go on?"))
        yield Sleep(0)


class WorldWaker:
    """A world running on its own thread, one agent waiting on a prompt.

    `fire` answers the prompt from this thread and returns the time until the end of the
    tick that applied the settlement: that tick's observer (on the tick thread) stamps it,
    and at that point the agent's status reads ACTIVE (checked after the stamp).
    """

    def __init__(self) -> None:
        self.world = World(interaction_timeout_secs=0)
        self._done = threading.Event()
        self._settled_at: dict[str, float] = {}
        self._status: dict[str, StatusKind] = {}
        self.answer_calls: list[float] = []  # how long hub.answer() itself took, each time
        self.world.observe(self._on_tick)
        self.agent = self.world.spawn(asker)
        self.world.start()

    def _on_tick(self, report: TickReport, inputs: list[tuple[int, object]]) -> None:
        for _seq, item in inputs:
            if item.__class__ is PromptSettled:
                assert isinstance(item, PromptSettled)
                self._settled_at[item.request_id] = time.perf_counter()
                self._status[item.request_id] = self.world.status(self.agent).kind
                self._done.set()

    def _open_request(self, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            pending = self.world.hub.pending()
            if pending:
                return pending[0][1].id
            if time.monotonic() > deadline:
                raise TimeoutError("the agent opened no prompt within 5 s")
            time.sleep(0.0005)

    def fire(self, settle: float = SETTLE) -> float:
        """Answer the agent's prompt once the loop is parked; return the latency."""
        request_id = self._open_request()
        time.sleep(settle)  # the loop has ticked to a fixed point and parked on the wake
        self._done.clear()
        response = InteractionResponse.text(request_id, "yes")
        started = time.perf_counter()
        if not self.world.hub.answer(response):
            raise RuntimeError(f"prompt {request_id} was not open")
        self.answer_calls.append(time.perf_counter() - started)
        if not self._done.wait(5.0):
            raise TimeoutError("no tick applied the answer within 5 s")
        status = self._status.pop(request_id)
        if status is not StatusKind.ACTIVE:
            raise RuntimeError(f"agent was {status} after the answer's tick, not ACTIVE")
        return self._settled_at.pop(request_id) - started

    def close(self) -> None:
        self.world.close()


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@benchmark(
    "wake_latency",
    unit="µs",
    target="<= 2",
    ours="p50 hub.answer() -> agent ACTIVE at the end of a tick of a parked run()",
    baseline="p50 threading.Event.set() -> the parked waiter running",
)
def wake_latency(ctx: Context) -> Result:
    reps = ctx.pick(3, 9)
    per_rep = ctx.pick(30, 60)
    waker = WorldWaker()
    handoff = EventHandoff()
    ours_all: list[float] = []
    base_all: list[float] = []
    ours_p50: list[float] = []
    base_p50: list[float] = []
    try:
        for _ in range(5):  # warm-up
            waker.fire()
            handoff.fire()
        for rep in range(reps):
            ctx.progress.rep(rep + 1, reps)
            ours_rep: list[float] = []
            base_rep: list[float] = []
            # Alternate sample by sample: both sides see the same machine, moment by moment.
            for i in range(per_rep):
                if (rep + i) % 2 == 0:
                    ours_rep.append(waker.fire())
                    base_rep.append(handoff.fire())
                else:
                    base_rep.append(handoff.fire())
                    ours_rep.append(waker.fire())
            ours_all += ours_rep
            base_all += base_rep
            ours_p50.append(statistics.median(ours_rep) * 1e6)
            base_p50.append(statistics.median(base_rep) * 1e6)
        ticks = waker.world.tick_count
        answer_calls = waker.answer_calls[5:]  # without the warm-up
    finally:
        waker.close()
        handoff.close()
    ours_p99 = _percentile(ours_all, 0.99) * 1e6
    base_p99 = _percentile(base_all, 0.99) * 1e6
    return paired_result(
        BENCHMARKS["wake_latency"],
        ours_p50,
        base_p50,
        details={
            "samples": len(ours_all),
            "ours_p50_us": statistics.median(ours_all) * 1e6,
            "baseline_p50_us": statistics.median(base_all) * 1e6,
            "ours_p99_us": ours_p99,
            "baseline_p99_us": base_p99,
            "p99_ratio": ours_p99 / base_p99,
            # Of the p50, how long the answering thread spent inside hub.answer() (the rest
            # is the wake-up and the tick).
            "ours_answer_call_p50_us": statistics.median(answer_calls) * 1e6,
            "settle_secs": SETTLE,
            "ticks": ticks,
        },
    )
