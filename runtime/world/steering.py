"""Whether a command would change nothing, counting the commands queued before it.

A command is an input the next tick applies (`systems.apply_inputs`), so a judgement by an
agent's status alone misses the pauses, resumes and cancels posted before it and not yet
applied, by the host or by a control client: a ``resume`` right after a ``pause`` found the
agent not paused yet. `no_effect` follows those commands as `ApplyInputs` will apply them,
over the statuses of the agents they can change there: the agent's subtree (walked by
`subtree`, as the commands walk it) and the agents above it (followed by ordinal, as the
world links them: never to a new agent under a released one's id).

It is sure only of what the inputs themselves do. A cancel's reach below its agent comes
later in the tick (its abort), so it is not followed: a command that acts before it is
taken, though the abort may undo what it did. `World.no_effect` reads the world and the
queue under the tick's lock and calls this.
"""

from __future__ import annotations

from collections.abc import Sequence

from components import StatusKind
from runtime.world.inputs import CancelAgent, PauseAgent, ResumeAgent, SpawnAgent
from runtime.world.state import AgentRecord, WorldState
from systems.apply_inputs import subtree

__all__ = ["COMMAND_OPS", "no_effect"]

COMMAND_OPS = ("send", "pause", "resume", "cancel", "interrupt")
"""The commands `no_effect` judges (the world's methods of those names)."""

# An agent as the commands find it: what `PauseAgent`, `ResumeAgent` and `CancelAgent` read.
_LIVE, _PAUSED, _ENDED = 0, 1, 2
_STEERING = frozenset((PauseAgent, ResumeAgent, CancelAgent))  # the inputs `_follow` follows


def _kind(rec: AgentRecord) -> int:
    kind = rec.status.kind
    return _ENDED if kind.is_terminal else _PAUSED if kind is StatusKind.PAUSED else _LIVE


def _above(state: WorldState, rec: AgentRecord) -> list[AgentRecord]:
    """The held agents above ``rec``, followed by ordinal through released ones."""
    found = []
    records = state.records
    ordinal, parent = rec.ordinal, rec.agent.parent
    while (link := state.parent_link(ordinal, parent)) is not None:
        held = records.get(parent) if parent is not None else None
        if held is not None and held.ordinal == link[0]:
            found.append(held)
        ordinal, parent = link
    return found


def no_effect(
    state: WorldState, queued: Sequence[tuple[int, object]], agent_id: str, op: str
) -> str | None:
    """Why ``op`` (one of `COMMAND_OPS`) of ``agent_id`` would change nothing once the
    inputs ``queued`` (in sequence order) are applied, or None when it may change
    something. ``agent_id`` is held in ``state`` or has its spawn among ``queued``."""
    rec = state.records.get(agent_id)
    status = StatusKind.IDLE if rec is None else rec.status.kind
    name = f"agent {agent_id!r}"
    if op not in ("pause", "resume"):
        # A send, cancel or interrupt acts on the agent alone, unless it has ended: only
        # a cancel of its own ends it among the inputs (one above ends it in the abort).
        mine = _LIVE if rec is None else _kind(rec)
        for _seq, item in queued:
            kind = item.__class__
            if kind is not CancelAgent and kind is not SpawnAgent:
                continue
            if item.agent_id == agent_id:  # type: ignore[attr-defined]
                if kind is SpawnAgent:
                    if rec is None:
                        mine = _LIVE  # it exists from here: commands before it were not its
                else:
                    mine = _ENDED
        if mine != _ENDED:
            return None
        if status.is_terminal:
            return f"{name} is {status.value}: {op} does nothing"
        if op == "cancel":
            return f"{name} has a cancel queued already"
        return f"{name} has a cancel queued: {op} does nothing"
    # Nothing queued steers anyone, and the op changes the agent itself: said without a
    # walk of its subtree (under the tick's lock: ~85 ms with 100,000 agents below).
    steered = any(item.__class__ in _STEERING for _seq, item in queued)
    if rec is not None and not steered and _kind(rec) == (_LIVE if op == "pause" else _PAUSED):
        return None
    # What each agent that matters here is, by id: the agent's subtree and those above it.
    found: dict[str, int] = {}
    below = [agent_id]
    if rec is not None:
        tree = subtree(state, rec)
        below = [other.id for other in tree]
        for other in (*tree, *_above(state, rec)):
            found[other.id] = _kind(other)
    said = _follow(state, queued, agent_id, found, set(below))
    mine = found.get(agent_id, _LIVE)
    if op == "pause":
        if any(found.get(each, _LIVE) == _LIVE for each in below):
            return None
    else:
        undoes = mine == _PAUSED or (mine == _ENDED and state.journal_format >= 3)
        if undoes and any(found.get(each) == _PAUSED for each in below):
            return None
    # Nothing it would change: say why, as the agent is now or as the queue leaves it.
    if mine == _ENDED and not status.is_terminal:
        return f"{name} has a cancel queued: {op} does nothing"
    if said == op:
        return f"{name} has a {op} queued already"
    if mine == _ENDED:
        return f"{name} is {status.value}: {op} does nothing"
    if op == "pause":
        return f"{name} is paused already"
    return f"{name} is {status.value}, not paused: nothing to resume"


