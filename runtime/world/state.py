"""The tick thread's state: agent records, the per-phase index sets, and the effects seam.

Only the tick thread touches a ``WorldState`` (other threads go through the inbox). Systems
read and change it; the world owns it. A tick costs O(what changed): every set here holds
only the agents that have something to do, so an idle agent costs nothing per tick.
"""

from __future__ import annotations

import heapq
import random
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from components import (
    Agent,
    AgentSpec,
    Entry,
    History,
    InteractionKind,
    InteractionRequest,
    Status,
    StatusKind,
    ToolCall,
    ToolResult,
    TurnState,
)
from runtime.cancel import CancelToken
from runtime.models.base import ModelRequest
from runtime.world.actions import Action
from runtime.world.behaviors import BehaviorRegistry
from runtime.world.report import TickReport

__all__ = [
    "JOURNAL_FORMAT",
    "AgentRecord",
    "Effects",
    "Hold",
    "PendingBatch",
    "Probe",
    "Throw",
    "WorldState",
]

JOURNAL_FORMAT = 4
"""The journal format whose rules a new world's ticks follow (`runtime.journal` writes it
in every journal's header). A replay or a resume follows its journal's format
(``WorldState.journal_format``), so journals of every format replay as recorded.

- Format 4: an entity's host component types that share a ``__qualname__`` (two modules'
  ``Position``) are named in full in its digest fields, ``module:qualname``
  (`runtime.world.host_data.flatten`); format 3 named both by the short name, so one's
  fields overwrote the other's and a change to the overwritten one went into no digest.
  Entities without such a pair have the same fields in both formats. And a ``Sleep``
  longer than a float can hold (``Sleep(10**400)``) fails its agent naming the action
  and the value (`systems.step_behaviors.fail_step`), where format 3 wrote Python's
  ``StepBehaviors: OverflowError: int too large to convert to float``.
- Format 3: cancelling an agent also cancels the live descendants of its finished
  children (format 2 stopped at a finished child), and pause, resume and cancel reach the
  descendants below an agent released since (`WorldState.cut_off`); resuming a finished
  agent resumes its subtree, as pausing it paused it (format 2 resumed only a paused
  agent's); and a
  message or output JSON cannot hold is written in history the same in every process
  (a set's items sorted, a dataclass as its fields, an enum as its value, an object whose
  text holds an address by its type's name: `systems.lifecycle.history.as_text`; format
  2 wrote Python's text of it: a set of strings in hash order, an object with its
  address).
- Format 2 takes a resource's actions in the step, a ``Use``'s hold being a sleep whose
  wake-up gives the slot back (`runtime.world.resource_steps`); format 1 took them as host
  actions in dispatch."""


class Effects(Protocol):
    """The side effects the tick thread asks for. Live: lanes and hub. Replay: nothing,
    because every outcome of these effects arrives from the journal as an input."""

    def think(self, agent_id: str, ref: str, request: ModelRequest, cancel: Any) -> None:
        """Run a model call on the inference lane; its outcome arrives as an input."""

    def run_tools(self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: Any) -> None:
        """Run a batch of tool calls on the tool lane; its outcome arrives as an input."""

    def open_prompt(self, agent_id: str, request: InteractionRequest) -> None:
        """Open a prompt in the hub; its open and settlement arrive as inputs."""

    def cancel_prompt(self, request_id: str) -> None:
        """Settle a prompt as cancelled (the settlement arrives as an input)."""

    def cancel_prompts_of(self, agent_id: str) -> None:
        """Settle every open prompt of an agent as cancelled."""

    def expire_prompts(self, now: float) -> None:
        """Settle every prompt whose deadline has passed."""

    def requires_approval(self, tool: str) -> bool:
        """Whether calls of ``tool`` need a person's approval first."""


