"""Cancel tokens fire once, trees follow their parents, and interrupts re-arm per turn."""

import gc
import os
import pickle
import signal
import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from runtime import Cancelled, CancelToken, InterruptHandle, ProcessEnd, run_process
from tests.conftest import callbacks_of


def test_an_idempotent_cancel_keeps_the_first_reason():
    token = CancelToken()
    assert token.cancel("first") is True
    assert token.cancel("second") is False
    assert token.cancelled
    assert token.reason == "first"


def test_children_follow_their_parent_and_not_the_reverse():
    parent = CancelToken()
    child = parent.child()
    grandchild = child.child()
    other = parent.child()
    other.cancel("only me")
    assert not parent.cancelled and not child.cancelled
    parent.cancel("stop")
    assert child.reason == "stop" and grandchild.reason == "stop"


def test_a_dropped_child_leaves_nothing_in_its_parent_and_a_kept_one_still_follows():
    parent = CancelToken()
    for _ in range(1000):
        parent.child()  # a child per call of a long turn, dropped when the call ends
    grandchild = parent.child().child()  # the child between them is dropped at once
    kept = parent.child()
    gc.collect()
    assert len(callbacks_of(parent)) == 2  # the kept child's link and the grandchild's
    parent.cancel("stop")
    assert kept.reason == "stop" and grandchild.reason == "stop"


def test_a_child_that_dies_while_its_parent_is_locked_never_deadlocks():
    # A child in a reference cycle dies in a collection, which an allocation made under
    # the parent's lock can set off on the same thread: its finalizer must not wait.
    parent = CancelToken()
    child = parent.child()
    child.add_callback(lambda _token, me=child: me)  # a cycle: child -> callback -> child
    del child
    gc.disable()  # the collection below is the one that finds it
    collected = threading.Event()

    def collect_under_the_lock() -> None:
        with parent._lock:
            gc.collect()  # hangs here if the finalizer waits for the lock
        collected.set()

    try:
        threading.Thread(target=collect_under_the_lock, daemon=True).start()
        assert collected.wait(10), "the dead child's finalizer waited for its parent's lock"
    finally:
        gc.enable()
    assert parent.cancel("stop")


def tokens_sharing_a_lock() -> tuple[CancelToken, CancelToken]:
    """Two tokens that share one of the tokens' locks."""
    made = [CancelToken() for _ in range(200)]
    for i, first in enumerate(made):
        for second in made[i + 1 :]:
            if second._lock is first._lock:
                return first, second
    raise AssertionError("200 tokens and no two share a lock")


