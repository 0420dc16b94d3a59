"""The recorder seam: what a world writes its run to (a `runtime.Journal` is one).

The world room defines the protocol so that it never imports the journal room above it: the
journal knows worlds (it replays them), a world only knows that something records it.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Recorder"]


class Recorder(Protocol):
    """Something that records a run: a header once, then every tick, then a close."""

    def begin(self, settings: dict[str, Any]) -> None:
        """Record the world's settings (seed, clock, capacities, tools, models)."""
        ...

    def record_tick(
        self,
        tick: int,
        now: float,
        inputs: list[tuple[int, object]],
        digest: str,
        changed: list[tuple[str, str]],
    ) -> None:
        """Record one tick: its time, its applied inputs, its digest, the changed agents
        (and host entities: ``"entity 7"``), each as its id and the canonical JSON text of
        its digest fields (`runtime.world.digest.agent_text`)."""
        ...

    def close(self) -> None:
        """Flush and close; called once by the world's ``close``."""
        ...