def _follow(
    state: WorldState,
    queued: Sequence[tuple[int, object]],
    agent_id: str,
    found: dict[str, int],
    below: set[str],
) -> str:
    """Follow the queued pauses, resumes and cancels over ``found`` as `ApplyInputs` will
    apply them (``agent_id``'s spawn, if among them, makes it); returns the op of the last
    pause or resume that changed an agent of ``below`` ("" if none did)."""
    reach = _Reach(state, found)
    said = ""
    for _seq, item in queued:
        kind = item.__class__
        if kind is SpawnAgent and item.agent_id == agent_id and agent_id not in state.records:  # type: ignore[attr-defined]
            found[agent_id] = _LIVE  # it exists from here: commands before it were not its
            continue
        if kind is not PauseAgent and kind is not ResumeAgent and kind is not CancelAgent:
            continue
        target: str = item.agent_id  # type: ignore[attr-defined]
        now = found.get(target)
        if now is None:
            continue  # it changes nobody that matters here
        if kind is CancelAgent:
            found[target] = _ENDED
            continue
        if kind is PauseAgent:
            before, after, done = _LIVE, _PAUSED, "pause"
        elif now == _PAUSED or (now == _ENDED and state.journal_format >= 3):
            before, after, done = _PAUSED, _LIVE, "resume"
        else:
            continue  # a resume of an agent neither paused nor (from format 3) ended
        for each in reach.of(target):
            if found[each] == before:
                found[each] = after
                if each in below:
                    said = done
    return said


class _Reach:
    """Which of the agents that matter (``found``) a pause or resume of each one reaches:
    its subtree as `subtree` walks it, among them. From format 3, with agents released
    below others, that walk scans every record (`WorldState.cut_off`), so the lines up
    from each agent are followed once instead, by ordinal as `cut_off` follows them."""

    __slots__ = ("_below", "_found", "_made", "_state")

    def __init__(self, state: WorldState, found: dict[str, int]) -> None:
        self._state = state
        self._found = found
        self._made: dict[str, list[str]] = {}
        self._below: dict[int, list[str]] | None = None

    def of(self, target: str) -> list[str]:
        """The agents among ``found`` a pause or resume of ``target`` reaches."""
        made = self._made.get(target)
        if made is not None:
            return made
        state, found = self._state, self._found
        held = state.records.get(target)
        if held is None:
            made = [target]  # a spawn pending: nobody below it yet
        elif state.journal_format >= 3 and state.released_up:
            if self._below is None:
                self._below = self._lines()
            made = [target, *self._below.get(held.ordinal, ())]
        else:  # `subtree` walks `children` alone: cheap
            made = [other.id for other in subtree(state, held) if other.id in found]
        self._made[target] = made
        return made

    def _lines(self) -> dict[int, list[str]]:
        """Each ordinal above an agent of ``found`` (held) -> the agents below it."""
        state = self._state
        below: dict[int, list[str]] = {}
        for agent in self._found:
            rec = state.records.get(agent)
            if rec is None:
                continue
            link = state.parent_link(rec.ordinal, rec.agent.parent)
            while link is not None:
                below.setdefault(link[0], []).append(agent)
                link = state.parent_link(*link)
        return below
