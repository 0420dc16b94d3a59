"""The interaction hub settles every prompt exactly once, in order, whoever gets there first."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from components.interaction import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
    response_approved,
)
from runtime.cancel import CancelToken
from runtime.clock import ManualClock, MonotonicClock
from runtime.errors import ConfigError, DuplicateRequestError
from runtime.hub import HubEvent, HubStats, InteractionHub, interaction_hub
from runtime.lane import parking
from runtime.wake import Wake

WAIT = 5.0  # the longest any wait in these tests may take before it counts as a hang


class Recorder:
    """A listener that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[HubEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: HubEvent) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[HubEvent]], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self.events), timeout=WAIT)

    def wait_opened(self, request_id: str) -> None:
        self.wait_for(
            lambda evs: any(isinstance(e, PromptOpened) and e.request.id == request_id for e in evs)
        )

    def summary(self) -> list[tuple[str, str, Settlement | None]]:
        return [
            ("opened", e.request.id, None)
            if isinstance(e, PromptOpened)
            else ("settled", e.request_id, e.how)
            for e in self.events
        ]


class Asker:
    """Runs ``hub.ask`` on its own thread and keeps what it returned."""

    def __init__(self, hub: InteractionHub, agent_id: str, request: InteractionRequest) -> None:
        self.responses: list[InteractionResponse] = []
        self.error: BaseException | None = None
        self._hub, self._agent_id, self._request = hub, agent_id, request
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.responses.append(self._hub.ask(self._agent_id, self._request))
        except BaseException as exc:
            self.error = exc

    def result(self) -> InteractionResponse:
        self.thread.join(timeout=WAIT)
        assert not self.thread.is_alive(), "the asker hung"
        if self.error is not None:
            raise self.error
        assert len(self.responses) == 1
        return self.responses[0]


def text(request_id: str, prompt: str = "name?") -> InteractionRequest:
    return InteractionRequest.free_text(request_id, prompt)


def test_a_prompt_is_answered_through_the_hub():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    asker = Asker(hub, "alice", text("q1"))
    recorder.wait_opened("q1")
    assert hub.pending() == [("alice", text("q1"))]
    assert hub.try_request("q1") == ("alice", text("q1"))
    assert hub.answer(InteractionResponse.text("q1", "Ada")) is True
    assert asker.result() == InteractionResponse.text("q1", "Ada")
    assert hub.pending() == []
    assert hub.try_request("q1") is None
    assert hub.answer(InteractionResponse.text("nobody-asked", "x")) is False
    assert hub.answer(InteractionResponse.text("q1", "again")) is False
    assert hub.stats() == HubStats(opened=1, answered=1, cancelled=0, expired=0, open=0)


def test_pending_with_a_limit_lists_the_first_open_prompts_in_opening_order():
    hub = InteractionHub(clock=ManualClock())
    for n in range(5):
        hub.open(f"a{n}", text(f"q{n}"))
    hub.cancel("q1")
    assert hub.pending(limit=2) == [("a0", text("q0")), ("a2", text("q2"))]
    assert hub.pending(limit=0) == []
    assert (
        hub.pending(limit=10)
        == hub.pending()
        == [
            ("a0", text("q0")),
            ("a2", text("q2")),
            ("a3", text("q3")),
            ("a4", text("q4")),
        ]
    )


@pytest.mark.parametrize("limit", [-1, 2.0, "3", True])
def test_an_unusable_pending_limit_is_refused_naming_it(limit: object):
    hub = InteractionHub(clock=ManualClock())
    with pytest.raises(
        ConfigError, match=f"`limit` must be an integer >= 0 or None, got {limit!r}"
    ):
        hub.pending(limit=limit)  # type: ignore[arg-type]


def test_a_request_or_response_of_the_wrong_type_is_refused_naming_it():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    with pytest.raises(TypeError, match="`request` must be an InteractionRequest, got 'q1'"):
        hub.open("alice", "q1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`request` must be an InteractionRequest, got <int of"):
        hub.ask("alice", 10**5000)  # type: ignore[arg-type]
    hub.open("alice", text("q1"))
    with pytest.raises(TypeError, match="`response` must be an InteractionResponse, got 'q1'"):
        hub.answer("q1")  # type: ignore[arg-type]
    assert hub.stats() == HubStats(opened=1, answered=0, cancelled=0, expired=0, open=1)
    assert [type(e) for e in recorder.events] == [PromptOpened]


def test_a_request_built_by_hand_with_a_bad_kind_or_choices_is_refused_at_opening():
    # A str kind used to open (with an id given) and then fail at its settlement or expiry,
    # inside a tick of the world; a choice with no choices opened as if it had some.
    hub = InteractionHub(clock=ManualClock(), timeout_secs=1)
    bad = [
        (
            InteractionRequest("k", "free_text", "?"),
            "`kind` must be an InteractionKind, got 'free_text'",
        ),  # type: ignore[arg-type]
        (InteractionRequest("", "free_text", "?"), "`kind` must be an InteractionKind"),  # type: ignore[arg-type]
        (
            InteractionRequest("c", InteractionKind.CHOICE, "?"),
            "a choice needs a non-empty tuple of strings, got \\(\\)",
        ),
        (InteractionRequest("s", InteractionKind.CHOICE, "?", "ab"), "got 'ab'"),  # type: ignore[arg-type]
    ]
    for request, message in bad:
        with pytest.raises(ConfigError, match=message):
            hub.open("alice", request)
    assert hub.stats().opened == 0
    assert hub.expire_due(10.0) == []  # nothing half-open was left to fail at expiry


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (InteractionRequest.free_text("", 6), "request '': `prompt` must be a string, got 6"),  # type: ignore[arg-type]
        (InteractionRequest.free_text(5, "go?"), "request 5: `id` must be a string, got 5"),  # type: ignore[arg-type]
        (
            InteractionRequest.free_text("q", "go?", stage=None),  # type: ignore[arg-type]
            "request 'q': `stage` must be a string, got None",
        ),
        (
            InteractionRequest.confirm("q", "go?", required="no"),  # type: ignore[arg-type]
            "request 'q': `required` must be True or False, got 'no'",
        ),
    ],
    ids=["prompt", "id", "stage", "required"],
)
def test_a_request_whose_fields_are_of_the_wrong_kind_is_refused_at_opening(request_, message):
    # They used to open: a prompt of 6, or one keyed by the int 5 that no `tickwork respond`
    # (which sends strings) could ever answer.
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    with pytest.raises(ConfigError) as caught:
        hub.open("alice", request_)
    assert str(caught.value) == message
    assert hub.stats().opened == 0 and recorder.events == []


def test_a_choice_of_a_string_is_refused_where_it_is_made():
    # A str is a sequence: choice("q", "go?", "yes") offered "y", "e" and "s".
    with pytest.raises(
        ValueError, match="`choices` must be a list of strings, got the string 'yes'"
    ):
        InteractionRequest.choice("q", "go?", "yes")
    assert InteractionRequest.choice("q", "go?", ("yes",)).choices == ("yes",)