class Probe(Protocol):
    """Something that watches a live world's tick thread (see `runtime.world.probe`).

    ``turn_ended``'s ``outcome`` is ``"ok"`` (the behaviour returned), ``"interrupted"``,
    ``"error"`` or ``"cancelled"``; it may come for an agent with no turn open (an idle
    agent cancelled, a turn already ended), which a probe ignores. Keep every method quick.
    What a method raises is logged and the tick goes on (`runtime.world.probe.guarded`).
    A probe may also have a ``close()``, called once when its world closes (telemetry's
    tracing ends the spans still open there).
    """

    def applied(self, inputs: list[tuple[int, object]]) -> None:
        """The tick's inputs (never empty), in sequence order, before any system runs."""

    def turn_started(self, rec: AgentRecord) -> None:
        """A turn of ``rec`` starts (``rec.turn.generation`` is its number)."""

    def turn_ended(self, rec: AgentRecord, outcome: str, message: str) -> None:
        """The current turn of ``rec`` ends with ``outcome`` (``message``: an error's text)."""

    def dispatched(self, rec: AgentRecord, action: Action) -> None:
        """``action`` (a ``Think``, ``CallTools`` or ``Ask``) went out: ``rec.turn`` holds
        its id (``inflight``) and, for tool calls, the ``PendingBatch`` (``pending``)."""

    def ticked(self, report: TickReport, seconds: float) -> None:
        """The tick ended after ``seconds`` of wall time."""


@dataclass(frozen=True, slots=True)
class Throw:
    """A ``send_value`` that is thrown into the behaviour instead of sent."""

    error: BaseException


class Hold:
    """What a turn parked on a resource awaits (its ``TurnState.pending``): a place in a
    queue, or a hold that is a sleep (`runtime.world.resource_steps`).

    The step ends a hold at its sleep's wake-up, before any agent of that tick steps
    (``end`` gives the slot back and returns what the behaviour is sent); the lifecycle
    calls ``cut`` when the turn ends any other way (interrupt, cancel, failure), so
    the slot or the place in the queue is given up.
    """

    __slots__ = ()

    def end(self, state: WorldState) -> Any:
        """The hold's time is over: give it back; returns the value sent in."""
        raise NotImplementedError

    def cut(self, state: WorldState) -> None:
        """The turn that held or waited ended some other way."""
        raise NotImplementedError


class PendingBatch:
    """A ``CallTools`` in progress: approvals still open, and results known so far."""

    __slots__ = ("approvals", "calls", "ref", "results")

    def __init__(self, ref: str, calls: tuple[ToolCall, ...]) -> None:
        self.ref = ref
        self.calls = calls
        self.approvals: dict[str, str] = {}  # open approval prompt id -> call id
        self.results: dict[str, ToolResult] = {}  # call id -> result (denials, outcomes)

    def final(self) -> list[ToolResult]:
        """One result per call, in call order (rule: every call gets exactly one)."""
        missing = "no result was reported for this call"
        return [self.results.get(c.id) or ToolResult(c.id, error=missing) for c in self.calls]