def in_a_thread(body, what: str) -> None:
    """Run ``body`` on a thread of its own; fail (never hang) if it does not end in 10 s."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"deadlocked: {what}"
    if errors:
        raise errors[0]


def test_a_token_used_while_another_holds_the_same_lock_on_this_thread_does_not_deadlock():
    # A finalizer or a signal handler can run inside a token's few locked lines, on the
    # same thread, and use any other token: one that shares the lock must not wait for it.
    first, second = tokens_sharing_a_lock()
    seen: list[str] = []

    def use_the_other() -> None:
        with first._lock:
            second.add_callback(lambda t: seen.append(f"fired: {t.reason}"))
            second.add_callback(lambda t: seen.append("second callback"))
            assert second.wait(0) is False
            assert second.cancel("from a finalizer") is True
            assert second.wait(0) is True
        assert first.cancel("later") is True

    in_a_thread(use_the_other, "a token used under another token's shared lock")
    assert seen == ["fired: from a finalizer", "second callback"]


def test_a_token_fired_on_this_thread_inside_its_own_add_callback_runs_the_callback():
    # Between reading the one callback it keeps and storing the pair, `add_callback` makes
    # a list: a collection that allocation sets off may run a finalizer that fires this
    # very token, on this thread (its lock is re-entrant). The callback being added must
    # still run, once. Here the first callback fires the token when `add_callback` looks
    # at its class, a step before the allocation, on the same thread.
    calls: list[str] = []
    token = CancelToken()

    class FiresWhenLookedAt:
        def __call__(self, fired: CancelToken) -> None:
            calls.append("first")

        @property  # type: ignore[misc]
        def __class__(self) -> type:
            token.cancel("fired in between")
            return FiresWhenLookedAt

    token.add_callback(FiresWhenLookedAt())
    in_a_thread(lambda: token.add_callback(lambda t: calls.append("second")), "re-entered")
    assert token.reason == "fired in between"
    assert calls == ["first", "second"]


def test_a_dropped_child_leaves_its_parent_while_a_token_of_the_same_lock_is_busy():
    # The child's finalizer waits out another thread's few locked lines: skipping them
    # left the link behind whenever any token sharing the lock was in use.
    parent, other = tokens_sharing_a_lock()
    children = [parent.child()]
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with other._lock:
            holding.set()
            assert release.wait(10)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert holding.wait(10)
    dropped = threading.Event()

    def drop_a_child() -> None:
        children.clear()  # the last reference: its finalizer unlinks it, on this thread
        dropped.set()

    dropper = threading.Thread(target=drop_a_child, daemon=True)
    dropper.start()
    assert not dropped.wait(0.2)  # it waits for the lock, briefly held
    release.set()
    assert dropped.wait(10)
    holder.join(10)
    assert callbacks_of(parent) == []


def test_a_fork_while_a_token_lock_is_held_leaves_every_token_usable_in_the_child():
    busy = CancelToken()
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with busy._lock:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: one thread, the locks as the fork found them
        # On its own thread (a thread started in the child may reuse the dead holder's
        # ident, and so own its lock); SIGALRM ends it if a token hangs.
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not pytest-timeout's handler
        signal.alarm(10)
        try:
            for _ in range(130):  # every lock twice over
                CancelToken().cancel("x")
        finally:
            os._exit(0)
    release.set()
    holder.join(10)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "a token hung in the child"


def test_a_callback_unequal_to_itself_is_still_removed():
    class Contrary:
        def __call__(self, token: CancelToken) -> None:
            raise AssertionError("removed: never runs")

        def __eq__(self, other: object) -> bool:
            return False

        __hash__ = object.__hash__

    token, contrary = CancelToken(), Contrary()
    token.add_callback(contrary)
    assert token.remove_callback(contrary)
    token.add_callback(print)
    token.add_callback(contrary)
    assert token.remove_callback(contrary)
    token.cancel("x")


def test_one_callback_is_kept_without_a_list_and_removed_by_equality():
    class Owner:
        def note(self, token: CancelToken) -> None:
            pass

    owner, token = Owner(), CancelToken()
    token.add_callback(owner.note)
    assert token._callbacks.__class__ is not list
    assert token.remove_callback(owner.note)  # a bound method made again: equal, not same
    assert not token.remove_callback(owner.note)
    token.add_callback(owner.note)
    token.add_callback(print)
    assert token.remove_callback(owner.note) and token.remove_callback(print)
    assert not token.remove_callback(print)
    token.cancel("x")
    assert not token.remove_callback(owner.note)


def test_a_child_of_a_cancelled_token_is_born_cancelled():
    parent = CancelToken()
    parent.cancel("gone")
    assert parent.child().reason == "gone"


def test_callbacks_run_exactly_once_including_one_added_after_the_cancel():
    token = CancelToken()
    calls: list[str] = []
    token.add_callback(lambda t: calls.append(f"before:{t.reason}"))
    token.cancel("x")
    token.cancel("y")
    token.add_callback(lambda t: calls.append(f"after:{t.reason}"))
    assert calls == ["before:x", "after:x"]


def test_a_raising_callback_does_not_stop_the_others_or_the_canceller(caplog):
    token = CancelToken()
    calls: list[int] = []

    def boom(_t: CancelToken) -> None:
        raise RuntimeError("callback failed")

    token.add_callback(lambda t: calls.append(1))
    token.add_callback(boom)
    token.add_callback(lambda t: calls.append(3))
    assert token.cancel() is True
    assert calls == [1, 3]
    assert "callback failed" in caplog.text


def test_a_removed_callback_never_runs():
    token = CancelToken()
    calls: list[int] = []

    def note(_t: CancelToken) -> None:
        calls.append(1)

    token.add_callback(note)
    assert token.remove_callback(note) is True
    assert token.remove_callback(note) is False
    token.cancel()
    assert calls == []


def test_wait_returns_when_another_thread_cancels():
    token = CancelToken()
    waiting = threading.Event()
    got: list[bool] = []

    def waiter() -> None:
        waiting.set()
        got.append(token.wait(timeout=10))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(timeout=5)
    token.cancel()
    thread.join(timeout=5)
    assert got == [True]
    assert CancelToken().wait(timeout=0.01) is False


def test_raise_if_cancelled_raises_cancelled_with_the_reason():
    token = CancelToken()
    token.raise_if_cancelled()
    token.cancel("because")
    with pytest.raises(Cancelled) as caught:
        token.raise_if_cancelled()
    assert caught.value.reason == "because"


def test_a_pickled_token_arrives_fresh_in_the_same_state():
    live = pickle.loads(pickle.dumps(CancelToken()))
    assert not live.cancelled
    done = CancelToken()
    done.cancel("late")
    assert pickle.loads(pickle.dumps(done)).reason == "late"


def test_concurrent_cancels_fire_callbacks_exactly_once():
    for _ in range(50):
        token = CancelToken()
        calls: list[int] = []
        token.add_callback(lambda t, calls=calls: calls.append(1))
        barrier = threading.Barrier(4, timeout=5)
        winners: list[bool] = []

        def cancel(barrier=barrier, token=token, winners=winners) -> None:
            barrier.wait()
            winners.append(token.cancel("race"))

        threads = [threading.Thread(target=cancel) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=5)
        assert calls == [1]
        assert winners.count(True) == 1


class TokenTree(RuleBasedStateMachine):
    """Random trees of tokens: a token is cancelled iff it or an ancestor was cancelled,
    its reason is the first reason that reached it, and its callbacks ran exactly once."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[CancelToken] = [CancelToken()]
        self.parent: list[int | None] = [None]
        self.expected_reason: list[str | None] = [None]
        self.calls: list[int] = [0]
        self.tokens[0].add_callback(self._counter(0))
        self.reasons = 0

    def _counter(self, index: int):
        def count(_t: CancelToken) -> None:
            self.calls[index] += 1

        return count

    @rule(data=st.data())
    def make_child(self, data: st.DataObject) -> None:
        parent = data.draw(st.integers(0, len(self.tokens) - 1))
        child = self.tokens[parent].child()
        index = len(self.tokens)
        self.tokens.append(child)
        self.parent.append(parent)
        self.expected_reason.append(self.expected_reason[parent])
        self.calls.append(0)
        child.add_callback(self._counter(index))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.tokens) - 1))
        self.reasons += 1
        reason = f"r{self.reasons}"
        fired = self.tokens[index].cancel(reason)
        assert fired == (self.expected_reason[index] is None)
        self._spread(index, reason)

    def _spread(self, index: int, reason: str) -> None:
        if self.expected_reason[index] is not None:
            return
        self.expected_reason[index] = reason
        for child, parent in enumerate(self.parent):
            if parent == index:
                self._spread(child, reason)

    @precondition(lambda self: len(self.tokens) > 1)
    @rule()
    def add_late_callback(self) -> None:
        extra: list[int] = []
        token = self.tokens[-1]
        token.add_callback(lambda t: extra.append(1))
        assert extra == ([1] if token.cancelled else [])

    @invariant()
    def state_matches_the_model(self) -> None:
        for token, reason, calls in zip(self.tokens, self.expected_reason, self.calls, strict=True):
            assert token.reason == reason
            assert calls == (0 if reason is None else 1)