def test_an_answer_whose_value_or_approval_is_of_the_wrong_kind_is_refused_and_changes_nothing():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    hub.open("alice", text("q1"))
    bad = [
        (InteractionResponse.text("q1", 6), "answer to 'q1': `value` must be a string, got 6"),  # type: ignore[arg-type]
        (
            InteractionResponse.approval("q1", "yes"),  # type: ignore[arg-type]
            "answer to 'q1': `approved` must be True, False or None, got 'yes'",
        ),
    ]
    for response, message in bad:
        with pytest.raises(ConfigError) as caught:
            hub.answer(response)
        assert str(caught.value) == message
    assert hub.stats().open == 1 and [type(e) for e in recorder.events] == [PromptOpened]
    assert hub.answer(InteractionResponse.approval("q1", True)) is True


def test_a_choice_that_names_no_choice_of_its_prompt_is_refused_and_changes_nothing():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    hub.open("alice", InteractionRequest.choice("c1", "colour?", ["red", "blue"]))
    for bad in (2, -1, True):
        with pytest.raises(ConfigError, match=f"'c1' offers choices 0..1, got choice {bad}"):
            hub.answer(InteractionResponse("c1", choice=bad))
    assert hub.stats().open == 1 and [type(e) for e in recorder.events] == [PromptOpened]
    assert hub.answer(InteractionResponse.choose("c1", 1, "blue")) is True


def test_opening_answering_cancelling_and_expiring_each_nudge_the_wake():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    wake, other = Wake(), Wake()
    assert hub.attach_wake(wake) is True
    assert hub.attach_wake(other) is False

    def nudged() -> bool:
        return wake.wait(timeout=0)

    hub.open("a", text("1"))
    assert nudged()
    assert hub.answer(InteractionResponse.text("1", "x"))
    assert nudged()
    hub.open("a", text("2"))
    assert nudged()
    assert hub.cancel("2")
    assert nudged()
    hub.open("a", text("3"))
    assert nudged()
    clock.advance(10)
    assert hub.expire_due(clock.now()) == ["3"]
    assert nudged()
    hub.open("a", text("4"))
    assert nudged()
    assert hub.cancel_for_agent("a") == 1
    assert nudged()
    # Nothing changed, so nothing nudges; the ignored second wake never hears anything.
    assert not hub.answer(InteractionResponse.text("1", "x"))
    assert not hub.cancel("2")
    assert hub.expire_due(clock.now()) == []
    assert not nudged()
    assert other.notifies == 0


def test_cancel_wakes_the_asker_with_the_neutral_response():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    asker = Asker(hub, "a", InteractionRequest.confirm("ok", "proceed?"))
    recorder.wait_opened("ok")
    assert hub.cancel("ok") is True
    response = asker.result()
    assert response == InteractionResponse.neutral("ok")
    assert response.value == "" and response.approved is None
    assert hub.cancel("ok") is False
    assert hub.stats().cancelled == 1


def test_a_prompt_nobody_answers_is_released_when_the_deadline_passes():
    clock = ManualClock(100.0)
    recorder = Recorder()
    hub = InteractionHub(clock=clock, timeout_secs=30, listener=recorder)
    asker = Asker(hub, "a", text("q"))
    recorder.wait_opened("q")
    assert hub.next_deadline() == 130.0
    clock.advance(29.5)
    assert hub.expire_due(clock.now()) == []
    assert hub.pending() == [("a", text("q"))]
    clock.advance(0.5)
    assert hub.expire_due(clock.now()) == ["q"]
    assert asker.result() == InteractionResponse.neutral("q")
    assert hub.pending() == [] and hub.next_deadline() is None
    settled = hub.try_settlement("q")
    assert settled is not None
    assert (settled.how, settled.opened_at, settled.at) == (Settlement.EXPIRED, 100.0, 130.0)


def test_a_deadline_changes_nothing_for_a_prompt_answered_or_cancelled_before_it():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("answered"))
    hub.open("a", text("cancelled"))
    hub.answer(InteractionResponse.text("answered", "yes"))
    hub.cancel("cancelled")
    clock.advance(60)
    assert hub.expire_due(clock.now()) == []
    answered, cancelled = hub.try_settlement("answered"), hub.try_settlement("cancelled")
    assert answered is not None and answered.how is Settlement.ANSWERED
    assert answered.response == InteractionResponse.text("answered", "yes")
    assert cancelled is not None and cancelled.how is Settlement.CANCELLED
    assert hub.stats() == HubStats(opened=2, answered=1, cancelled=1, expired=0, open=0)


def test_a_zero_timeout_waits_for_a_person_however_long_it_takes():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=0)
    hub.open("a", text("q"))
    assert hub.next_deadline() is None
    clock.advance(24 * 3600)
    assert hub.expire_due(clock.now()) == []
    assert hub.pending() == [("a", text("q"))]


def test_a_changed_timeout_applies_only_to_requests_opened_afterwards():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("old"))
    hub.set_timeout_secs(0)
    assert hub.timeout_secs == 0
    hub.open("a", text("forever"))
    hub.set_timeout_secs(50)
    hub.open("a", text("new"))
    clock.advance(10)
    assert hub.expire_due(clock.now()) == ["old"]
    assert hub.next_deadline() == 50.0
    clock.advance(1000)
    assert hub.expire_due(clock.now()) == ["new"]
    assert [r.id for _, r in hub.pending()] == ["forever"]


@pytest.mark.parametrize("secs", [-1.0, float("nan"), float("inf")])
def test_an_unusable_timeout_is_refused_naming_the_value(secs: float):
    hub = InteractionHub(clock=ManualClock())
    with pytest.raises(ValueError, match=f"`timeout_secs` must be .*, got {secs}"):
        hub.set_timeout_secs(secs)
    with pytest.raises(ValueError, match=f"got {secs}"):
        InteractionHub(timeout_secs=secs)
    assert hub.timeout_secs == 3600.0


def test_the_deadline_denies_rather_than_approves():
    clock = ManualClock()
    recorder = Recorder()
    hub = InteractionHub(clock=clock, timeout_secs=5, listener=recorder)
    request = InteractionRequest.tool_approval("rm", "shell", {"cmd": "rm -rf /"})
    asker = Asker(hub, "a", request)
    recorder.wait_opened("rm")
    clock.advance(5)
    hub.expire_due(clock.now())
    response = asker.result()
    assert response.approved is None
    assert response_approved(response) is False


def test_timeout_cancel_expiry_and_close_all_resolve_to_the_same_neutral_response():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=1)
    for request_id in ("cancelled", "by-agent", "expired"):
        hub.open(request_id, text(request_id))
    hub.cancel("cancelled")
    hub.cancel_for_agent("by-agent")
    clock.advance(1)
    hub.expire_due(clock.now())
    hub.open("closed", text("closed"))
    assert hub.close() == 1
    for request_id in ("cancelled", "by-agent", "expired", "closed"):
        settled = hub.try_settlement(request_id)
        assert settled is not None
        assert settled.response == InteractionResponse.neutral(request_id)