class AgentRecord:
    """The tick thread's handle on one agent: its components and its runtime extras.

    Components live in esper; this record holds references to the two the hot path reads
    (``status``, ``turn``) and the entity's own component dict for the rest, so nothing
    queries esper by id. Extras are made lazily (a ``random.Random`` alone is ~2.5 KB),
    because a world may hold 100k mostly idle agents.
    """

    __slots__ = (
        "_comps",
        "_digested",
        "_extras",
        "fn",
        "id",
        "model_calls",
        "ordinal",
        "prompts",
        "result",
        "sleep_seq",
        "status",
        "token",
        "turn",
    )

    def __init__(self, ordinal: int, comps: dict[type, Any], fn: Callable[..., Any]) -> None:
        """``ordinal`` is the esper entity id too; ``comps`` is that entity's component
        dict (esper's own, not a copy: a dict per agent would cost more than it saves),
        holding at least ``Agent``, ``AgentSpec``, ``Status``, ``TurnState`` and ``History``.
        """
        self.ordinal = ordinal
        # `agent`, `spec` and `history` are read from here: three references fewer in
        # every record (16 B an agent net), for a dict lookup where they are read (a turn's
        # end, a history entry, a digest; never a step). Agent components are never
        # replaced on their entity, so the dict always holds the record's own.
        self._comps = comps
        self.id = comps[Agent].id
        self.status: Status = comps[Status]
        self.turn: TurnState = comps[TurnState]
        self.fn = fn
        # The current turn's cancel token, made when the turn first hands out work
        # (`turn_token`) and dropped at the next turn's start: an interrupt that landed
        # while the agent was idle cannot eat the next turn. Fired by an interrupt, a
        # cancel, the agent's end and the world's close. Held here, not in an
        # `InterruptHandle`: one object fewer per agent with work in flight.
        self.token: CancelToken | None = None
        # The rarely set extras (rng, mailbox, paused_from, holding, children, components):
        # one side object, made by the first store of a value, None until then (six slots
        # an agent that never uses them did not pay: 48 B of each record at 100k agents).
        self._extras: _Extras | None = None
        # Open prompts of this agent, as mirrored from the hub's change events (inputs):
        # None while there is none, the request itself while there is one (the hub keeps
        # it alive anyway: a dict per waiting agent cost ~180 B), a dict id -> kind while
        # there are two or more. Read it through `prompt_ids`/`prompt_kinds`; change it
        # through `add_prompt`/`drop_prompt`. Falsy exactly when no prompt is open.
        self.prompts: InteractionRequest | dict[str, InteractionKind] | None = None
        self.result: Any = None
        # What the digest last folded of this agent (see `digest`, `hist_hash`): None
        # until a digest is first taken, which a world that tracks none never does (three
        # fields of every record, 24 B an agent, in one side object that only it pays).
        self._digested: _Digested | None = None
        self.sleep_seq = 0
        # Model calls dispatched for the agent so far (`ModelRequest.call`); a replay, and
        # so a resumed run, counts them again as it dispatches.
        self.model_calls = 0

    def __repr__(self) -> str:
        return f"<AgentRecord {self.id} {self.status.kind.value} {self.turn.phase.value}>"

    @property
    def entity(self) -> int:
        """The agent's esper entity id: its ordinal (esper hands ids out in creation order
        and never again, so one int serves both)."""
        return self.ordinal

    @property
    def agent(self) -> Agent:
        """The agent's ``Agent`` component."""
        agent: Agent = self._comps[Agent]
        return agent

    @property
    def spec(self) -> AgentSpec:
        """The agent's ``AgentSpec`` component."""
        spec: AgentSpec = self._comps[AgentSpec]
        return spec

    @property
    def history(self) -> History:
        """The agent's ``History`` component."""
        history: History = self._comps[History]
        return history

    @property
    def digest(self) -> int:
        """The digest of this agent's fields when the world's digest last folded them."""
        digested = self._digested
        return 0 if digested is None else digested.digest

    @digest.setter
    def digest(self, value: int) -> None:
        self._digest_state().digest = value

    @property
    def hist_hash(self) -> bytes:
        """The chained hash of the first ``hist_hashed`` history entries; entries are only
        ever appended, so the rest are folded in lazily (runtime.world.digest.history_hash)."""
        digested = self._digested
        return b"" if digested is None else digested.hist_hash

    @hist_hash.setter
    def hist_hash(self, value: bytes) -> None:
        self._digest_state().hist_hash = value

    @property
    def hist_hashed(self) -> int:
        """How many history entries ``hist_hash`` covers."""
        digested = self._digested
        return 0 if digested is None else digested.hist_hashed

    @hist_hashed.setter
    def hist_hashed(self, value: int) -> None:
        self._digest_state().hist_hashed = value

    def _digest_state(self) -> _Digested:
        digested = self._digested
        if digested is None:
            digested = self._digested = _Digested()
        return digested

    def _extra(self) -> _Extras:
        extras = self._extras
        if extras is None:
            extras = self._extras = _Extras()
        return extras

    def drop_ended_extras(self) -> None:
        """Forget what a finished agent keeps no more: its rng, mailbox and ``paused_from``
        (three property stores in one call, and none when no extra was ever made)."""
        extras = self._extras
        if extras is not None:
            extras.rng = extras.mailbox = extras.paused_from = None

    @property
    def rng(self) -> random.Random | None:
        """The agent's random stream once made (see ``WorldState.agent_rng``)."""
        extras = self._extras
        return None if extras is None else extras.rng

    @rng.setter
    def rng(self, value: random.Random | None) -> None:
        if value is not None or self._extras is not None:
            self._extra().rng = value

    @property
    def mailbox(self) -> deque[Any] | None:
        """Messages queued for the next turns (None: none ever queued)."""
        extras = self._extras
        return None if extras is None else extras.mailbox

    @mailbox.setter
    def mailbox(self, value: deque[Any] | None) -> None:
        if value is not None or self._extras is not None:
            self._extra().mailbox = value

    @property
    def paused_from(self) -> StatusKind | None:
        """The status a paused agent would have (None unless paused)."""
        extras = self._extras
        return None if extras is None else extras.paused_from

    @paused_from.setter
    def paused_from(self, value: StatusKind | None) -> None:
        if value is not None or self._extras is not None:
            self._extra().paused_from = value

    @property
    def holding(self) -> list[tuple[int, object]] | None:
        """Outcomes and settlements that landed while paused, whole and in arrival order:
        none of it (history, result, status) is applied until resume (None: nothing held)."""
        extras = self._extras
        return None if extras is None else extras.holding

    @holding.setter
    def holding(self, value: list[tuple[int, object]] | None) -> None:
        if value is not None or self._extras is not None:
            self._extra().holding = value

    @property
    def children(self) -> list[str] | None:
        """The ids of the agents this one spawned, in order (None: none yet)."""
        extras = self._extras
        return None if extras is None else extras.children

    @children.setter
    def children(self, value: list[str] | None) -> None:
        if value is not None or self._extras is not None:
            self._extra().children = value

    @property
    def components(self) -> dict[type, Any] | None:
        """The entity's esper dict once it carries host components (runtime.world.host)."""
        extras = self._extras
        return None if extras is None else extras.components

    @components.setter
    def components(self, value: dict[type, Any] | None) -> None:
        if value is not None or self._extras is not None:
            self._extra().components = value

    def add_prompt(self, request: InteractionRequest) -> None:
        """Mirror the opening of ``request`` (see ``prompts``)."""
        prompts = self.prompts
        if not prompts:
            self.prompts = request
        elif isinstance(prompts, dict):
            prompts[request.id] = request.kind
        else:
            self.prompts = {prompts.id: prompts.kind, request.id: request.kind}

    def drop_prompt(self, request_id: str) -> bool:
        """Mirror the settlement of ``request_id``; False if it was not open here."""
        prompts = self.prompts
        if not prompts:
            return False
        if isinstance(prompts, dict):
            if prompts.pop(request_id, None) is None:
                return False
            if not prompts:
                self.prompts = None
            return True
        if prompts.id != request_id:
            return False
        self.prompts = None
        return True

    def prompt_ids(self) -> list[str]:
        """The ids of this agent's open prompts, in opening order."""
        prompts = self.prompts
        if not prompts:
            return []
        if isinstance(prompts, dict):
            return list(prompts)
        return [prompts.id]

    def prompt_kinds(self) -> list[InteractionKind]:
        """The kinds of this agent's open prompts, in opening order."""
        prompts = self.prompts
        if not prompts:
            return []
        if isinstance(prompts, dict):
            return list(prompts.values())
        return [prompts.kind]


