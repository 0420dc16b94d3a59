"""External inputs: everything that enters a world between ticks.

Every input gets a sequence number when it arrives (``Inbox.put``) and is applied at the
start of the next tick, in sequence order; the journal records each applied input with its
tick, which is all a replay needs. Besides the commands below, tool and model outcomes
(``ToolOutcome``) and the hub's change events (``PromptOpened``, ``PromptSettled``) are
inputs too.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

from components._frozen import frozen_builder
from runtime.wake import Wake

__all__ = [
    "COMMANDS",
    "AddEntity",
    "CancelAgent",
    "ComponentData",
    "EffectFailed",
    "ForgetAgent",
    "Inbox",
    "InterruptAgent",
    "PauseAgent",
    "ResumeAgent",
    "SendMessage",
    "SpawnAgent",
    "build_spawn",
]


@dataclass(frozen=True, slots=True)
class SpawnAgent:
    """Create agent ``agent_id`` running the behaviour named ``behavior``.

    ``components`` are host components put on the agent's entity (dataclass instances,
    or `ComponentData` decoded from a journal and resolved when the input is applied).
    """

    agent_id: str
    behavior: str
    message: Any = None
    name: str = ""
    interactive: bool = False
    components: tuple[Any, ...] = ()


# A `SpawnAgent` from all six fields, positionally (`frozen_builder`): ~0.4 us against the
# class's ~1.07 us, on every spawn (under the ids lock) and every spawn a replay decodes.
# For the runtime's own use; not exported from the package.
build_spawn = frozen_builder(SpawnAgent)


@dataclass(frozen=True, slots=True)
class AddEntity:
    """Create host entity ``entity`` (its id minted at the ``add_entity`` call)."""

    entity: int
    components: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ComponentData:
    """A host component as a journal holds it: its type's name and its fields.

    Decoding a journal makes these, never objects of the named type: the world turns them
    into components when the input is applied, and only for types it knows (registered, or
    importable by name), so a journal alone never runs code.
    """

    type_name: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SendMessage:
    """Give an agent its next message: starts a turn, or queues behind the current one."""

    agent_id: str
    message: Any


@dataclass(frozen=True, slots=True)
class PauseAgent:
    """Stop stepping an agent; outcomes that land meanwhile are held."""

    agent_id: str


@dataclass(frozen=True, slots=True)
class ResumeAgent:
    """Undo a pause and apply what was held."""

    agent_id: str


@dataclass(frozen=True, slots=True)
class CancelAgent:
    """End an agent for good: its work is cancelled, prompts settled, children cancelled."""

    agent_id: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class InterruptAgent:
    """Abandon the agent's current turn, keeping its history.

    ``partial`` is the text a streaming model call ``ref`` had produced when the interrupt
    stopped its stream (None when no stream was open): it travels with the interrupt, so
    the history keeps it and a replay, which streams nothing, keeps the same text.
    """

    agent_id: str
    ref: str = ""
    partial: str | None = None


@dataclass(frozen=True, slots=True)
class ForgetAgent:
    """Release a finished agent entirely (entity, record, history): ``world.forget``.

    ``at_once``: the live run released it at the call, between two ticks, so a replay
    releases it as this input is applied, at the start of its tick, not at the tick's end
    (where a release asked for during a tick happens, live and replayed): a join or a host
    system of that tick saw the agent in the replay only. Journals written before it
    existed hold none (False).
    """

    agent_id: str
    at_once: bool = False


@dataclass(frozen=True, slots=True)
class EffectFailed:
    """Work the tick thread asked for could not even start (unknown model, clashing
    prompt id); ``ref`` is the id the agent awaits. Travels as an input so a replay,
    which starts no work, sees the same failure at the same tick."""

    agent_id: str
    ref: str
    error: str
    error_type: str = "TickworkError"  # the name of a class in runtime.errors


COMMANDS: tuple[type, ...] = (
    SpawnAgent,
    AddEntity,
    SendMessage,
    PauseAgent,
    ResumeAgent,
    CancelAgent,
    InterruptAgent,
    ForgetAgent,
)
"""The inputs `systems.apply_inputs.ApplyInputs` applies; every other input is an outcome it
sets aside for `CollectOutcomes` (tool and model outcomes, prompt events, `EffectFailed`)."""


class Inbox:
    """A thread-safe queue of inputs, numbered on arrival; putting nudges the wake.

    ``put`` takes no lock: the number comes from an ``itertools.count`` and the item goes
    on a ``deque``, each one atomic C call. A lock here was held across a GIL switch by
    whichever of 64 lane workers got preempted inside it, and the tick thread queued behind
    it for milliseconds (a convoy measured by the vs_asyncio benchmark). Two puts racing
    may append out of number order, so ``drain`` sorts, and hands out only the unbroken
    run of numbers: an input whose number was taken but which is not appended yet holds
    the later ones back until the next drain, so inputs are applied in sequence order
    across ticks too. Only the tick thread drains.
    """

    __slots__ = ("_arrived", "_held", "_next", "_numbers", "_wake")

    def __init__(self, wake: Wake | None = None) -> None:
        self._numbers = itertools.count(1)
        self._arrived: deque[tuple[int, object]] = deque()
        # Drained but held back behind a missing number (tick thread only), sorted.
        self._held: list[tuple[int, object]] = []
        self._next = 1  # the number the next drained input must have (tick thread only)
        self._wake = wake

    def put(self, item: object) -> int:
        """Queue ``item`` and return its sequence number. Safe from any thread."""
        # The number is taken by the loop's FOR_ITER, not a call: the interpreter looks for
        # signals and GIL requests after a call returns, not after FOR_ITER, so nothing runs
        # between taking the number and the append's end. With `next()`, a Ctrl-C landing
        # there (the host's `spawn` or `send` on the main thread) burned a number never
        # appended, and `drain` held every later input back for good.
        for seq in self._numbers:  # noqa: B007 - one number, see above
            break
        self._arrived.append((seq, item))
        if self._wake is not None:
            self._wake.notify()
        return seq

    def drain(self, limit: int | None = None) -> list[tuple[int, object]]:
        """Take every queued input (at most ``limit`` of them), in sequence order, without
        gaps; inputs left over stay first in line for the next drain.

        A limit keeps one tick from applying a flood of inputs at once (10,000 spawns, say)
        while lanes sit idle until it ends: the flood goes out in slices, tick by tick.

        Raises:
            ValueError: ``limit`` is below 1.
        """
        if limit is not None and limit < 1:
            raise ValueError(f"`limit` must be >= 1 or None, got {limit}")
        arrived, items = self._arrived, self._held
        if not items and len(arrived) <= 1:  # the wake-up path: one answer, one outcome
            if not arrived:
                return []
            entry = arrived.popleft()
            if entry[0] == self._next:
                self._next += 1
                return [entry]
            self._held = [entry]  # a put that took an earlier number is not in yet
            return []
        # Only as many as are there now: puts that land meanwhile wait for the next drain
        # (a loop until IndexError paid for raising it on every drain).
        popleft = arrived.popleft
        for _ in range(len(arrived)):
            items.append(popleft())
        if not items:
            return []  # never `_held` itself: the caller keeps what it is handed
        # Already in order unless two puts raced. Numbers are unique, so comparing the
        # tuples in C never reaches the items: no key function called per item.
        items.sort()
        expected = self._next
        count = 0
        bound = len(items) if limit is None else min(limit, len(items))
        for seq, _item in items:
            if seq != expected or count == bound:
                break
            expected += 1
            count += 1
        self._next = expected
        if count == len(items):
            self._held = []
            return items
        self._held = items[count:]
        return items[:count]

    def queued(self) -> list[tuple[int, object]]:
        """The inputs put and not yet handed out, in sequence order (a copy). Call it
        under the lock the drains are taken under (the world's, `World._lock`), or an
        input being drained is in neither list."""
        return sorted([*self._held, *self._arrived])

    def __len__(self) -> int:
        return len(self._arrived) + len(self._held)