def test_an_answer_that_lands_as_the_deadline_passes_still_wins():
    clock = ManualClock()
    recorder = Recorder()
    hub = InteractionHub(clock=clock, timeout_secs=10, listener=recorder)
    asker = Asker(hub, "a", InteractionRequest.confirm("go", "go?"))
    recorder.wait_opened("go")
    deadline = hub.next_deadline()
    assert deadline == 10.0
    clock.set(deadline)
    assert hub.answer(InteractionResponse.approval("go", True)) is True
    assert hub.expire_due(deadline) == []
    assert response_approved(asker.result())
    assert recorder.summary()[-1] == ("settled", "go", Settlement.ANSWERED)
    assert hub.stats().expired == 0


class RacingClock:
    """A real (non-virtual) clock whose time the test sets; ``hook`` runs on the read that
    follows the first read at or past ``hook_at``, i.e. after a timed wait has run out."""

    def __init__(self) -> None:
        self.t = 0.0
        self.hook: Callable[[], None] | None = None
        self.hook_at = float("inf")
        self.hook_thread: str | None = None
        self._seen_past = False

    @property
    def virtual(self) -> bool:
        return False

    def now(self) -> float:
        if self.hook is not None and self.t >= self.hook_at:
            if self._seen_past:
                hook, self.hook = self.hook, None
                self.hook_thread = threading.current_thread().name
                hook()
            self._seen_past = True
        return self.t


def test_on_a_real_clock_an_answer_that_beats_the_askers_own_expiry_wins():
    clock = RacingClock()
    hub = InteractionHub(clock=clock, timeout_secs=5)

    def arrive_late() -> None:
        # The asker's wait has timed out; the answer takes the lock before its expiry does.
        assert hub.answer(InteractionResponse.text("q", "just in time"))

    def on_open(event: HubEvent) -> None:
        if isinstance(event, PromptOpened):
            clock.t, clock.hook_at, clock.hook = 6.0, 5.0, arrive_late

    hub.set_listener(on_open)
    assert hub.ask("a", text("q")) == InteractionResponse.text("q", "just in time")
    assert clock.hook_thread == threading.current_thread().name
    assert hub.stats() == HubStats(opened=1, answered=1, cancelled=0, expired=0, open=0)


def test_an_asker_past_its_deadline_never_expires_a_newer_request_with_the_same_id():
    clock = RacingClock()
    hub = InteractionHub(clock=clock, timeout_secs=5)

    def answer_and_reopen() -> None:
        hub.answer(InteractionResponse.text("q", "first"))
        hub.set_listener(None)
        hub.open("b", text("q", "second question"))

    def on_open(event: HubEvent) -> None:
        if isinstance(event, PromptOpened):
            clock.t, clock.hook_at, clock.hook = 6.0, 5.0, answer_and_reopen

    hub.set_listener(on_open)
    assert hub.ask("a", text("q")).value == "first"
    assert hub.pending() == [("b", text("q", "second question"))]


def test_on_a_virtual_clock_only_expire_due_ends_an_overdue_ask():
    # Waiting in real time does not move a virtual clock, so the asker must not time itself out.
    clock = ManualClock()
    parked = threading.Event()

    def overdue_at_once(event: HubEvent) -> None:
        if isinstance(event, PromptOpened):
            clock.advance(100)

    hub = InteractionHub(clock=clock, timeout_secs=1, listener=overdue_at_once)
    asker = ask_in_a_lane_job(hub, FakeSlot([], parked), "q")
    assert parked.wait(WAIT)
    asker.thread.join(0.2)
    assert asker.thread.is_alive()
    assert hub.pending() == [("a", text("q"))]
    assert hub.expire_due(clock.now()) == ["q"]
    assert asker.result() == InteractionResponse.neutral("q")


def test_a_listener_may_call_back_into_the_hub():
    # The lock is reentrant: a listener that answers at once neither deadlocks nor reorders.
    recorder = Recorder()

    def auto_approve(event: HubEvent) -> None:
        recorder(event)
        if isinstance(event, PromptOpened):
            hub.answer(InteractionResponse.approval(event.request.id, True))

    hub = InteractionHub(clock=ManualClock(), listener=auto_approve)
    assert response_approved(hub.ask("a", InteractionRequest.confirm("ok", "sure?")))
    assert recorder.summary() == [("opened", "ok", None), ("settled", "ok", Settlement.ANSWERED)]


def test_a_blocking_ask_on_a_real_clock_gives_up_by_itself_at_the_deadline():
    hub = InteractionHub(clock=MonotonicClock(), timeout_secs=0.2)
    wake = Wake()
    hub.attach_wake(wake)
    started = time.monotonic()
    response = hub.ask("a", InteractionRequest.tool_approval("t", "shell", {}))
    elapsed = time.monotonic() - started
    assert response == InteractionResponse.neutral("t")
    assert not response_approved(response)
    assert 0.19 <= elapsed < WAIT
    settled = hub.try_settlement("t")
    assert settled is not None and settled.how is Settlement.EXPIRED
    assert hub.pending() == [] and hub.stats().expired == 1
    assert wake.notifies == 2  # opened, expired


def test_cancel_for_agent_settles_every_prompt_of_that_agent_and_leaves_the_others():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    askers = [Asker(hub, "doomed", text(f"d{i}")) for i in range(3)]
    for i in range(3):
        recorder.wait_opened(f"d{i}")
    hub.open("other", text("o1"))
    hub.open("doomed", text("d3"))
    assert hub.cancel_for_agent("doomed") == 4
    assert [a.result() for a in askers] == [InteractionResponse.neutral(f"d{i}") for i in range(3)]
    assert hub.pending() == [("other", text("o1"))]
    assert hub.cancel_for_agent("doomed") == 0
    assert hub.cancel_for_agent("stranger") == 0
    assert hub.stats().cancelled == 4


def test_an_agents_open_ids_cost_no_dict_of_their_own_until_there_are_two():
    # Memory: a waiting agent usually has one prompt; a one-entry dict per agent was ~230 B.
    hub = InteractionHub(clock=ManualClock())
    hub.open("other", text("o1"))
    assert hub.cancel_for_agent("nobody") == 0  # builds the index, kept from then on
    hub.open("a", text("p1"))
    assert hub._by_agent is not None and hub._by_agent["a"] == "p1"
    hub.open("a", text("p2"))
    hub.open("a", text("p3"))
    assert hub._by_agent["a"] == {"p1": None, "p2": None, "p3": None}
    hub.answer(InteractionResponse.text("p1", "x"))
    hub.cancel("p3")
    assert hub._by_agent["a"] == "p2"
    assert hub.cancel_for_agent("a") == 1
    assert hub._by_agent == {"other": "o1"} and hub.pending() == [("other", text("o1"))]


