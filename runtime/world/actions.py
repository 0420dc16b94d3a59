"""What a behaviour yields, and the ``Turn`` it is given.

A behaviour is a generator function run once per turn: ``def worker(turn): ...``. It yields
actions and receives each action's result; returning ends the turn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar, overload

from components import Entry, InteractionRequest, ToolCall
from runtime.world.host_data import copy_component

__all__ = [
    "Action",
    "Ask",
    "Behavior",
    "CallTools",
    "HistoryView",
    "Join",
    "Sleep",
    "Spawn",
    "Think",
    "Turn",
    "TurnSource",
]


@dataclass(frozen=True, slots=True)
class Think:
    """Ask the model ``model`` to complete ``prompt``; the result is a ``ModelReply``."""

    prompt: str
    model: str = "default"


@dataclass(frozen=True, slots=True, init=False)
class CallTools:
    """Run tool calls as one batch; the result is one ``ToolResult`` per call, in call order."""

    calls: tuple[ToolCall, ...]

    def __init__(self, *calls: ToolCall) -> None:
        for call in calls:
            if not isinstance(call, ToolCall):
                raise TypeError(f"CallTools takes ToolCall objects, got {call!r}")
        ids = [call.id for call in calls]
        if len(set(ids)) != len(ids):
            raise ValueError(f"tool call ids must be unique within a batch, got {ids}")
        object.__setattr__(self, "calls", calls)


@dataclass(frozen=True, slots=True)
class Ask:
    """Put ``request`` to a person; the result is the ``InteractionResponse``.

    A cancelled or expired prompt gives the neutral response (``value == ""``).
    """

    request: InteractionRequest


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait until ``world.now`` has passed now + ``seconds``; the result is None.

    ``Sleep(0)`` resumes at the next tick.
    """

    seconds: float


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start a child agent running ``behavior`` on ``message``; the result is its id."""

    behavior: Behavior | str
    message: Any = None
    name: str = ""


@dataclass(frozen=True, slots=True, init=False)
class Join:
    """Wait until every agent in ``agent_ids`` is terminal; the result is their results,
    in the order given (None for an agent that ended in ERROR or CANCELLED)."""

    agent_ids: tuple[str, ...]

    def __init__(self, *agent_ids: str) -> None:
        object.__setattr__(self, "agent_ids", tuple(agent_ids))


C = TypeVar("C")

Action: TypeAlias = Think | CallTools | Ask | Sleep | Spawn | Join
Behavior: TypeAlias = Callable[["Turn"], Generator[Any, Any, Any]]


class HistoryView(Sequence[Entry]):
    """A read-only view of an agent's history (no copy is made)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = entries

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Entry]: ...
    def __getitem__(self, index: int | slice) -> Entry | Sequence[Entry]:
        if isinstance(index, slice):
            return tuple(self._entries[index])
        return self._entries[index]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __repr__(self) -> str:
        return f"HistoryView({self._entries!r})"


class TurnSource(Protocol):
    """Where a ``Turn`` reads the world's time and the agent's random stream."""

    @property
    def now(self) -> float: ...

    def agent_rng(self, rec: Any) -> random.Random: ...


class Turn:
    """What a behaviour is given for one turn: who it is, the message, and the world.

    ``history`` is read-only; ``rng`` is the agent's own seeded stream (same seed, same
    draws); ``now`` is the world's time at the current step.
    """

    __slots__ = ("_rec", "_source", "agent_id", "generation", "history", "message")

    def __init__(
        self,
        agent_id: str,
        message: Any,
        history: HistoryView,
        generation: int,
        source: TurnSource,
        rec: Any = None,
    ) -> None:
        self.agent_id = agent_id
        self.message = message
        self.history = history
        self.generation = generation
        self._source = source
        self._rec = rec

    @property
    def now(self) -> float:
        """The world's time at this step (virtual under a ``ManualClock``)."""
        return self._source.now

    @property
    def rng(self) -> random.Random:
        """The agent's own random stream, derived from the world's seed and the agent id."""
        return self._source.agent_rng(self._rec)

    def get(self, component_type: type[C]) -> C:
        """A copy of the agent's own host component of that type (read-only: change it
        through an action, and a host system).

        Raises:
            KeyError: the agent has no such component.
        """
        found = self.try_get(component_type)
        if found is None:
            raise KeyError(f"agent {self.agent_id} has no {component_type.__name__} component")
        return found

    def try_get(self, component_type: type[C]) -> C | None:
        """A copy of the agent's own host component of that type, or None."""
        comps = getattr(self._rec, "components", None)
        found = None if comps is None else comps.get(component_type)
        return None if found is None else copy_component(found)

    def __repr__(self) -> str:
        return f"Turn(agent_id={self.agent_id!r}, generation={self.generation})"
