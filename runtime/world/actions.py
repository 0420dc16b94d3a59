"""What a behaviour yields, and the ``Turn`` it is given.

A behaviour is a generator function run once per turn: ``def worker(turn): ...``. It yields
actions and receives each action's result; returning ends the turn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import FrozenInstanceError, dataclass
from numbers import Real
from operator import attrgetter
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, overload

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


# Actions are built on every step of every agent, so each is a frozen slotted dataclass
# (equality, hashing, repr, pickling and ``dataclasses.fields`` as any dataclass) whose
# ``__init__``, written out, checks the kind of each argument (a wrong one raises
# `TypeError` in the behaviour that made it, naming the value) and writes through the
# slots' own descriptors instead of the generated ``object.__setattr__`` per field: ~30%
# less per object. ``Sleep(0)``, the most common action of all, is one shared instance
# (immutable, so sharing it is safe): no allocation at all. Measured in issue 20:
# ``Sleep(0)`` 290 -> ~130 ns, ``Think`` ~420 -> ~280 ns on this machine (before the checks,
# which add ~20-60 ns).


@dataclass(frozen=True, slots=True, init=False)
class Think:
    """Ask the model ``model`` to complete ``prompt``; the result is a ``ModelReply``.

    Raises:
        TypeError: ``prompt`` or ``model`` is not a string.
    """

    prompt: str
    model: str = "default"

    def __init__(self, prompt: str, model: str = "default") -> None:
        text: object = prompt  # typed callers are right; untyped ones are checked
        name: object = model
        if text.__class__ is not str and not isinstance(text, str):
            raise TypeError(f"Think takes the prompt as a string, got {text!r}")
        if name.__class__ is not str and not isinstance(name, str):
            raise TypeError(f"Think takes the model's name as a string, got {name!r}")
        _set_prompt(self, prompt)
        _set_model(self, model)


@dataclass(frozen=True, slots=True, init=False)
class CallTools:
    """Run tool calls as one batch; the result is one ``ToolResult`` per call, in call order.

    Raises:
        TypeError: a call is not a `ToolCall` (whose own fields `ToolCall` checks).
        ValueError: two calls share an id.
    """

    calls: tuple[ToolCall, ...]

    def __init__(self, *calls: ToolCall) -> None:
        ids = set()
        for call in calls:
            if call.__class__ is not ToolCall and not isinstance(call, ToolCall):
                raise TypeError(f"CallTools takes ToolCall objects, got {call!r}")
            ids.add(call.id)  # its fields were checked when it was made (`ToolCall`)
        if len(ids) != len(calls):
            raise ValueError(
                f"tool call ids must be unique within a batch, got {[c.id for c in calls]}"
            )
        _set_calls(self, calls)


@dataclass(frozen=True, slots=True, init=False)
class Ask:
    """Put ``request`` to a person; the result is the ``InteractionResponse``.

    A cancelled or expired prompt gives the neutral response (``value == ""``).

    Raises:
        TypeError: ``request`` is not an ``InteractionRequest``.
    """

    request: InteractionRequest

    def __init__(self, request: InteractionRequest) -> None:
        given: object = request  # typed callers are right; untyped ones are checked
        if given.__class__ is not InteractionRequest and not isinstance(given, InteractionRequest):
            hint = (
                f" (a question in words: Ask(InteractionRequest.free_text('', {given!r})))"
                if isinstance(given, str)
                else ""
            )
            raise TypeError(f"Ask takes an InteractionRequest, got {given!r}{hint}")
        _set_request(self, request)


@dataclass(frozen=True, init=False)
class Sleep:
    """Wait until ``world.now`` has passed now + ``seconds``; the result is None.

    ``Sleep(0)`` resumes at the next tick.

    Raises:
        TypeError: ``seconds`` is not a real number (a string, None).
    """

    # The one action of a simulation's every step, so built as cheaply as Python allows.
    # ``__new__`` rather than ``__init__``, so that ``Sleep(0)`` can hand back the shared
    # instance without allocating (object.__init__ then accepts the argument and does
    # nothing); only the int 0 is shared (``Sleep(0.0)`` keeps its own repr). Any other
    # stores its value with a plain attribute store into the private slot ``_seconds``
    # (~60 ns less than the frozen field's descriptor): ``seconds`` is a read-only
    # property over it (assigning raises `FrozenInstanceError`, as on any frozen
    # dataclass), and the class has no frozen ``__setattr__`` to slow that store down.
    seconds: float
    if TYPE_CHECKING:  # the slot: neither a field nor a user's to write

        @property
        def _seconds(self) -> float: ...

    else:  # (a type checker that saw it would take `seconds` for a slot it is not)
        __slots__ = ("_seconds",)

    def __new__(cls, seconds: float) -> Sleep:
        if seconds is _ZERO and cls is Sleep:
            return _SLEEP_0
        given: object = seconds  # typed callers are right; untyped ones are checked
        kind = given.__class__
        if kind is not float and kind is not int and not isinstance(given, Real):
            raise TypeError(f"Sleep takes a number of seconds, got {given!r}")
        if cls is not Sleep:
            return _new_subclass_sleep(cls, seconds)
        self = _new_object(cls)
        self._seconds = seconds  # type: ignore[misc]  # (its slot)
        return self

    def __reduce__(self) -> tuple[type[Sleep], tuple[float]]:
        return (self.__class__, (self.seconds,))


def _frozen_seconds(self: Sleep, value: float) -> None:
    # A class without a `__setattr__` of its own (`Sleep`, a plain subclass) reaches here
    # from any assignment: refused. One with its own (a frozen dataclass subclass, whose
    # `__setattr__` refuses users) reaches here only through `object.__setattr__`: its
    # generated `__init__`, or a `__post_init__`'s, as on any frozen dataclass.
    if type(self).__setattr__ is _object_setattr:
        raise FrozenInstanceError("cannot assign to field 'seconds'")
    _set_hidden_seconds(self, value)


_object_setattr = object.__setattr__


def _undeletable_seconds(self: Sleep) -> None:
    raise FrozenInstanceError("cannot delete field 'seconds'")


del Sleep.__setattr__, Sleep.__delattr__  # the frozen ones: `seconds` itself refuses writes
Sleep.seconds = property(  # type: ignore[assignment]
    attrgetter("_seconds"), _frozen_seconds, _undeletable_seconds, "The seconds to sleep."
)
_set_hidden_seconds = Sleep.__dict__["_seconds"].__set__


def _new_subclass_sleep(cls: type[Sleep], seconds: float) -> Sleep:
    """A subclass's ``Sleep``: its store may be frozen (a frozen dataclass subclass), and a
    slotted dataclass subclass has a ``seconds`` slot of its own, which its reads find
    first: both are written through their descriptors."""
    self = _new_object(cls)
    _set_hidden_seconds(self, seconds)
    for klass in cls.__mro__:
        found = klass.__dict__.get("seconds")
        if found is not None:
            if isinstance(found, MemberDescriptorType):
                found.__set__(self, seconds)
            break
    return self


@dataclass(frozen=True, slots=True, init=False)
class Spawn:
    """Start a child agent running ``behavior`` on ``message``; the result is its id.

    ``behavior`` is a generator function or the name a behaviour is registered under
    (looked up when the action is taken).

    Raises:
        TypeError: ``behavior`` is neither callable nor a string, or ``name`` is not a
            string.
    """

    behavior: Behavior | str
    message: Any = None
    name: str = ""

    def __init__(self, behavior: Behavior | str, message: Any = None, name: str = "") -> None:
        given: object = behavior  # typed callers are right; untyped ones are checked
        label: object = name
        if given.__class__ is not str and not callable(given) and not isinstance(given, str):
            raise TypeError(
                "Spawn takes a behaviour (a generator function, or the name it is"
                f" registered under), got {given!r}"
            )
        if label.__class__ is not str and not isinstance(label, str):
            raise TypeError(f"Spawn takes the child's name as a string, got {label!r}")
        _set_behavior(self, behavior)
        _set_message(self, message)
        _set_name(self, name)


@dataclass(frozen=True, slots=True, init=False)
class Join:
    """Wait until every agent in ``agent_ids`` is terminal; the result is their results,
    in the order given (None for an agent that ended in ERROR or CANCELLED).

    Raises:
        TypeError: an id is not a string (a list of ids goes in as ``Join(*ids)``).
    """

    agent_ids: tuple[str, ...]

    def __init__(self, *agent_ids: str) -> None:
        for agent_id in agent_ids:
            given: object = agent_id  # typed callers are right; untyped ones are checked
            if given.__class__ is not str and not isinstance(given, str):
                hint = (
                    " (the ids of a collection go in one by one: Join(*ids))"
                    if isinstance(given, Iterable)
                    else ""
                )
                raise TypeError(f"Join takes agent ids as strings, got {given!r}{hint}")
        _set_agent_ids(self, agent_ids)


_new_object = object.__new__
_set_prompt = Think.__dict__["prompt"].__set__
_set_model = Think.__dict__["model"].__set__
_set_calls = CallTools.__dict__["calls"].__set__
_set_request = Ask.__dict__["request"].__set__
_set_agent_ids = Join.__dict__["agent_ids"].__set__
_set_behavior = Spawn.__dict__["behavior"].__set__
_set_message = Spawn.__dict__["message"].__set__
_set_name = Spawn.__dict__["name"].__set__
_ZERO: object = 0  # the int 0 (CPython shares small ints, so `is` finds it)
_SLEEP_0 = _new_object(Sleep)
_SLEEP_0._seconds = 0  # type: ignore[misc]

RESERVED_ACTIONS: dict[type, str] = {
    cls: "a built-in action" for cls in (Think, CallTools, Ask, Sleep, Spawn, Join)
}
"""Action types no host handler may take, each with what it is (`add_action` refuses them).
`runtime.world.resource` adds its ``Acquire``, ``Release`` and ``Use`` (the step takes
them once a `Resource` exists: a host's handler would never be called)."""

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

    # A world's turn keeps no id of its own (its record's) and makes its history view on
    # first read: a suspended turn of 100k agents costs what the behaviour keeps alive.
    __slots__ = ("_history", "_rec", "_source", "generation", "message")

    def __init__(
        self,
        agent_id: str,
        message: Any,
        history: HistoryView | None,
        generation: int,
        source: TurnSource,
        rec: Any = None,
    ) -> None:
        """``history`` None: a view of ``rec.history.entries``, made when first read."""
        if rec is None or rec.id != agent_id:
            rec = _Bare(agent_id, rec)
        self.message = message
        self._history = history
        self.generation = generation
        self._source = source
        self._rec = rec

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self._rec.id  # type: ignore[no-any-return]

    @property
    def history(self) -> HistoryView:
        """The agent's history so far, read-only (no copy is made)."""
        view = self._history
        if view is None:
            history = self._rec.history  # None: a bare turn made with neither
            view = self._history = HistoryView([] if history is None else history.entries)
        return view

    @property
    def now(self) -> float:
        """The world's time at this step (virtual under a ``ManualClock``)."""
        return self._source.now

    @property
    def rng(self) -> random.Random:
        """The agent's own random stream, derived from the world's seed and the agent id."""
        rec = self._rec
        return self._source.agent_rng(rec.rec if rec.__class__ is _Bare else rec)

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
        rec = self._rec
        comps = getattr(rec.rec if rec.__class__ is _Bare else rec, "components", None)
        found = None if comps is None else comps.get(component_type)
        return None if found is None else copy_component(found)

    def __repr__(self) -> str:
        return f"Turn(agent_id={self.agent_id!r}, generation={self.generation})"


class _Bare:
    """Where a ``Turn`` made without its agent's record (or with another's) keeps its id."""

    __slots__ = ("history", "id", "rec")

    def __init__(self, agent_id: str, rec: Any) -> None:
        self.id = agent_id
        self.rec = rec
        self.history = getattr(rec, "history", None)