def test_the_per_agent_index_is_made_by_the_first_cancel_for_agent_and_goes_when_empty():
    # Memory: a world waiting on 100k prompts that nobody cancels by agent paid ~38 B an
    # agent for an index it never read.
    hub = InteractionHub(clock=ManualClock())
    for request_id, agent in [("p1", "a"), ("p2", "b"), ("p3", "a"), ("p4", "a")]:
        hub.open(agent, text(request_id))
    assert hub._by_agent is None
    hub.answer(InteractionResponse.text("p4", "x"))  # settled before the index is made
    assert hub.cancel_for_agent("b") == 1
    assert hub._by_agent == {"a": {"p1": None, "p3": None}}  # in opening order
    hub.open("a", text("p5"))  # kept current once made
    hub.open("c", text("p6"))
    assert hub._by_agent == {"a": {"p1": None, "p3": None, "p5": None}, "c": "p6"}
    assert hub.cancel_for_agent("a") == 3
    assert hub.pending() == [("c", text("p6"))]
    hub.cancel("p6")
    assert hub._by_agent is None  # the open set emptied: the index goes with it
    hub.open("a", text("p7"))
    assert hub._by_agent is None
    assert hub.cancel_for_agent("a") == 1 and hub.pending() == []


def test_an_empty_id_gets_an_id_minted_in_call_order():
    def run() -> tuple[list[str], list[HubEvent]]:
        recorder = Recorder()
        hub = InteractionHub(clock=ManualClock(), listener=recorder)
        ids = [
            hub.open("a", text("")),
            hub.open("b", InteractionRequest.confirm("", "sure?")),
            hub.open("a", text("a-free_text-4")),  # a hand-chosen id the counter will meet
            hub.open("a", InteractionRequest.choice("", "which?", ["x", "y"])),
            hub.open("a", text("")),
        ]
        return ids, recorder.events

    ids, events = run()
    assert ids == ["a-free_text-1", "b-confirm-2", "a-free_text-4", "a-choice-3", "a-free_text-5"]
    assert [e.request.id for e in events if isinstance(e, PromptOpened)] == ids
    assert run() == (ids, events)


def test_opening_an_id_that_is_already_open_is_refused_never_merged():
    hub = InteractionHub(clock=ManualClock())
    hub.open("a", text("q", "first"))
    with pytest.raises(DuplicateRequestError, match=r"^request id 'q' is already open$"):
        hub.open("b", text("q", "second"))
    assert hub.pending() == [("a", text("q", "first"))]
    assert hub.stats().opened == 1
    hub.answer(InteractionResponse.text("q", "done"))
    assert hub.open("b", text("q", "second")) == "q"  # a settled id may be used again


def test_next_deadline_is_the_earliest_among_open_requests():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=30)
    assert hub.next_deadline() is None
    hub.open("a", text("late"))
    hub.set_timeout_secs(10)
    hub.open("a", text("early"))
    hub.set_timeout_secs(20)
    hub.open("a", text("middle"))
    assert hub.next_deadline() == 10.0
    hub.answer(InteractionResponse.text("early", "x"))
    assert hub.next_deadline() == 20.0
    hub.cancel("middle")
    assert hub.next_deadline() == 30.0
    clock.advance(100)
    assert hub.expire_due(clock.now()) == ["late"]
    assert hub.next_deadline() is None


def test_a_reused_id_is_held_to_its_own_deadline_not_its_predecessors():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("q", "first"))
    hub.answer(InteractionResponse.text("q", "x"))
    hub.set_timeout_secs(50)
    hub.open("b", text("q", "second"))
    assert hub.next_deadline() == 50.0
    assert hub.expire_due(10.0) == []
    assert hub.pending() == [("b", text("q", "second"))]
    assert hub.expire_due(50.0) == ["q"]


def test_a_tick_with_nothing_due_reads_the_deadlines_without_waiting_for_the_lock():
    # The tick thread asks `expire_due` every tick and `next_deadline` at every fixed
    # point: with nothing due they must not queue behind a thread that holds the hub's
    # lock (a listener busy under it, say). A due deadline still waits for it.
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("p1"))
    assert hub.next_deadline() == 10.0
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with hub._lock:
            holding.set()
            assert release.wait(WAIT)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(WAIT)
        assert hub.expire_due(9.5) == []  # not due: returns at once, the lock held elsewhere
        expired: list[list[str]] = []
        late = threading.Thread(target=lambda: expired.append(hub.expire_due(10.0)))
        late.start()
        late.join(0.05)
        assert late.is_alive() and not expired  # due: it waits for the lock
    finally:
        release.set()
        holder.join(WAIT)
    late.join(WAIT)
    assert expired == [["p1"]]
    assert hub.next_deadline() is None

    # No deadline at all: `next_deadline` answers without the lock too.
    holding.clear()
    release.clear()
    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(WAIT)
        assert hub.next_deadline() is None
    finally:
        release.set()
        holder.join(WAIT)


def test_an_answered_prompt_leaves_no_deadline_for_the_tick_to_look_at():
    hub = InteractionHub(clock=ManualClock(), timeout_secs=10)
    hub.open("a", text("p1"))
    hub.open("a", text("p2"))
    assert hub._deadlines.floor == 10.0
    hub.answer(InteractionResponse.text("p1", "yes"))
    assert hub._deadlines.floor == 10.0  # p2 is still live: the floor stays a bound
    hub.answer(InteractionResponse.text("p2", "yes"))
    assert hub._deadlines.floor == math.inf
    assert hub.expire_due(1e9) == [] and hub.next_deadline() is None


def test_a_reopened_past_deadline_lowers_the_floor_so_it_expires():
    hub = InteractionHub(clock=ManualClock(100.0), timeout_secs=10)
    hub.open("a", text("p1"))  # deadline 110
    hub.reopen("b", text("old"), 0.0, 50.0)  # already past: the next expire_due takes it
    assert hub.expire_due(100.0) == ["old"]
    assert hub.next_deadline() == 110.0


@pytest.mark.parametrize("deadline", [math.inf, -math.inf, math.nan, "50"])
def test_a_reopen_with_a_deadline_that_is_no_time_is_refused_naming_it(deadline: object):
    hub = InteractionHub(clock=ManualClock(100.0), timeout_secs=10)
    with pytest.raises(
        ConfigError, match=f"`deadline` of 'old' must be a finite time or None, got {deadline!r}"
    ):
        hub.reopen("b", text("old"), 0.0, deadline)  # type: ignore[arg-type]
    assert hub.pending() == [] and hub.next_deadline() is None


def test_expire_due_settles_every_overdue_request_earliest_deadline_first():
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("first"))
    clock.advance(1)
    hub.open("b", text("second"))
    hub.open("a", text("tied"))
    clock.advance(1)
    hub.open("a", text("not-yet"))
    assert [r.id for _, r in hub.pending()] == ["first", "second", "tied", "not-yet"]
    assert hub.expire_due(11.0) == ["first", "second", "tied"]
    assert [r.id for _, r in hub.pending()] == ["not-yet"]


