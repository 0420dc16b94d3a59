"""Watching a world from the host: tick observers, probes, metrics, streamed deltas, tokens.

`Observing` is mixed into `World`. Everything here is for reading a run as it goes, never for
steering it: observers and probes run on the tick thread after (or during) live ticks, stream
hooks on the lane thread that reads a model's stream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from components import StatusKind
from runtime.hub import InteractionHub
from runtime.lane.tool_lane import ToolLane
from runtime.models.streaming import StreamHook, StreamHub
from runtime.models.usage import Usage, UsageMeter
from runtime.world.metrics import MetricsRecorder, WorldMetrics
from runtime.world.probe import Probe, fanout, guarded, ignores_ticks
from runtime.world.report import TickReport
from runtime.world.state import WorldState

__all__ = ["Observing"]


class Observing:
    """The host's view of a `World` (mixed into it); the world provides the attributes."""

    hub: InteractionHub
    lane: ToolLane
    inference_lane: ToolLane
    streams: StreamHub
    _usage: UsageMeter
    _state: WorldState
    _lock: threading.RLock
    _observers: list[Callable[[TickReport, list[tuple[int, object]]], object]]
    _input_observers: list[Callable[[TickReport, list[tuple[int, object]]], object]]
    _probes: list[Probe]
    _probe: Probe | None
    _tick_probe: Probe | None  # those of `_probes` that want `ticked` (see `_set_probe`)
    _recorder: MetricsRecorder | None
    _reconfigured: int  # see `TickMachine._reconfigured`

    def counts(self) -> dict[StatusKind, int]:
        raise NotImplementedError

    def on_stream(self, fn: StreamHook) -> None:
        """Call ``fn(agent_id, delta_text)`` as each streamed model delta arrives.

        ``fn`` runs on the lane thread that reads the stream: keep it quick and thread-safe.
        Deltas are not inputs (only the final reply is), so a replay calls no hook. One
        that raises is logged. ``world.streams.remove_hook(fn)`` stops the calls.
        """
        self.streams.add_hook(fn)

    def observe(
        self,
        fn: Callable[[TickReport, list[tuple[int, object]]], object],
        *,
        every_tick: bool = True,
    ) -> None:
        """Call ``fn(report, inputs)`` after every tick, on the tick thread.

        ``inputs`` are the tick's applied inputs as ``(seq, input)`` pairs (commands, tool
        and model outcomes, prompt events). Keep ``fn`` quick; one that raises is logged.
        With ``every_tick=False``, ``fn`` is called only after ticks that applied inputs:
        a hook that reads only the inputs then leaves ``run_until_idle`` free to skip
        through the ticks in which only sleepers and host code move (an every-tick
        observer makes each of those a whole tick, report and all).
        """
        # Copy on write, under the tick's lock: a tick calls the list it read, so an
        # observer that adds or removes one (itself, say) changes the ticks after it, and
        # never makes the tick in progress skip the observer after it.
        with self._lock:
            if every_tick:
                self._observers = [*self._observers, fn]
                self._reconfigured += 1  # a skip under way stops: this one sees each tick
            else:
                self._input_observers = [*self._input_observers, fn]

    def unobserve(self, fn: Callable[[TickReport, list[tuple[int, object]]], object]) -> bool:
        """Stop calling ``fn`` after ticks; returns whether it was observing.

        Safe from an observer (the tick in progress still calls the observers it started
        with) and from any thread.
        """
        with self._lock:
            for every_tick, observers in ((True, self._observers), (False, self._input_observers)):
                if fn in observers:
                    rest = list(observers)
                    rest.remove(fn)
                    if every_tick:
                        self._observers = rest
                    else:
                        self._input_observers = rest
                    return True
        return False

    def add_probe(self, probe: Probe) -> None:
        """Attach ``probe`` to the tick thread's events (`runtime.world.probe`), from the next
        live tick on. Replays call no probe."""
        with self._lock:
            self._probes.append(probe)
            self._set_probe()

    def remove_probe(self, probe: Probe) -> bool:
        """Detach ``probe``; returns whether it was attached."""
        with self._lock:
            try:
                self._probes.remove(probe)
            except ValueError:
                return False
            self._set_probe()
            return True

    def probes(self) -> tuple[Probe, ...]:
        """The attached probes, in the order they were attached."""
        with self._lock:
            return tuple(self._probes)

    def _set_probe(self) -> None:
        probes = self._probes
        self._probe = fanout([guarded(p) for p in probes])
        self._tick_probe = fanout([guarded(p) for p in probes if not ignores_ticks(p)])
        self._reconfigured += 1  # a skip under way stops (see `TickMachine._reconfigured`)

    def record_metrics(self) -> None:
        """Start filling the histograms and token counts of ``metrics()`` (idempotent).

        Off by default, so a world nobody watches pays nothing for them.
        """
        with self._lock:
            if self._recorder is None:
                self._recorder = MetricsRecorder()
                self._reconfigured += 1  # a skip under way stops: metrics see each tick

    def metrics(self) -> WorldMetrics:
        """A snapshot of the world's figures between two ticks (see `WorldMetrics`).

        Agents by status (O(agents)), lane counters and open prompts are read now; the
        histograms and token counts are those recorded since ``record_metrics()``.
        """
        lanes = {lane.name: lane.stats() for lane in (self.lane, self.inference_lane)}
        prompts_open = self.hub.stats().open
        # Outside the lock held below: `counts` counts outside its own (a scrape at 100k
        # agents held the world's lock ~12 ms, against an idle tick's ~0.08).
        agents = {kind.value: n for kind, n in self.counts().items()}
        with self._lock:
            recorder = self._recorder
            figures = recorder if recorder is not None else MetricsRecorder()
            return figures.snapshot(
                self._state.tick,
                self._state.now,
                agents=agents,
                lanes=lanes,
                prompts_open=prompts_open,
                recording=recorder is not None,
            )

    def token_usage(self) -> dict[str, Usage]:
        """Tokens in and out per model name, over the replies this world has received.

        A report of the live run (a replay calls no model, so it meters nothing).
        """
        return self._usage.totals()