class _Digested:
    """An ``AgentRecord``'s digest state (see ``AgentRecord._digested``)."""

    __slots__ = ("digest", "hist_hash", "hist_hashed")

    def __init__(self) -> None:
        self.digest = 0
        self.hist_hash = b""
        self.hist_hashed = 0


class _Extras:
    """An ``AgentRecord``'s rarely set fields (see ``AgentRecord._extras``)."""

    __slots__ = ("children", "components", "holding", "mailbox", "paused_from", "rng")

    def __init__(self) -> None:
        self.rng: random.Random | None = None
        self.mailbox: deque[Any] | None = None
        self.paused_from: StatusKind | None = None
        self.holding: list[tuple[int, object]] | None = None
        self.children: list[str] | None = None
        self.components: dict[type, Any] | None = None


class WorldState:
    """Everything the systems share, owned by the world and touched only by its tick."""

    def __init__(
        self,
        *,
        seed: int,
        effects: Effects,
        behaviors: BehaviorRegistry,
        now: float,
        keep_finished: int | None = None,
    ) -> None:
        self.seed = seed
        # Finished agents that may be released, oldest first: the world keeps the newest
        # `keep_finished` whole and releases the rest at the end of each tick. An agent
        # joins once it and its parent (if any) have finished, so a live parent can always
        # read its children's results. None: keep every finished agent (and queue none).
        self.keep_finished = keep_finished
        self.finished: deque[AgentRecord] = deque()
        self.to_forget: list[AgentRecord] = []
        # Releases a finished agent now (the world's `_release`): a replayed `forget` that
        # the live run released between ticks (`ForgetAgent.at_once`).
        self.release_now: weakref.WeakMethod[Callable[[AgentRecord], None]] | None = None
        self.forgets_at_once = False  # this (replayed) tick's inputs hold such a forget
        self.effects = effects
        self.behaviors = behaviors
        self.tick = 0
        self.now = now
        # Changed only under `ids_lock` (adding and dropping records), so that other
        # threads may read which ids exist under that lock without the tick's.
        self.records: dict[str, AgentRecord] = {}
        self.ids_lock = threading.Lock()
        # One `AgentSpec` per (behaviour, interactive), shared by every agent made with
        # them (48 B an agent): nothing changes a spec once its entity is made (a host's
        # `ctx.set` refuses built-in components), and equal values digest alike.
        self.specs: dict[tuple[str, bool], AgentSpec] = {}
        # The history entry of the latest `Ask`'s question: agents asking the same string
        # share it (see `systems.lifecycle.history.add_prompt`).
        self.last_prompt: Entry | None = None
        self.created: list[str] = []  # agents created since the world last looked
        self.next_ordinal = 0
        # This tick's inputs, in sequence order; outcomes are set aside for CollectOutcomes.
        self.inputs: list[tuple[int, object]] = []
        self.outcomes: list[tuple[int, object]] = []
        # Per-phase index sets, keyed by ordinal (spawn order) so that sorting is cheap and
        # iteration order is deterministic whatever order esper or a set would give.
        self.ready: dict[int, AgentRecord] = {}
        # Paused while they had something to do. Invariant: a paused agent is in `held`,
        # never in `ready` (pausing moves it; `make_ready` and waking sleepers honour it).
        self.held: dict[int, AgentRecord] = {}
        # Sleepers bucketed by deadline: a heap of distinct deadlines, and per deadline the
        # (seq, rec) that sleep until it. Agents that sleep alike share a deadline (a
        # simulation's agents all sleep 1 s from the same tick), so waking them pops one
        # heap item per bucket instead of one per agent with tuple compares on ties.
        # An entry is stale once `rec.sleep_seq != seq` (the sleep was abandoned: the
        # turn ended or resumed, which reset `sleep_seq`, or slept again). Invariant: a
        # live entry's turn is SLEEPING with no `send_value` (the skip's `_wake_run` relies
        # on it), and with no `pending` unless the sleep is a resource's hold (a `Hold`,
        # ended by the step at its wake-up; `holds` counts the live ones, so the step
        # looks for them only while there are some: never in a world without resources).
        self.sleepers: list[float] = []
        self.sleep_buckets: dict[float, list[tuple[int, AgentRecord]]] = {}
        self.sleep_seq = 0
        self.holds = 0
        # The journal format this world's ticks follow (see `JOURNAL_FORMAT`).
        self.journal_format = JOURNAL_FORMAT
        # Parent links ids no longer give, once an agent was released (``keep_finished``,
        # ``forget``) while it had children (see `cut_off`), by ordinal, as (the parent's
        # ordinal, its parent's id): of each such released agent (None: it had no parent),
        # and of each agent held whose parent was released. An id may be taken again once
        # released; an ordinal never is.
        self.released_up: dict[int, tuple[int, str | None] | None] = {}
        self.orphan_up: dict[int, tuple[int, str | None]] = {}
        # How many of those links point at each agent (held or released) by ordinal: a
        # released one's entry goes with the last (`note_release`).
        self.below: dict[int, int] = {}
        # Actions the step itself takes (a format-2 resource's): type -> fn(state, rec,
        # action), run where the behaviour yielded it, before any later agent steps.
        self.step_actions: dict[type, Callable[[WorldState, AgentRecord, Any], None]] = {}
        self.lane_waiting: dict[int, AgentRecord] = {}  # awaiting a model or tool outcome
        self.to_abort: list[AgentRecord] = []
        self.to_interrupt: list[AgentRecord] = []
        # agent id -> (model call ref, text its stream held when an interrupt stopped it)
        self.partials: dict[str, tuple[str, str]] = {}
        self.to_dispatch: list[tuple[AgentRecord, Action]] = []
        self.prompt_changed: dict[int, AgentRecord] = {}
        self.joiners: dict[str, list[AgentRecord]] = {}
        # A joining agent's first joined agent not yet seen ended (`check_join`), by ordinal:
        # each end resumes the scan there, so a join of N agents costs O(N), not O(N^2).
        self.join_scan: dict[int, int] = {}
        # Changed since the last digest (for the incremental digest), and this tick.
        self.dirty: dict[int, AgentRecord] = {}
        self.changed_this_tick = 0
        self.stepped = 0
        self.stale_dropped = 0
        # The live tick's probe (runtime.world.probe), None in replays and when unwatched.
        self.probe: Probe | None = None
        # Host ECS (runtime.world.host): action types the behaviours may yield -> handlers.
        self.host_actions: dict[type, Any] = {}
        # The host's ECS bookkeeping (a `runtime.world.host.HostECS`, set by the world).
        self.host: Any = None

    def touch(self, rec: AgentRecord) -> None:
        """Note that ``rec``'s state changed (for the digest and the fixed-point test)."""
        self.dirty[rec.ordinal] = rec
        self.changed_this_tick += 1

    def try_record(self, agent_id: str) -> AgentRecord | None:
        """The record of ``agent_id``, or None if the world has no such agent (yet)."""
        return self.records.get(agent_id)

    def agent_rng(self, rec: AgentRecord) -> random.Random:
        """The agent's own random stream, made on first use from the seed and the id."""
        if rec.rng is None:
            # A str seed goes through sha512: the same on every run, whatever PYTHONHASHSEED.
            rec.rng = random.Random(f"{self.seed}/{rec.id}")
        return rec.rng

    def add_sleeper(self, rec: AgentRecord, deadline: float) -> None:
        """Wake ``rec`` at ``deadline`` (any earlier sleep of it becomes stale)."""
        seq = self.sleep_seq = self.sleep_seq + 1
        rec.sleep_seq = seq
        bucket = self.sleep_buckets.get(deadline)
        if bucket is None:
            self.sleep_buckets[deadline] = [(seq, rec)]
            heapq.heappush(self.sleepers, deadline)
        else:
            bucket.append((seq, rec))

    def wake_sleepers(self) -> None:
        """Move every sleeper whose deadline has passed to ``ready``; then end the holds
        among them (in the order they were woken, before any of them steps), each sent
        what its ``Hold.end`` returns."""
        heap, buckets, now, ready = self.sleepers, self.sleep_buckets, self.now, self.ready
        paused = StatusKind.PAUSED
        holds: list[AgentRecord] | None = [] if self.holds else None
        while heap and heap[0] <= now:
            for seq, rec in buckets.pop(heapq.heappop(heap)):
                if rec.sleep_seq == seq:  # else a stale entry: the sleep was abandoned
                    (self.held if rec.status.kind is paused else ready)[rec.ordinal] = rec
                    if holds is not None and rec.turn.pending is not None:
                        holds.append(rec)
        if holds:
            for rec in holds:  # after the loop: a hold granted now ends next tick at once
                end_hold(self, rec)

    def parent_link(self, ordinal: int, parent: str | None) -> tuple[int, str | None] | None:
        """The parent of the agent with ``ordinal`` and parent id ``parent`` (held or
        released), as (its ordinal, its parent's id); None for an agent with no parent."""
        link = self.orphan_up.get(ordinal)
        if link is not None:
            return link
        if ordinal in self.released_up:
            return self.released_up[ordinal]
        if parent is None:
            return None
        rec = self.records.get(parent)  # held: no release has come between them
        return None if rec is None else (rec.ordinal, rec.agent.parent)

    def note_release(self, rec: AgentRecord) -> None:
        """``rec`` is about to be released: keep the parent links ids will no longer give,
        its held children's and its own, for as long as an agent held is below it; drop
        those nothing held is below any more (so they do not pile up over a long run)."""
        below = self.below
        orphan = self.orphan_up.pop(rec.ordinal, None)
        link = (rec.ordinal, rec.agent.parent)
        for child_id in rec.children or ():
            child = self.records.get(child_id)
            if child is not None and self.parent_link(child.ordinal, child.agent.parent) == link:
                self.orphan_up[child.ordinal] = link
                below[rec.ordinal] = below.get(rec.ordinal, 0) + 1
        if rec.ordinal in below:  # held children, or released ones with agents held below
            up = orphan if orphan is not None else self.parent_link(rec.ordinal, rec.agent.parent)
            self.released_up[rec.ordinal] = up
            if up is not None:
                below[up[0]] = below.get(up[0], 0) + 1
        if orphan is not None:
            self._unlink(orphan[0])  # its link as a held orphan goes

    def _unlink(self, ordinal: int) -> None:
        # One link fewer points at ``ordinal`` (held or released): with none left, nothing
        # held is below it through a release, and a released one's own link goes too.
        below = self.below
        while True:
            count = below[ordinal] - 1
            if count:
                below[ordinal] = count
                return
            del below[ordinal]
            up = self.released_up.pop(ordinal, None)
            if up is None:
                return
            ordinal = up[0]

    def cut_off(self, rec: AgentRecord) -> list[AgentRecord]:
        """The descendants of ``rec`` that no walk of ``children`` from it reaches: those
        whose line up to it passes an agent released since, in creation order (journal
        format 3's pause, resume and cancel reach them too). Empty unless an agent was
        released with children. The line is followed by ordinals (`parent_link`), so an
        id taken again, or a host's id with a dot in it, is never taken for an ancestor."""
        released = self.released_up
        if not released:
            return []
        top = rec.ordinal
        prefix = rec.id + "."  # a child's id is its parent's and ".<n>": a quick filter
        found = []
        for other in self.records.values():
            if not other.id.startswith(prefix):
                continue
            gap = False
            link = self.parent_link(other.ordinal, other.agent.parent)
            while link is not None and link[0] != top:
                gap = gap or link[0] in released
                link = self.parent_link(*link)
            if link is not None and gap:
                found.append(other)
        return found

    def make_ready(self, rec: AgentRecord) -> None:
        """Queue ``rec`` to step next (held instead while it is paused).

        Invariant: a paused agent is never in ``ready``, so the step loop need not ask.
        """
        if rec.status.kind is StatusKind.PAUSED:
            self.held[rec.ordinal] = rec
        else:
            self.ready[rec.ordinal] = rec

    def next_timer(self) -> float | None:
        """The earliest live sleep deadline, or None (drops stale entries)."""
        heap, buckets = self.sleepers, self.sleep_buckets
        while heap:
            bucket = buckets[heap[0]]
            seq, rec = bucket[0]
            if rec.sleep_seq == seq:
                return heap[0]
            live = [entry for entry in bucket if entry[1].sleep_seq == entry[0]]
            if live:
                buckets[heap[0]] = live
                return heap[0]
            del buckets[heapq.heappop(heap)]
        return None


def end_hold(state: WorldState, rec: AgentRecord) -> None:
    """End the hold ``rec``'s turn sleeps on (its wake-up): its value is sent next."""
    turn = rec.turn
    hold: Hold = turn.pending
    turn.pending = None
    turn.send_value = hold.end(state)