def test_equal_deadlines_expire_in_opening_order_however_they_arrived():
    # In-order deadlines and out-of-order ones are kept apart (a FIFO and a heap); ties
    # between them must still come out in the order the prompts were opened.
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("late"))  # deadline 10
    hub.reopen("a", text("put-back"), 0.0, 5.0)  # deadline 5, earlier than one queued
    hub.answer(InteractionResponse.text("late", "x"))
    hub.set_timeout_secs(5)
    hub.open("a", text("tied"))  # deadline 5, opened after "put-back"
    hub.open("a", text("tied-too"))
    hub.reopen("a", text("put-back-too"), 0.0, 5.0)
    hub.set_timeout_secs(6)
    hub.open("a", text("after"))  # deadline 6
    assert hub.next_deadline() == 5.0
    assert hub.expire_due(6.0) == ["put-back", "tied", "tied-too", "put-back-too", "after"]
    assert hub.next_deadline() is None and len(hub._deadlines) == 0


def test_settled_prompts_do_not_pile_up_in_the_deadline_heap():
    # Lazy deletion must not turn into a leak: a long run of answered prompts leaves the
    # heap about as big as the open set.
    hub = InteractionHub(clock=ManualClock(), timeout_secs=60)
    hub.open("keeper", text("keep"))
    for i in range(5000):
        hub.open("a", text(f"q{i}"))
        hub.answer(InteractionResponse.text(f"q{i}", "x"))
    assert len(hub._deadlines) < 200
    assert hub.next_deadline() == 60.0


def test_settlements_record_how_and_when_and_stats_count_them():
    clock = ManualClock(5.0)
    hub = InteractionHub(clock=clock, timeout_secs=100)
    hub.open("a", InteractionRequest.confirm("c", "sure?"))
    clock.advance(2)
    hub.answer(InteractionResponse.approval("c", False))
    settled = hub.try_settlement("c")
    assert settled == PromptSettled(
        "a",
        "c",
        Settlement.ANSWERED,
        InteractionResponse.approval("c", False),
        5.0,
        7.0,
        InteractionKind.CONFIRM,
    )
    assert hub.try_settlement("never") is None
    hub.open("a", text("x"))
    hub.cancel("x")
    assert hub.stats() == HubStats(opened=2, answered=1, cancelled=1, expired=0, open=0)


def test_close_cancels_every_open_request_and_wakes_every_asker():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    askers = [Asker(hub, f"agent{i}", text(f"q{i}")) for i in range(4)]
    for i in range(4):
        recorder.wait_opened(f"q{i}")
    assert hub.close() == 4
    assert [a.result() for a in askers] == [InteractionResponse.neutral(f"q{i}") for i in range(4)]
    assert hub.pending() == [] and hub.close() == 0


def test_the_listener_hears_events_in_the_order_the_changes_happened():
    # The listener runs under the hub lock: an answer from another thread cannot report its
    # settlement before the opening it settles has been reported.
    events: list[tuple[str, str]] = []
    in_listener, release, answered = threading.Event(), threading.Event(), threading.Event()

    def slow_listener(event: HubEvent) -> None:
        if isinstance(event, PromptOpened):
            in_listener.set()
            assert release.wait(WAIT)
            events.append(("opened", event.request.id))
        else:
            events.append(("settled", event.request_id))

    hub = InteractionHub(clock=ManualClock(), listener=slow_listener)
    opener = threading.Thread(target=hub.open, args=("a", text("q")), daemon=True)
    opener.start()
    assert in_listener.wait(WAIT)

    def answer() -> None:
        hub.answer(InteractionResponse.text("q", "x"))
        answered.set()

    answerer = threading.Thread(target=answer, daemon=True)
    answerer.start()
    # The opening's report is still running, so the answer must wait for the lock.
    assert not answered.wait(0.2)
    release.set()
    opener.join(WAIT)
    answerer.join(WAIT)
    assert answered.is_set()
    assert events == [("opened", "q"), ("settled", "q")]


def test_a_raising_listener_is_logged_and_the_hub_keeps_serving_everyone(caplog):
    recorder = Recorder()

    def listener(event: HubEvent) -> None:
        agent = event.agent_id
        if agent == "bad":
            raise RuntimeError("listener bug")
        recorder(event)

    hub = InteractionHub(clock=ManualClock(), listener=listener)
    with caplog.at_level(logging.ERROR, logger="runtime.hub"):
        bad = Asker(hub, "bad", text("b"))
        good = Asker(hub, "good", text("g"))
        recorder.wait_opened("g")
        assert hub.try_request("b") == ("bad", text("b"))
        assert hub.answer(InteractionResponse.text("b", "bad answer"))
        assert hub.answer(InteractionResponse.text("g", "good answer"))
    assert bad.result().value == "bad answer"
    assert good.result().value == "good answer"
    assert recorder.summary() == [("opened", "g", None), ("settled", "g", Settlement.ANSWERED)]
    logged = [r for r in caplog.records if "hub listener raised" in r.getMessage()]
    assert len(logged) == 2 and all(r.exc_info for r in logged)


class FlakyClock(ManualClock):
    """A virtual clock that fails the next read when told to."""

    __slots__ = ("fail_next",)

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = False

    def now(self) -> float:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("clock broke")
        return super().now()


def test_an_error_while_one_request_is_handled_leaves_the_hub_serving_the_others():
    clock = FlakyClock()
    recorder = Recorder()
    hub = InteractionHub(clock=clock, timeout_secs=10, listener=recorder)
    hub.open("a", text("a1"))
    clock.fail_next = True
    with pytest.raises(RuntimeError, match="clock broke"):
        hub.open("b", text(""))
    clock.fail_next = True
    with pytest.raises(RuntimeError, match="clock broke"):
        hub.cancel("a1")
    # Neither failure changed anything: no half-open, no half-settled request.
    assert hub.pending() == [("a", text("a1"))]
    assert hub.stats() == HubStats(opened=1, answered=0, cancelled=0, expired=0, open=1)
    assert hub.open("b", text("")) == "b-free_text-1"
    assert hub.cancel("a1")
    with pytest.raises(DuplicateRequestError):
        hub.open("c", text("b-free_text-1"))
    assert hub.answer(InteractionResponse.text("b-free_text-1", "fine"))
    assert recorder.summary() == [
        ("opened", "a1", None),
        ("opened", "b-free_text-1", None),
        ("settled", "a1", Settlement.CANCELLED),
        ("settled", "b-free_text-1", Settlement.ANSWERED),
    ]


def test_a_clock_that_fails_while_expiring_leaves_the_prompt_due_at_the_next_look():
    clock = FlakyClock()
    hub = InteractionHub(clock=clock, timeout_secs=10)
    hub.open("a", text("a1"))
    clock.advance(10)
    clock.fail_next = True
    with pytest.raises(RuntimeError, match="clock broke"):
        hub.expire_due(10.0)
    # Nothing changed: still open, its deadline still queued (it was dropped before the
    # clock's read, and the prompt could never expire).
    assert hub.pending() == [("a", text("a1"))]
    assert hub.next_deadline() == 10.0
    assert hub.expire_due(10.0) == ["a1"]
    assert hub.stats() == HubStats(opened=1, answered=0, cancelled=0, expired=1, open=0)