TestTokenTree = TokenTree.TestCase
TestTokenTree.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_an_interrupt_handle_starts_untriggered():
    handle = InterruptHandle()
    assert not handle.is_interrupted()
    assert not handle.token().cancelled


def test_interrupt_then_rearm_clears_and_the_old_token_stays_cancelled():
    handle = InterruptHandle()
    old = handle.token()
    assert handle.interrupt() is True
    assert handle.is_interrupted() and old.cancelled
    fresh = handle.rearm()
    assert not handle.is_interrupted()
    assert handle.token() is fresh and not fresh.cancelled
    assert old.cancelled


def test_two_references_to_one_handle_share_state():
    handle = InterruptHandle()
    alias = handle
    alias.interrupt()
    assert handle.is_interrupted()
    handle.rearm()
    assert not alias.is_interrupted()


def _process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A group whose members are all zombies (awaiting a reaper) is dead for our purpose.
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_a_cross_thread_interrupt_aborts_a_subprocess_wait():
    handle = InterruptHandle()
    started = threading.Event()
    outcome: list[tuple[ProcessEnd, float, int]] = []

    def worker() -> None:
        token = handle.token()
        started.set()
        result = run_process(["sleep", "5"], cancel=token)
        outcome.append((result.ended, result.elapsed, result.pid))

    thread = threading.Thread(target=worker)
    thread.start()
    assert started.wait(timeout=5)
    time.sleep(0.25)
    interrupted_at = time.monotonic()
    handle.interrupt()
    thread.join(timeout=5)
    assert not thread.is_alive()
    ended, elapsed, pid = outcome[0]
    assert ended is ProcessEnd.CANCELLED
    assert elapsed < 2.0
    assert time.monotonic() - interrupted_at < 1.0
    assert not _process_group_alive(pid)
