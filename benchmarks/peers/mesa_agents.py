"""Mesa 3: a model of N agents stepped with ``self.agents.do("step")`` once per tick.

Mesa 3's idiom for "advance every agent one step": ``Model.step`` calls
``self.agents.do("step")`` (the ``AgentSet`` replaced the old schedulers). Each agent's
``step`` is trivial (one counter increment), as tickwork's agents take one trivial step
(yielding a fresh ``Sleep(0)``) per tick. The model and its agents are built before the
clock starts, as tickwork's agents are spawned first.

Mesa is optional (the ``bench`` extra): `available` says whether it imports.
"""

from __future__ import annotations

from typing import Any

from ._timing import Stopwatch

__all__ = ["MesaRig", "available"]


def available() -> str | None:
    """None when Mesa 3 imports, else why not (the row is skipped with this message)."""
    try:
        import mesa
    except ImportError as exc:
        return f"mesa is not installed ({exc}); pip install -e '.[bench]'"
    major = int(str(mesa.__version__).split(".")[0])
    if major < 3:
        return f"mesa {mesa.__version__} is installed; this row needs Mesa 3 (AgentSet.do)"
    return None


class MesaRig:
    """A Mesa model of ``n`` trivial agents; `run(rounds)` steps the model ``rounds`` times."""

    def __init__(self, n: int) -> None:
        import mesa

        class Walker(mesa.Agent):  # type: ignore[misc]
            def __init__(self, model: Any) -> None:
                super().__init__(model)
                self.steps = 0

            def step(self) -> None:
                self.steps += 1

        class Crowd(mesa.Model):  # type: ignore[misc]
            def __init__(self, n: int) -> None:
                super().__init__(seed=20)
                for _ in range(n):
                    Walker(self)

            def step(self) -> None:
                self.agents.do("step")

        self.model = Crowd(n)
        self.n = n

    def run(self, rounds: int) -> Stopwatch:
        """Step the model ``rounds`` times; return the time it took."""
        step = self.model.step
        with Stopwatch() as sw:
            for _ in range(rounds):
                step()
        return sw