def test_an_asks_token_firing_after_its_prompt_settled_leaves_a_newer_prompt_of_that_id(
    monkeypatch: pytest.MonkeyPatch,
):
    # The asker's wait has returned (answered) but its withdraw callback is still on the
    # token; another agent opens a prompt with the same id; then the token fires. The
    # withdraw is the asker's own prompt's, not whatever holds its id now.
    woke, go_on = threading.Event(), threading.Event()
    real_off_lane = parking.off_lane

    @contextlib.contextmanager
    def held_after_the_wait() -> Iterator[None]:
        with real_off_lane():
            yield
        woke.set()
        assert go_on.wait(WAIT)

    monkeypatch.setattr(interaction_hub, "off_lane", held_after_the_wait)
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), timeout_secs=0, listener=recorder)
    token = CancelToken()
    responses: list[InteractionResponse] = []
    asker = threading.Thread(
        target=lambda: responses.append(hub.ask("a", text("q", "first?"), cancel=token))
    )
    asker.start()
    recorder.wait_opened("q")
    assert hub.answer(InteractionResponse.text("q", "yes"))
    assert woke.wait(WAIT)
    hub.open("b", text("q", "second, another agent's"))
    token.cancel("a's job cancelled")
    go_on.set()
    asker.join(WAIT)
    assert not asker.is_alive()
    assert [r.value for r in responses] == ["yes"]
    assert hub.pending() == [("b", text("q", "second, another agent's"))]
    assert recorder.summary() == [
        ("opened", "q", None),
        ("settled", "q", Settlement.ANSWERED),
        ("opened", "q", None),
    ]


class FakeSlot:
    """Stands in for a lane job's permit and logs what ``off_lane`` does with it."""

    def __init__(self, log: list[str], parked: threading.Event, fail: bool = False) -> None:
        self.log, self.parked, self.fail = log, parked, fail

    def park(self) -> None:
        if self.fail:
            raise RuntimeError("lane broke")
        self.log.append("park")
        self.parked.set()

    def resume(self) -> None:
        self.log.append("resume")


def ask_in_a_lane_job(hub: InteractionHub, slot: FakeSlot, request_id: str) -> Asker:
    class LaneAsker(Asker):
        def _run(self) -> None:
            parking.current.slot = slot
            try:
                super()._run()
            finally:
                del parking.current.slot

    return LaneAsker(hub, "a", text(request_id))


def test_a_waiting_ask_steps_off_the_lane_for_the_whole_wait():
    log: list[str] = []
    parked = threading.Event()

    def listener(event: HubEvent) -> None:
        log.append("opened" if isinstance(event, PromptOpened) else "settled")

    hub = InteractionHub(clock=ManualClock(), listener=listener)
    asker = ask_in_a_lane_job(hub, FakeSlot(log, parked), "q")
    assert parked.wait(WAIT), "the asker never gave its lane permit back"
    hub.answer(InteractionResponse.text("q", "x"))
    assert asker.result().value == "x"
    assert log == ["opened", "park", "settled", "resume"]


def test_an_asker_whose_wait_fails_leaves_no_orphaned_prompt():
    recorder = Recorder()
    hub = InteractionHub(clock=ManualClock(), listener=recorder)
    asker = ask_in_a_lane_job(hub, FakeSlot([], threading.Event(), fail=True), "q")
    with pytest.raises(RuntimeError, match="lane broke"):
        asker.result()
    assert hub.pending() == []
    assert recorder.summary() == [("opened", "q", None), ("settled", "q", Settlement.CANCELLED)]
    hub.open("b", text("q"))  # the id is free again, and the hub still serves
    assert hub.pending() == [("b", text("q"))]


def test_racing_settlements_of_one_prompt_are_remembered_as_the_one_that_won():
    # Two answers and a cancel released together on a real clock (the hub reads a
    # `MonotonicClock` inline): one wins, the listener hears it alone, and `try_settlement`
    # gives back exactly that event, whoever won.
    recorder = Recorder()
    hub = InteractionHub(clock=MonotonicClock(), timeout_secs=60, listener=recorder)
    winners: dict[str, list[str]] = {}
    for round_ in range(200):
        request_id = f"q{round_}"
        hub.open("a", text(request_id))
        start = threading.Barrier(3, timeout=WAIT)
        won: list[str] = []

        def settle(
            name: str,
            request_id: str = request_id,
            start: threading.Barrier = start,
            won: list[str] = won,
        ) -> None:
            start.wait()
            if name == "cancel":
                ok = hub.cancel(request_id)
            else:
                ok = hub.answer(InteractionResponse.choose(request_id, len(name), name))
            if ok:
                won.append(name)

        threads = [
            threading.Thread(target=settle, args=(n,), daemon=True)
            for n in ("first", "second", "cancel")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT)
        assert not any(t.is_alive() for t in threads), "a thread hung"
        assert len(won) == 1
        winners[request_id] = won
    heard = [e for e in recorder.events if isinstance(e, PromptSettled)]
    assert len(heard) == 200
    for event in heard:
        assert hub.try_settlement(event.request_id) == event
        (winner,) = winners[event.request_id]
        if winner == "cancel":
            assert event.how is Settlement.CANCELLED
            assert event.response == InteractionResponse.neutral(event.request_id)
        else:
            assert event.response == InteractionResponse.choose(
                event.request_id, len(winner), winner
            )
        assert event.opened_at <= event.at
    assert hub.stats().open == 0 and hub.next_deadline() is None


