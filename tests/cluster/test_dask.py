"""Tool jobs on a Dask cluster: picklable jobs, the Dask backend, capacity, cancels, deaths.

The cluster tests share one 2-worker `LocalCluster` per module (starting one takes about a
second); only tests about a cluster's own life start another (8 workers for capacity, 1 for
closing). Tools and behaviours are module-level so that workers (and replays) import them by
name. No warning filter is needed: the one warning distributed gives here on startup ("Port
8787 is already in use", when another cluster runs) cannot happen, since `DaskBackend.local`
puts the scheduler's HTTP server on a random port.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import os
import pickle
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    AskUserTool,
    CallTools,
    CancelToken,
    ConfigError,
    InteractionResponse,
    Journal,
    LaneStats,
    ManualClock,
    StatusKind,
    ToolCall,
    ToolJob,
    ToolLane,
    ToolOutcome,
    ToolRegistry,
    World,
    replay,
)
from runtime.cluster import DaskBackend, tool_backend
from runtime.lane import BackendInfo
from runtime.world.effects import HubRef, ToolBatch
from tests.conftest import TICKWORK, wait_for

try:
    import distributed
except ImportError:  # the `dask` extra is not installed
    distributed = None

needs_dask = pytest.mark.skipif(
    distributed is None, reason="needs the `distributed` package: pip install -e '.[dask]'"
)

WAIT = 30.0  # the longest any single wait may take before the test fails


def digest_tool(args: dict[str, Any], ctx: Any) -> str:
    """CPU work: ``rounds`` chained blake2b hashes of ``text``."""
    data = str(args["text"]).encode()
    for _ in range(int(args.get("rounds", 1))):
        data = hashlib.blake2b(data).digest()
    return data.hex()[:16]


def nap_tool(args: dict[str, Any], ctx: Any) -> float:
    time.sleep(float(args["seconds"]))
    return float(args["seconds"])


def _bump(path: str, delta: int) -> None:
    """Add ``delta`` to the running count in ``path`` and keep its peak (file-locked)."""
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # across worker processes; released on close
        now, peak = map(int, f.read().split())
        now += delta
        f.seek(0)
        f.truncate()
        f.write(f"{now} {max(peak, now)}")


def occupy_tool(args: dict[str, Any], ctx: Any) -> int:
    """Count itself as running in the counter file for ``hold`` seconds; returns its pid."""
    _bump(args["path"], +1)
    try:
        time.sleep(float(args["hold"]))
    finally:
        _bump(args["path"], -1)
    return os.getpid()


def pid_then_wait_tool(args: dict[str, Any], ctx: Any) -> str:
    """Write this process's pid to ``path`` (the job has started), then wait ``seconds``."""
    tmp = Path(f"{args['path']}.tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(args["path"])  # atomic: the test never reads half a pid
    ctx.cancel.wait(float(args["seconds"]))  # on a worker, nothing fires this token
    return "survived"


def append_tool(path: str) -> None:
    with open(path, "a") as f:
        f.write("ran\n")


def make_tools() -> ToolRegistry:
    tools = ToolRegistry()
    tools.tool("digest")(digest_tool)
    tools.tool("nap")(nap_tool)
    tools.tool("occupy")(occupy_tool)
    tools.tool("pid_then_wait")(pid_then_wait_tool)
    return tools


def hashing_agent(turn):
    """Two dependent batches of CPU work; the result depends on every output."""
    first = yield CallTools(ToolCall("c1", "digest", {"text": turn.message, "rounds": 200}))
    seed = first[0].output
    second = yield CallTools(
        ToolCall("c2", "digest", {"text": seed, "rounds": 100}),
        ToolCall("c3", "digest", {"text": f"{seed}/{turn.message}", "rounds": 100}),
    )
    return [result.output for result in second]


def call_once(turn):
    """One call named by the message, ``{"tool": ..., "args": ...}``; returns its result."""
    (result,) = yield CallTools(ToolCall("c1", turn.message["tool"], turn.message["args"]))
    return {"output": result.output, "error": result.error}


def ask_through_a_tool(turn):
    (result,) = yield CallTools(ToolCall("c1", "ask_user", {"prompt": turn.message}))
    return {"output": result.output, "error": result.error}


def run_world(world: World, timeout: float = WAIT) -> None:
    world.run_until_idle(timeout=timeout)


def settled(lane: ToolLane) -> LaneStats:
    """The lane's counters once nothing is in flight (an outcome is delivered, and so may be
    seen by the world, a moment before its job is counted as ended)."""
    wait_for(lambda: lane.stats().in_flight == 0, WAIT, f"lane {lane.name!r} to settle")
    return lane.stats()


def assert_counters_balance(lane: ToolLane) -> None:
    s = settled(lane)
    assert s.enqueued == s.started + s.abandoned + s.queued
    assert s.started == s.finished + s.failed + s.dropped + s.busy + s.parked
    assert (s.queued, s.busy, s.parked) == (0, 0, 0)


# Without a cluster: the job is plain data, and local_only tools stay local.


def test_a_tool_batch_pickles_and_its_copy_cannot_reach_the_hub(make_world):
    world = make_world(tools=make_tools())
    batch = ToolBatch(
        world.tools, (ToolCall("c1", "digest", {"text": "x"}),), "a1", HubRef(world.hub)
    )
    copy = pickle.loads(pickle.dumps(batch))
    assert batch.hub is not None and batch.hub.resolve() is world.hub
    assert copy.hub is not None and copy.hub.resolve() is None  # detached, even in-process
    assert copy.tools.names() == world.tools.names()
    assert copy(CancelToken()) == batch(CancelToken())


def test_ask_user_on_the_thread_lane_still_asks_through_the_hub(make_world):
    tools = ToolRegistry()
    tools.add(AskUserTool())
    # No deadline: a job waiting on a person ends `run_until_idle` as an open prompt does
    # (with one, virtual time would skip to its expiry), and the test answers it then.
    world = make_world(tools=tools, lockstep=False, interaction_timeout_secs=0)
    agent = world.spawn(ask_through_a_tool, "colour?")
    run_world(world)
    ((_, request),) = world.hub.pending()
    world.hub.answer(InteractionResponse.text(request.id, "teal"))
    run_world(world)
    assert world.result(agent) == {"output": "teal", "error": None}
    assert settled(world.lane).parks == 1  # the wait stepped off the lane


def test_a_world_with_a_tool_executor_refuses_local_only_tools():
    tools = make_tools()
    tools.add(AskUserTool())
    with (
        concurrent.futures.ThreadPoolExecutor(2) as pool,
        pytest.raises(
            ConfigError, match="local_only tools cannot run on `tool_executor`: 'ask_user'"
        ),
    ):
        World(tools=tools, tool_executor=pool)


class FakeBackend:
    """A `ToolBackend` that records whether it was closed."""

    def __init__(self, executor: concurrent.futures.Executor) -> None:
        self.executor = executor
        self.closed = False

    def info(self) -> BackendInfo:
        return BackendInfo("fake", "", 1, 1)

    def close(self) -> None:
        self.closed = True


def test_a_refused_backend_is_closed_and_an_accepted_one_closes_with_the_world():
    tools = ToolRegistry()
    tools.add(AskUserTool())
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        refused = FakeBackend(pool)
        with pytest.raises(ConfigError):
            World(tools=tools, tool_executor=refused)
        assert refused.closed  # handed over, so never leaked
        accepted = FakeBackend(pool)
        world = World(tools=make_tools(), tool_executor=accepted)
        assert not accepted.closed
        world.close()
        assert accepted.closed
        borrowed = World(tools=make_tools(), tool_executor=pool)  # a bare executor: borrowed
        borrowed.close()
        assert pool.submit(lambda: 1).result(WAIT) == 1


def test_a_tool_that_asks_on_an_executor_lane_gets_an_error_result_and_opens_no_prompt():
    with (
        concurrent.futures.ThreadPoolExecutor(2) as pool,
        World(clock=ManualClock(), tool_executor=pool) as world,  # closed first: no stuck job
    ):
        world.tools.add(AskUserTool())  # registered after the check: still cannot reach the hub
        agent = world.spawn(ask_through_a_tool, "colour?")
        run_world(world, timeout=5)
        result = world.result(agent)
        assert world.hub.pending() == [] and world.lane.stats().parks == 0
    assert result["output"] is None
    assert "cannot ask a person: no interaction hub was given" in result["error"]


def test_backend_settings_are_checked_before_anything_starts(monkeypatch):
    assert tool_backend("threads") is None
    with pytest.raises(ConfigError, match="`lane_backend` must be one of threads, dask"):
        tool_backend("grpc")
    with pytest.raises(ConfigError, match='"dask" needs `scheduler_address`'):
        tool_backend("dask")
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were missing
    with pytest.raises(ConfigError, match=r"needs the `distributed` package \(pip install"):
        tool_backend("dask-local", workers=2)


def test_a_thread_world_reports_its_lane_threads(make_world):
    world = make_world(tools=make_tools())
    world.spawn(call_once, {"tool": "digest", "args": {"text": "x"}})
    run_world(world)
    info = world.backend_info()
    assert info.kind == "threads" and info.workers == world.lane.stats().threads >= 1


# On a cluster.


@pytest.fixture(scope="module")
def backend() -> Iterator[DaskBackend]:
    """One 2-worker local cluster for the module's tests (restored if a test kills one)."""
    backend = DaskBackend.local(2)
    try:
        yield backend
    finally:
        backend.close()


@pytest.mark.dask
@needs_dask
def test_two_hundred_agents_on_a_two_worker_cluster_end_as_on_the_thread_lane(backend):
    finals = {}
    for name, executor in (("threads", None), ("dask", backend.executor)):
        with World(
            seed=3, clock=ManualClock(), tools=make_tools(), tool_executor=executor
        ) as world:
            agents = [world.spawn(hashing_agent, f"task {i}") for i in range(200)]
            run_world(world)
            assert all(world.status(a).kind is StatusKind.COMPLETE for a in agents)
            finals[name] = (world.digest(), {a: world.result(a) for a in agents})
            stats = settled(world.lane)
            assert (stats.finished, stats.failed) == (400, 0)
            if executor is not None:
                assert stats.threads == 0  # the lane started no threads: Dask ran every job
    assert finals["dask"] == finals["threads"]


@pytest.mark.dask
@needs_dask
def test_identical_calls_are_never_merged_into_one_task(backend, tmp_path):
    path = str(tmp_path / "runs")
    futures = [backend.executor.submit(append_tool, path) for _ in range(2)]
    concurrent.futures.wait(futures, timeout=WAIT)
    assert Path(path).read_text() == "ran\nran\n"  # pure=True would have run it once


@pytest.mark.dask
@needs_dask
def test_a_job_cancelled_on_the_cluster_leaves_the_counters_straight(backend, tmp_path):
    started = tmp_path / "started"
    with World(tools=make_tools(), tool_capacity=1, tool_executor=backend.executor) as world:
        slow = world.spawn(
            call_once, {"tool": "pid_then_wait", "args": {"path": str(started), "seconds": 1}}
        )
        queued = world.spawn(call_once, {"tool": "digest", "args": {"text": "q"}})
        last = world.spawn(call_once, {"tool": "digest", "args": {"text": "z"}})
        world.start()
        wait_for(started.exists, WAIT, "the slow job to start on a worker")
        world.cancel(queued)  # still in the lane's queue: abandoned, never sent
        world.cancel(slow)  # running on a worker: its future is cancelled, outcome dropped
        wait_for(lambda: world.status(last).kind is StatusKind.COMPLETE, WAIT, "the last job")
        world.stop()
        assert world.status(slow).kind is StatusKind.CANCELLED
        assert world.status(queued).kind is StatusKind.CANCELLED
        s = settled(world.lane)
        assert (s.enqueued, s.started, s.abandoned, s.dropped, s.finished) == (3, 2, 1, 1, 1)
        assert_counters_balance(world.lane)
        wait_for(lambda: backend.executor.in_flight() == 0, WAIT, "no task left in flight")


@pytest.mark.dask
@needs_dask
def loop_thread_of(backend: DaskBackend) -> int:
    """The ident of the client's event-loop thread (where Dask settles futures)."""
    found: list[int] = []
    ready = threading.Event()
    backend.client.loop.add_callback(lambda: (found.append(threading.get_ident()), ready.set()))
    assert ready.wait(WAIT)
    return found[0]


def test_cancels_racing_completions_leave_the_counters_straight(backend):
    outcomes: list[ToolOutcome] = []
    delivered_on: set[int] = set()

    def on_outcome(outcome: ToolOutcome) -> None:
        delivered_on.add(threading.get_ident())
        outcomes.append(outcome)

    lane = ToolLane(4, name="race", executor=backend.executor, on_outcome=on_outcome)
    tools, rng = make_tools(), random.Random(9)
    jobs = []
    for i in range(150):
        call = ToolCall(f"c{i}", "nap", {"seconds": rng.uniform(0, 0.01)})
        jobs.append(ToolJob("a", f"b{i}", ToolBatch(tools, (call,), "a"), (call,)))
    try:
        for job in jobs:
            lane.submit(job)
        for job in rng.sample(jobs, 75):
            time.sleep(rng.uniform(0, 0.004))
            job.cancel.cancel("race")
        wait_for(lambda: lane.stats().in_flight == 0, WAIT, "the lane to drain")
    finally:
        lane.close(WAIT)
    s = lane.stats()
    assert_counters_balance(lane)
    assert s.enqueued == 150 and s.failed == 0
    delivered = [outcome.batch_id for outcome in outcomes]
    assert len(delivered) == len(set(delivered)) == s.finished  # each at most once
    cancelled = {job.batch_id for job in jobs if job.cancel.cancelled}
    assert {job.batch_id for job in jobs} - cancelled <= set(delivered)  # the rest all came
    assert len(cancelled - set(delivered)) == s.dropped + s.abandoned
    assert s.dropped + s.abandoned > 0
    assert loop_thread_of(backend) in delivered_on  # the path under test: Dask's loop thread
    wait_for(lambda: backend.executor.in_flight() == 0, WAIT, "no task left in flight")


@pytest.mark.dask
@needs_dask
def test_a_cancel_made_on_the_clients_event_loop_thread_stops_a_waiting_task(backend, tmp_path):
    # The lane cancels from whichever thread launches a job, and Dask runs the lane's done
    # callbacks on its event-loop thread. Dask's own executor cannot cancel from there.
    executor, ran = backend.executor, tmp_path / "ran"
    blockers = [executor.submit(nap_tool, {"seconds": 0.5}, None) for _ in range(2)]
    waiting = executor.submit(append_tool, str(ran))  # both workers busy: it waits
    done = threading.Event()

    def cancel_on_the_loop() -> None:
        waiting.cancel()
        done.set()

    backend.client.loop.add_callback(cancel_on_the_loop)
    assert done.wait(WAIT) and waiting.cancelled()
    concurrent.futures.wait(blockers, timeout=WAIT)
    executor.submit(time.sleep, 0).result(WAIT)  # submitted later: runs after it would have
    assert not ran.exists()


@pytest.mark.dask
@needs_dask
def test_capacity_four_on_eight_workers_never_runs_more_than_four_jobs(tmp_path):
    counter = tmp_path / "running"
    with DaskBackend.local(8) as wide:
        assert wide.info().workers == 8
        counter.write_text("0 0")  # control: without the lane, 8 jobs do run at once
        direct = [
            # Held 2 s: under CPU load eight worker processes took longer than 0.5 s to all
            # start, and this control saw only three at once.
            wide.executor.submit(occupy_tool, {"path": str(counter), "hold": 2.0}, None)
            for _ in range(8)
        ]
        concurrent.futures.wait(direct, timeout=WAIT)
        assert int(counter.read_text().split()[1]) > 4
        counter.write_text("0 0")
        with World(tools=make_tools(), tool_capacity=4, tool_executor=wide.executor) as world:
            args = {"path": str(counter), "hold": 0.1}
            agents = [world.spawn(call_once, {"tool": "occupy", "args": args}) for _ in range(32)]
            run_world(world)
            pids = {world.result(a)["output"] for a in agents}
            assert settled(world.lane).finished == 32
    now, peak = map(int, counter.read_text().split())
    assert (now, peak) == (0, 4)  # four at once, never five, counted on the workers
    assert os.getpid() not in pids and len(pids) > 1


@pytest.mark.dask
@needs_dask
def test_a_world_handed_a_backend_reports_its_workers_and_closes_it(backend):
    assert backend.info().workers == 2
    with World(tool_executor=backend.executor) as borrowing:
        assert borrowing.backend_info() == BackendInfo("dask-local", backend.info().address, 2, 2)
    assert backend.client.status == "running"  # borrowed: still open
    owned = DaskBackend.local(1)
    world = World(tool_executor=owned)
    info = world.backend_info()
    assert (info.kind, info.workers, info.threads) == ("dask-local", 1, 1)
    world.close()
    assert owned.client.status == "closed"
    assert world.backend_info().workers == 0
    with pytest.raises(RuntimeError, match="after shutdown"):
        owned.executor.submit(time.sleep, 0)


@pytest.mark.dask
@needs_dask
def test_a_backend_closed_under_a_running_world_fails_its_jobs_instead_of_hanging(tmp_path):
    started = tmp_path / "started"
    shared = DaskBackend.local(1)
    try:
        with World(tools=make_tools(), tool_executor=shared.executor) as world:
            args = {"path": str(started), "seconds": 2}  # the worker's close waits for it
            agent = world.spawn(call_once, {"tool": "pid_then_wait", "args": args})
            world.start()
            wait_for(started.exists, WAIT, "the job to start on the worker")
            shared.close(timeout=5)
            wait_for(lambda: world.status(agent).kind is StatusKind.COMPLETE, WAIT, "the agent")
            world.stop()
            assert world.result(agent)["error"] == "RuntimeError: the dask executor was shut down"
            assert_counters_balance(world.lane)
    finally:
        shared.close()


@pytest.mark.dask
@needs_dask
def test_a_recorded_dask_run_replays_without_a_cluster(backend, tmp_path):
    path = tmp_path / "run.db"
    world = World(
        seed=5,
        clock=ManualClock(),
        tools=make_tools(),
        tool_executor=backend.executor,
        journal=Journal.create(path),
    )
    try:
        agents = [world.spawn(hashing_agent, f"task {i}") for i in range(20)]
        run_world(world)
        assert all(world.status(a).kind is StatusKind.COMPLETE for a in agents)
    finally:
        world.close()
    report = replay(path)  # the journal names no backend: nothing here can reach Dask
    assert report.ticks == report.recorded_ticks > 0
    assert report.agents == 20


@pytest.mark.dask
@needs_dask
def test_a_worker_killed_mid_job_gives_an_error_result_and_the_run_finishes(backend, tmp_path):
    started = tmp_path / "pid"
    with World(tools=make_tools(), tool_executor=backend.executor) as world:
        victim = world.spawn(
            call_once, {"tool": "pid_then_wait", "args": {"path": str(started), "seconds": 60}}
        )
        bystander = world.spawn(call_once, {"tool": "digest", "args": {"text": "b"}})
        world.start()
        wait_for(started.exists, WAIT, "the job to start on a worker")
        pid = int(started.read_text())
        assert pid != os.getpid()
        os.kill(pid, signal.SIGKILL)  # a worker process our cluster started
        wait_for(
            lambda: all(world.status(a).kind is StatusKind.COMPLETE for a in (victim, bystander)),
            WAIT,
            "both agents to complete",
        )
        world.stop()
        result = world.result(victim)
        assert result["output"] is None and result["error"].startswith("KilledWorker:")
        assert world.result(bystander)["error"] is None
        s = settled(world.lane)
        assert (s.failed, s.finished) == (1, 1)
        assert_counters_balance(world.lane)
    backend.wait_for_workers(2, timeout=WAIT)  # the nanny restarts the worker


SCENARIO = """\
[world]
clock = "virtual"
tool_capacity = 4
{backend}

[tools.where]
python = "where_tools:where"

[[agents]]
count = 60
name = "w-{{i}}"
message = "{{i}}"
steps = [{{ tools = [{{ name = "where", args = {{ n = "{{message}}" }} }}] }}, {{ finish = "{{last}}" }}]
"""

WHERE_TOOLS = """\
import os

def where(args, ctx):
    return {"n": int(args["n"]) * 2, "pid": os.getpid()}
"""


def _run_scenario(tmp_path: Path, backend: str, name: str) -> tuple[dict[str, Any], set[int], int]:
    import json
    import subprocess

    from runtime.journal import JournalReader

    folder = tmp_path / name
    folder.mkdir()
    (folder / "where_tools.py").write_text(WHERE_TOOLS)
    (folder / "s.toml").write_text(SCENARIO.format(backend=backend))
    journal = folder / "run.db"
    proc = subprocess.Popen(
        [TICKWORK, "run", str(folder / "s.toml"), "--json", "--journal", str(journal)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # the tool module is found beside the scenario, not on the path
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    pids = set()
    with JournalReader(journal) as reader:
        for tick in reader.ticks():
            for _, item in tick.inputs:
                if isinstance(item, ToolOutcome):
                    pids.update(r.output["pid"] for r in item.results)
    return json.loads(out), pids, proc.pid


@pytest.mark.dask
def test_a_scenario_on_a_local_cluster_ends_as_on_the_thread_lane_and_replays(tmp_path):
    threads, thread_pids, thread_cli = _run_scenario(tmp_path, "", "threads")
    dask, dask_pids, dask_cli = _run_scenario(
        tmp_path, 'lane_backend = "dask-local"\nworkers = 2', "dask"
    )
    assert threads["agents"] == dask["agents"] == {"complete": 60}
    assert threads["tool_jobs"]["count"] == dask["tool_jobs"]["count"] == 60
    assert thread_pids == {thread_cli}  # ran in the tickwork process itself
    assert dask_cli not in dask_pids  # ran in the workers, with the tool module shipped there
    assert 1 <= len(dask_pids) <= 2
    assert "dask-local" in dask["backend"]
    assert replay(tmp_path / "dask" / "run.db").ticks > 0


def _tool_pids(journal: Path, after_tick: int) -> set[int]:
    from runtime.journal import JournalReader

    pids = set()
    with JournalReader(journal) as reader:
        for tick in reader.ticks():
            for _, item in tick.inputs:
                if tick.tick > after_tick and isinstance(item, ToolOutcome):
                    pids.update(r.output["pid"] for r in item.results if r.error is None)
    return pids


@pytest.mark.dask
def test_a_dask_scenario_resumed_runs_its_tools_on_a_cluster_again(tmp_path):
    import json
    import subprocess

    # Stopped after the first tick with its calls in flight, then resumed: the calls cut (an
    # idempotent tool runs again) and every later one run on the scenario's cluster, not on
    # the resuming process's threads, with the tool module shipped to the workers.
    (tmp_path / "where_tools.py").write_text(WHERE_TOOLS)
    scenario = SCENARIO.format(backend='lane_backend = "dask-local"\nworkers = 2').replace(
        'python = "where_tools:where"', 'python = "where_tools:where"\nidempotent = true'
    )
    (tmp_path / "s.toml").write_text(scenario)
    journal = tmp_path / "run.db"
    first = subprocess.run(
        [TICKWORK, "run", "s.toml", "--journal", str(journal), "--ticks", "1", "--json"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["agents"] != {"complete": 60}  # stopped part way
    proc = subprocess.Popen(
        [TICKWORK, "resume", str(journal), "--scenario", "s.toml", "--json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    done = json.loads(out)
    assert done["agents"] == {"complete": 60}
    assert "dask-local" in done["backend"]
    assert "starting 2 local dask workers" in err
    pids = _tool_pids(journal, after_tick=1)
    assert pids and proc.pid not in pids  # ran in the workers
    assert 1 <= len(pids) <= 2
    assert replay(journal).ticks > 1


def test_ctrl_c_while_a_local_cluster_starts_closes_the_cluster(monkeypatch):
    # Only an `Exception` closed it: a Ctrl-C while the workers started left their
    # processes running.
    import distributed

    made: list[Any] = []
    real = distributed.LocalCluster

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    def interrupted(self: Any, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(distributed, "LocalCluster", recording)
    monkeypatch.setattr(distributed.Client, "wait_for_workers", interrupted)
    with pytest.raises(KeyboardInterrupt):
        DaskBackend.local(1, timeout=WAIT)
    assert len(made) == 1 and made[0].status.name == "closed"
