"""hub_throughput: open+answer pairs/s across 4 threads, the hub wired as a world wires it
(its listener posting every change to an inbox that nudges the wake), against a dict + lock
registry without the idle ``Event`` per request (the ``Event`` peer's figure in details)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

from runtime import InteractionHub, InteractionRequest, InteractionResponse, Wake
from runtime.world.inputs import Inbox

from .harness import BENCHMARKS, Context, Result, benchmark, interleave_arms, paired_result
from .peers.dict_hub import DictHub, LeanDictHub

__all__ = ["hub_throughput", "run_threads"]

THREADS = 4


def run_threads(threads: int, work: Callable[[int], None]) -> float:
    """Run ``work(thread_index)`` on ``threads`` threads released together by a barrier;
    return the seconds from the release to the last thread's end."""
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(10.0)
            work(index)
        except BaseException as exc:  # surfaced below: a failed run must not look fast
            errors.append(exc)

    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait(10.0)
    started = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


def _ours(pairs: int) -> float:
    # The hub as a world sets it up: default deadlines (3600 s), a wake attached, and the
    # world's listener, which posts every opening and settlement to the inbox (nudging the
    # wake). Nothing drains the inbox here: a world's tick thread would, on another core.
    wake = Wake()
    inbox = Inbox(wake)
    hub = InteractionHub(listener=inbox.put)
    hub.attach_wake(wake)

    def work(index: int) -> None:
        agent = f"agent{index}"
        open_, answer = hub.open, hub.answer
        free_text, text = InteractionRequest.free_text, InteractionResponse.text
        for _ in range(pairs):
            request_id = open_(agent, free_text("", "go on?"))
            if not answer(text(request_id, "yes")):
                raise RuntimeError(f"answer of {request_id} refused")

    elapsed = run_threads(THREADS, work)
    assert hub.stats().answered == THREADS * pairs
    assert len(inbox.drain()) == 2 * THREADS * pairs  # opened + settled, every pair
    return THREADS * pairs / elapsed


def _baseline(pairs: int, events: bool = False) -> float:
    hub: DictHub | LeanDictHub = DictHub() if events else LeanDictHub()

    def work(index: int) -> None:
        agent = f"agent{index}"
        open_, answer = hub.open, hub.answer
        for _ in range(pairs):
            request_id = open_(agent, "go on?")
            if not answer(request_id, "yes"):
                raise RuntimeError(f"answer of {request_id} refused")

    elapsed = run_threads(THREADS, work)
    assert not hub.pending()
    return THREADS * pairs / elapsed


@benchmark(
    "hub_throughput",
    unit="pairs/s",
    target=">= 0.5",
    ours="InteractionHub open+answer pairs/s, 4 threads, wired as a world wires it",
    baseline="dict + lock per request (no idle Event), 4 threads",
)
def hub_throughput(ctx: Context) -> Result:
    pairs = ctx.pick(1_500, 10_000)  # per thread
    # Four threads on one GIL switch in bursts whose luck varies from run to run (either
    # side swings 2-4x between repetitions here), so take many short repetitions.
    reps = ctx.pick(3, 15)
    ours, base, with_event = interleave_arms(
        ctx,
        (lambda: _ours(pairs), lambda: _baseline(pairs), lambda: _baseline(pairs, events=True)),
        reps=reps,
    )
    event_ratios = [o / b for o, b in zip(ours, with_event, strict=True)]
    return paired_result(
        BENCHMARKS["hub_throughput"],
        ours,
        base,
        details={
            "threads": THREADS,
            "pairs": pairs,
            "listener": "inbox.put (as World wires it)",
            # The row's figure before issue 20: against a peer building an Event per open.
            "event_peer_pairs_per_s": statistics.median(with_event),
            "event_peer_ratio": statistics.median(event_ratios),
        },
    )