def test_eight_threads_asking_and_answering_ten_thousand_prompts_lose_none():
    askers, answerers, per_asker = 4, 4, 2500
    opened: queue.Queue[str | None] = queue.Queue()
    seen: dict[str, list[str]] = {}
    seen_lock = threading.Lock()

    def listener(event: HubEvent) -> None:
        with seen_lock:
            if isinstance(event, PromptOpened):
                seen.setdefault(event.request.id, []).append("opened")
                opened.put(event.request.id)
            else:
                seen.setdefault(event.request_id, []).append(event.how.value)

    hub = InteractionHub(clock=MonotonicClock(), listener=listener)
    start = threading.Barrier(askers + answerers, timeout=WAIT)
    mismatches: list[tuple[str, InteractionResponse]] = []
    done = [0] * askers

    def ask_many(n: int) -> None:
        start.wait()
        for i in range(per_asker):
            request_id = f"t{n}-{i}"
            response = hub.ask(f"agent{n}", text(request_id))
            if response != InteractionResponse.text(request_id, request_id):
                mismatches.append((request_id, response))
            done[n] += 1

    def answer_many() -> None:
        start.wait()
        while (request_id := opened.get(timeout=WAIT)) is not None:
            assert hub.answer(InteractionResponse.text(request_id, request_id))

    threads = [threading.Thread(target=ask_many, args=(n,), daemon=True) for n in range(askers)]
    threads += [threading.Thread(target=answer_many, daemon=True) for _ in range(answerers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads[:askers]:
            thread.join(timeout=40)
        for _ in range(answerers):
            opened.put(None)
        for thread in threads[askers:]:
            thread.join(timeout=WAIT)
    finally:
        hub.close()  # never leave an asker stuck if something above failed
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert done == [per_asker] * askers
    assert mismatches == []
    total = askers * per_asker
    assert hub.stats() == HubStats(opened=total, answered=total, cancelled=0, expired=0, open=0)
    assert len(seen) == total
    assert all(history == ["opened", "answered"] for history in seen.values())


IDS = ["r0", "r1", "r2"]
AGENTS = ["a", "b", "c"]


class HubMachine(RuleBasedStateMachine):
    """Drives the hub from several agents against a model of the open set.

    Every request (by opening, not by id: ids are reused) is settled exactly once, every
    asker gets exactly the response its request settled with, ``pending()`` is the model's
    open set in opening order, and the listener heard exactly the model's events, in order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.recorder = Recorder()
        self.hub = InteractionHub(clock=self.clock, timeout_secs=10, listener=self.recorder)
        self.timeout = 10.0
        self.seq = 0
        self.minted = 0
        # id -> (agent, deadline, seq), in opening order
        self.open: dict[str, tuple[str, float | None, int]] = {}
        self.expected: list[tuple[str, str, Settlement | None]] = []
        self.askers: dict[str, Asker] = {}
        self.counts = dict.fromkeys(Settlement, 0)
        self.settled_seqs: list[int] = []

    def _opened(self, agent: str, request_id: str) -> None:
        self.seq += 1
        deadline = self.clock.now() + self.timeout if self.timeout else None
        self.open[request_id] = (agent, deadline, self.seq)
        self.expected.append(("opened", request_id, None))

    def _settled(self, request_id: str, how: Settlement, response: InteractionResponse) -> None:
        _, _, seq = self.open.pop(request_id)
        self.settled_seqs.append(seq)
        self.counts[how] += 1
        self.expected.append(("settled", request_id, how))
        asker = self.askers.pop(request_id, None)
        if asker is not None:
            assert asker.result() == response

    @rule(agent=st.sampled_from(AGENTS), request_id=st.sampled_from([*IDS, ""]))
    def open_request(self, agent: str, request_id: str) -> None:
        if request_id in self.open:
            with pytest.raises(DuplicateRequestError):
                self.hub.open(agent, text(request_id))
            return
        if not request_id:
            self.minted += 1
        expected = request_id or f"{agent}-free_text-{self.minted}"
        assert self.hub.open(agent, text(request_id)) == expected
        self._opened(agent, expected)

    @rule(agent=st.sampled_from(AGENTS))
    def ask(self, agent: str) -> None:
        before = len(self.recorder.events)
        asker = Asker(self.hub, agent, text(""))
        self.recorder.wait_for(lambda evs: len(evs) > before)
        event = self.recorder.events[before]
        assert isinstance(event, PromptOpened) and event.agent_id == agent
        self.minted += 1
        assert event.request.id == f"{agent}-free_text-{self.minted}"
        self._opened(agent, event.request.id)
        self.askers[event.request.id] = asker

    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from([*self.open, "ghost", *IDS]))
        response = InteractionResponse.text(request_id, f"answer {self.seq}")
        assert self.hub.answer(response) is (request_id in self.open)
        if request_id in self.open:
            self._settled(request_id, Settlement.ANSWERED, response)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from([*self.open, "ghost", *IDS]))
        assert self.hub.cancel(request_id) is (request_id in self.open)
        if request_id in self.open:
            self._settled(request_id, Settlement.CANCELLED, InteractionResponse.neutral(request_id))

    @rule(agent=st.sampled_from(AGENTS))
    def cancel_for_agent(self, agent: str) -> None:
        mine = [i for i, (a, _, _) in self.open.items() if a == agent]
        assert self.hub.cancel_for_agent(agent) == len(mine)
        for request_id in mine:
            self._settled(request_id, Settlement.CANCELLED, InteractionResponse.neutral(request_id))

    @rule(secs=st.integers(min_value=0, max_value=12))
    def advance_and_expire(self, secs: int) -> None:
        now = self.clock.advance(secs)
        due = sorted(
            (deadline, seq, i)
            for i, (_, deadline, seq) in self.open.items()
            if deadline is not None and deadline <= now
        )
        assert self.hub.expire_due(now) == [i for _, _, i in due]
        for _, _, request_id in due:
            self._settled(request_id, Settlement.EXPIRED, InteractionResponse.neutral(request_id))

    @rule(
        agent=st.sampled_from(AGENTS),
        request_id=st.sampled_from(IDS),
        # Absolute deadlines, some already past, some tied with the timeouts' deadlines: a
        # reopened prompt is where deadlines arrive out of order (and tie across the hub's
        # FIFO and heap of deadlines).
        deadline=st.sampled_from([None, 0.0, 5.0, 10.0, 15.0, 20.0, 30.0]),
    )
    def reopen(self, agent: str, request_id: str, deadline: float | None) -> None:
        if request_id in self.open:
            with pytest.raises(DuplicateRequestError):
                self.hub.reopen(agent, text(request_id), 0.0, deadline)
            return
        self.hub.reopen(agent, text(request_id), 0.0, deadline)
        self.seq += 1
        self.open[request_id] = (agent, deadline, self.seq)  # no opening is reported

    @rule(secs=st.sampled_from([0.0, 5.0, 10.0]))
    def set_timeout(self, secs: float) -> None:
        self.hub.set_timeout_secs(secs)
        self.timeout = secs

    @invariant()
    def pending_is_the_open_set(self) -> None:
        assert [(a, r.id) for a, r in self.hub.pending()] == [
            (a, i) for i, (a, _, _) in self.open.items()
        ]

    @invariant()
    def the_listener_heard_every_change_in_order(self) -> None:
        assert self.recorder.summary() == self.expected

    @invariant()
    def each_id_is_remembered_by_its_latest_settlement_as_it_was_heard(self) -> None:
        latest = {e.request_id: e for e in self.recorder.events if isinstance(e, PromptSettled)}
        for request_id, event in latest.items():
            assert self.hub.try_settlement(request_id) == event

    @invariant()
    def stats_agree_with_the_model(self) -> None:
        assert self.hub.stats() == HubStats(
            opened=self.seq,
            answered=self.counts[Settlement.ANSWERED],
            cancelled=self.counts[Settlement.CANCELLED],
            expired=self.counts[Settlement.EXPIRED],
            open=len(self.open),
        )

    @invariant()
    def next_deadline_is_the_models_earliest(self) -> None:
        deadlines = [d for _, d, _ in self.open.values() if d is not None]
        # The floor that lets a tick skip the lock is a bound on them (read before
        # `next_deadline`, which makes it exact again).
        floor = self.hub._deadlines.floor
        assert floor <= min(deadlines, default=math.inf)
        assert self.hub.next_deadline() == (min(deadlines) if deadlines else None)

    def teardown(self) -> None:
        open_ids = list(self.open)
        # Close first, so that no asker is left blocked even when a step above failed.
        assert self.hub.close() == len(open_ids)
        for request_id in open_ids:
            self._settled(request_id, Settlement.CANCELLED, InteractionResponse.neutral(request_id))
        assert sorted(self.settled_seqs) == list(range(1, self.seq + 1))
        self.the_listener_heard_every_change_in_order()


HubMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
test_the_hub_settles_every_request_exactly_once = HubMachine.TestCase


def test_with_id_copies_every_field_of_a_request():
    request = InteractionRequest("", InteractionKind.CHOICE, "pick", ("a", "b"), "s", False, [1])
    copy = request.with_id("r9")
    assert copy == dataclasses.replace(request, id="r9")
    # with_id spells the fields out: a new field must be added there too.
    assert [f.name for f in dataclasses.fields(InteractionRequest)] == [
        "id",
        "kind",
        "prompt",
        "choices",
        "stage",
        "required",
        "payload",
    ]


def test_the_latest_ten_thousand_settlements_are_remembered_and_older_ones_forgotten():
    hub = InteractionHub(clock=ManualClock(), timeout_secs=0)
    for i in range(25_000):
        hub.open("a", InteractionRequest.free_text(f"q{i}", "go on?"))
        hub.answer(InteractionResponse.text(f"q{i}", str(i)))
    latest = [hub.try_settlement(f"q{i}") for i in range(15_000, 25_000)]
    assert [s.response.value if s else None for s in latest] == [
        str(i) for i in range(15_000, 25_000)
    ]
    assert hub.try_settlement("q0") is None  # bounded: the oldest are gone
    assert len(hub._recent) + len(hub._older) <= 20_000


class _FlaggedResponse(InteractionResponse):
    """A response of a subclass: the hub must remember it whole, class and all."""


def test_a_remembered_settlement_is_the_event_the_listener_heard_whatever_the_response():
    clock = ManualClock(5.0)
    recorder = Recorder()
    hub = InteractionHub(clock=clock, timeout_secs=10, listener=recorder)
    responses = {
        "t": InteractionResponse.text("t", "yes"),
        "c": InteractionResponse.choose("c", 2, "blue"),
        "a": InteractionResponse.approval("a", False, "no"),
        "s": _FlaggedResponse("s", "flagged"),
    }
    hub.open("x", InteractionRequest.choice("c", "which?", ["red", "green", "blue"]))
    hub.open("x", InteractionRequest.tool_approval("a", "rm", {"path": "/"}))
    for request_id in ("t", "s", "gone", "late"):
        hub.open("y", InteractionRequest.free_text(request_id, "go on?"))
    clock.advance(3.0)
    for response in responses.values():
        assert hub.answer(response)
    hub.cancel("gone")
    clock.advance(10.0)
    assert hub.expire_due(clock.now()) == ["late"]
    heard = {e.request_id: e for e in recorder.events if isinstance(e, PromptSettled)}
    assert set(heard) == {"t", "c", "a", "s", "gone", "late"}
    for request_id, event in heard.items():
        assert hub.try_settlement(request_id) == event
    remembered = hub.try_settlement("s")
    assert remembered is not None and type(remembered.response) is _FlaggedResponse
    assert hub.try_settlement("a") == PromptSettled(
        "x",
        "a",
        Settlement.ANSWERED,
        InteractionResponse("a", "no", None, False),
        5.0,
        8.0,
        InteractionKind.TOOL_APPROVAL,
    )


def test_remembered_settlements_leave_nothing_for_the_collector_to_walk():
    # Every finished agent's settlement stays remembered for the next 10,000-20,000: kept as
    # its event and response, they were two objects each that every full collection walked.
    import gc

    hub = InteractionHub(clock=ManualClock(), timeout_secs=0)
    for i in range(1_000):
        request_id = hub.open(f"walked{i}", InteractionRequest.free_text("", "go on?"))
        assert hub.answer(InteractionResponse.text(request_id, f"answer {i}"))
    gc.collect()
    # This hub's alone (other tests' objects may still be alive in this process).
    alive = [
        o
        for o in gc.get_objects()
        if isinstance(o, PromptSettled | InteractionResponse) and o.request_id.startswith("walked")
    ]
    assert alive == []
    settled = hub.try_settlement("walked999-free_text-1000")
    assert settled is not None and settled.response.value == "answer 999"


def test_a_reopened_id_is_remembered_by_its_latest_settlement():
    hub = InteractionHub(clock=ManualClock(), timeout_secs=0)
    hub.open("a", InteractionRequest.free_text("same", "first?"))
    hub.answer(InteractionResponse.text("same", "first"))
    for i in range(10_000):  # the first settlement moves to the older generation
        hub.open("a", InteractionRequest.free_text(f"q{i}", "go on?"))
        hub.cancel(f"q{i}")
    hub.open("a", InteractionRequest.free_text("same", "second?"))
    hub.answer(InteractionResponse.text("same", "second"))
    settled = hub.try_settlement("same")
    assert settled is not None and settled.response.value == "second"


def test_the_open_set_lets_its_grown_tables_go_once_a_burst_of_prompts_has_settled():
    import sys

    hub = InteractionHub(clock=ManualClock())
    empty = sys.getsizeof({})
    ids = [hub.open(f"a{i}", text(f"q{i}")) for i in range(3_000)]
    assert sys.getsizeof(hub._open) > 50 * empty
    for request_id in ids[:-1]:
        hub.answer(InteractionResponse.text(request_id, "ok"))
    assert sys.getsizeof(hub._open) > 50 * empty  # not empty yet: the table stays
    hub.cancel(ids[-1])
    assert hub._open == {} and hub._by_agent is None
    assert sys.getsizeof(hub._open) == empty
    # The open set works on as before.
    assert hub.open("b", text("again")) == "again"
    assert hub.pending() == [("b", text("again"))]
    assert hub.stats() == HubStats(opened=3_001, answered=2_999, cancelled=1, expired=0, open=1)


def test_prompts_opened_at_one_instant_share_one_deadline_and_a_new_timeout_gets_its_own():
    # Memory: a virtual-time world opens a tick's prompts at one `now`; a float each was 24 B.
    clock = ManualClock()
    hub = InteractionHub(clock=clock, timeout_secs=30)
    hub.open("a", text("p1"))
    hub.open("b", text("p2"))
    hub.set_timeout_secs(60)
    hub.open("c", text("p3"))
    clock.advance(1)
    hub.open("d", text("p4"))
    first, second, *_ = hub.opened()
    assert first.deadline is second.deadline
    assert [o.deadline for o in hub.opened()] == [30.0, 30.0, 60.0, 61.0]
    assert hub.expire_due(30.0) == ["p1", "p2"] and hub.next_deadline() == 60.0
