"""The probe seam: what a live world's tick thread tells an observer as it happens.

A probe (the `Probe` protocol, defined beside the other tick-thread seams in ``state.py``)
sees the events an agent waits on, in the order the tick thread meets them: the inputs a
tick applies (outcomes, prompt events, commands), a turn starting and ending, work being
dispatched, and the tick's own duration. Telemetry (`runtime.telemetry`) is built on it;
the world room defines the protocol so that it never imports the rooms above it.

Probes run on the tick thread, under the world's lock, and only in live ticks: a replay
(and the replayed prefix of a resume) calls none, so it emits no spans and counts nothing
twice. With no probe attached each hook point costs one ``is None`` test. A probe that has no
use for ``ticked`` sets it to `ignore_ticks`: the tick then neither calls it nor, when no
other probe or the metrics want the tick's duration, reads the clock for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from runtime.world import sigint
from runtime.world.actions import Action
from runtime.world.report import TickReport
from runtime.world.state import AgentRecord, Probe

__all__ = [
    "PROBE_FACTORIES",
    "GuardedProbe",
    "Probe",
    "ProbeFanout",
    "fanout",
    "ignore_ticks",
    "ignores_ticks",
    "process_probes",
]

log = logging.getLogger("tickwork.world")

PROBE_FACTORIES: list[Callable[[], Probe | None]] = []
"""Called once for every new live world; each probe returned is attached to it.

A room above the world registers here (`runtime.telemetry` registers its tracing, which
returns a probe only when the host has configured an OpenTelemetry tracer provider), so a
world is instrumented the way the host set the process up without importing that room.
"""


def process_probes() -> list[Probe]:
    """The probes every factory in `PROBE_FACTORIES` gives a new live world."""
    return [probe for factory in PROBE_FACTORIES if (probe := factory()) is not None]


def ignore_ticks(self: object, report: TickReport, seconds: float) -> None:
    """A probe's ``ticked`` that does nothing (``ticked = ignore_ticks`` in its class): the
    tick calls it not at all, which saves a call and two clock reads a tick."""


def ignores_ticks(probe: Probe) -> bool:
    """Whether ``probe``'s class set ``ticked = ignore_ticks``."""
    return getattr(type(probe), "ticked", None) is ignore_ticks


def fanout(probes: list[Probe]) -> Probe | None:
    """The one probe that stands for ``probes``: None, the only one, or a `ProbeFanout`."""
    if not probes:
        return None
    return probes[0] if len(probes) == 1 else ProbeFanout(tuple(probes))


class ProbeFanout:
    """Several probes behind one, called in the order they were attached."""

    __slots__ = ("probes",)

    def __init__(self, probes: tuple[Probe, ...]) -> None:
        self.probes = probes

    def applied(self, inputs: list[tuple[int, object]]) -> None:
        for probe in self.probes:
            probe.applied(inputs)

    def turn_started(self, rec: AgentRecord) -> None:
        for probe in self.probes:
            probe.turn_started(rec)

    def turn_ended(self, rec: AgentRecord, outcome: str, message: str) -> None:
        for probe in self.probes:
            probe.turn_ended(rec, outcome, message)

    def dispatched(self, rec: AgentRecord, action: Action) -> None:
        for probe in self.probes:
            probe.dispatched(rec, action)

    def ticked(self, report: TickReport, seconds: float) -> None:
        for probe in self.probes:
            probe.ticked(report, seconds)


def guarded(probe: Probe) -> Probe:
    """``probe`` as the tick calls it: behind a `GuardedProbe`, unless its class says it
    guards itself (``guarded = True``, as telemetry's `Tracing` does)."""
    return probe if getattr(type(probe), "guarded", False) else GuardedProbe(probe)


class GuardedProbe:
    """A host's probe behind a guard, as tick observers are: what it raises is logged
    (with the traceback the first time) and the tick goes on. Unguarded, a probe raising
    in ``applied`` ended the tick with its inputs taken and never applied (the agents
    they spawned never came), and under ``world.start()`` the loop's thread with it; one
    raising in ``dispatched`` failed the agent. A ``KeyboardInterrupt`` on the main
    thread is raised again once the tick is over (`runtime.world.sigint`)."""

    __slots__ = ("failures", "probe")

    guarded = True

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.failures = 0

    def _failed(self, hook: str, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt):
            sigint.note_keyboard_interrupt()
        self.failures += 1
        if self.failures == 1:  # once with the traceback: a probe may raise every tick
            log.error("probe %r raised in %s", self.probe, hook, exc_info=exc)

    def applied(self, inputs: list[tuple[int, object]]) -> None:
        try:
            self.probe.applied(inputs)
        except BaseException as exc:
            self._failed("applied", exc)

    def turn_started(self, rec: AgentRecord) -> None:
        try:
            self.probe.turn_started(rec)
        except BaseException as exc:
            self._failed("turn_started", exc)

    def turn_ended(self, rec: AgentRecord, outcome: str, message: str) -> None:
        try:
            self.probe.turn_ended(rec, outcome, message)
        except BaseException as exc:
            self._failed("turn_ended", exc)

    def dispatched(self, rec: AgentRecord, action: Action) -> None:
        try:
            self.probe.dispatched(rec, action)
        except BaseException as exc:
            self._failed("dispatched", exc)

    def ticked(self, report: TickReport, seconds: float) -> None:
        try:
            self.probe.ticked(report, seconds)
        except BaseException as exc:
            self._failed("ticked", exc)
