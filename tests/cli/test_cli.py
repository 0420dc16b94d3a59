"""The `tickwork` command, run as a user runs it: the real entry point, in a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.control import ControlClient
from runtime.journal import JournalReader
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
TICKWORK = str(Path(sys.executable).parent / "tickwork")
EXAMPLES = ROOT / "examples"


def tickwork(*args: str, env: dict[str, str] | None = None, timeout: float = 60):
    """Run `tickwork ARGS` from the repository root and return the finished process."""
    return subprocess.run(
        [TICKWORK, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def summary_of(done: subprocess.CompletedProcess[str]) -> dict:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state dir with a path short enough for a Unix socket."""
    base = Path(tempfile.mkdtemp(prefix="tw-", dir="/tmp"))
    yield base / "state"
    shutil.rmtree(base, ignore_errors=True)


class Serve:
    """`tickwork serve` in the background; its stderr lines are collected as they come."""

    def __init__(self, *args: str, command: str = "serve") -> None:
        self.proc = subprocess.Popen(
            [TICKWORK, command, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_line(self, text: str, timeout: float = 20) -> str:
        """Wait for a stderr line containing ``text`` (fail, never hang, after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"serve never printed {text!r}; it printed {self.seen!r}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line

    def finish(self, timeout: float = 20) -> tuple[int, str]:
        """Wait for serve to exit by itself; its exit status and stdout."""
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def agents(state: Path) -> dict[str, dict]:
    with ControlClient(state) as client:
        return {a["id"]: a for a in client.request("agents")["agents"]}


def statuses(state: Path) -> dict[str, str]:
    return {agent_id: a["status"] for agent_id, a in agents(state).items()}


def test_version_prints_the_version():
    done = tickwork("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("tickwork ")


def test_quickstart_runs_to_completion_with_a_consistent_summary():
    summary = summary_of(tickwork("run", "examples/quickstart.toml", "--json"))
    assert summary["ended"] == "finished"
    assert summary["scenario_agents"] == 4
    assert summary["agents"] == {"complete": 6}  # 3 researchers, a reviewer and its 2 helpers
    assert summary["tool_jobs"]["count"] == 6  # two batches per researcher
    assert summary["model_calls"]["count"] == 6
    prompts = summary["prompts"]
    assert (prompts["opened"], prompts["answered"], prompts["open"]) == (4, 4, 0)
    assert prompts["wait"]["p50"] == pytest.approx(0.5)  # the operator answers after 0.5 s
    assert summary["wall_secs"] < 15


def test_the_factory_runs_thousands_of_agents_on_virtual_time():
    summary = summary_of(tickwork("run", "examples/factory.toml", "--json", "--quiet"))
    assert summary["ended"] == "finished"
    assert summary["scenario_agents"] == 5000
    assert summary["agents"] == {"complete": 5300}  # 100 leads spawn 3 children each
    assert summary["tool_jobs"]["count"] == 4900 * 2 + 300
    assert summary["model_calls"]["count"] == 5000
    prompts = summary["prompts"]
    assert (prompts["opened"], prompts["answered"]) == (4900, 4900)
    assert prompts["wait"]["p50"] == prompts["wait"]["max"] == 900.0
    assert summary["world_secs"] == 2700.0  # cooling (1800 s) + the supervisor (900 s)
    assert summary["wall_secs"] < 30


def test_a_tick_limit_stops_the_run_there():
    summary = summary_of(tickwork("run", "examples/quickstart.toml", "--json", "--ticks", "3"))
    assert summary["ended"] == "tick limit"
    assert summary["ticks"] == 3


@pytest.fixture(scope="module")
def recorded_quickstart(tmp_path_factory) -> tuple[dict, Path]:
    """A quickstart run recorded to a journal, and its summary."""
    journal = tmp_path_factory.mktemp("journal") / "run.db"
    done = tickwork("run", "examples/quickstart.toml", "--json", "--journal", str(journal))
    return summary_of(done), journal


def test_a_recorded_run_replays_and_reports_a_match(recorded_quickstart):
    summary, journal = recorded_quickstart
    assert summary["journal"] == str(journal)
    done = tickwork("replay", str(journal))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"replay matched: {summary['ticks']} ticks")
    report = json.loads(tickwork("replay", str(journal), "--json").stdout)
    assert report["match"] is True and report["agents"] == 6


def test_a_tampered_journal_reports_the_divergence_and_exits_1(recorded_quickstart, tmp_path):
    tampered = tmp_path / "tampered.db"
    shutil.copy(recorded_quickstart[1], tampered)
    with contextlib.closing(sqlite3.connect(tampered)) as conn, conn:
        conn.execute("UPDATE ticks SET digest = 'f00d' WHERE tick = 4")
    done = tickwork("replay", str(tampered))
    assert done.returncode == 1
    assert "replay diverged at tick 4: expected digest f00d" in done.stderr
    assert "Traceback" not in done.stderr


BAD_LINES = [
    "examples/bad.toml:6: world.clock: must be one of 'real', 'virtual', got 'fast'",
    "examples/bad.toml:8: world.colour: unknown key 'colour'",
    "examples/bad.toml:21: agents[0].count: must be an integer 0..1,000,000, got -1",
    "examples/bad.toml:27: agents[1].steps[0].tools[0].name: unknown tool 'grpe' (known: both, fetch, grep)",
    "examples/bad.toml:28: agents[1].steps[1].tools[0]: tool 'grep' needs the argument 'path'",
    "examples/bad.toml:35: agents[2].steps[0]: unknown step 'thnk' (did you mean 'think'?)",
]


@pytest.mark.parametrize("command", ["run", "validate"])
def test_the_bad_example_fails_with_every_problem_and_no_traceback(command):
    done = tickwork(command, "examples/bad.toml")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    for expected in BAD_LINES:
        assert expected in lines
    assert lines[-1] == "tickwork: 13 problems; nothing was run"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "examples/nope.toml"], "examples/nope.toml: no such scenario file"),
        (["run", "examples/quickstart.toml", "--ticks", "0"], "must be an integer >= 1, got 0"),
        (["run"], "the following arguments are required: SCENARIO"),
        (["replay", "nope.db"], "tickwork: error: no journal at 'nope.db'"),
        ([], "usage: tickwork"),
    ],
)
def test_usage_and_input_errors_exit_2_with_a_clear_message(args, message):
    done = tickwork(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_journal_that_exists_is_not_overwritten(tmp_path):
    journal = tmp_path / "run.db"
    journal.write_text("precious")
    done = tickwork("run", "examples/quickstart.toml", "--journal", str(journal))
    assert done.returncode == 2
    assert done.stderr == (
        f"tickwork: error: journal {str(journal)!r} already exists (--force overwrites it)\n"
    )
    assert journal.read_text() == "precious"


@pytest.mark.parametrize("command", [["ps"], ["respond"], ["cancel", "a1"], ["send", "a1", "hi"]])
def test_control_commands_without_a_server_fail_with_one_line(command, state_dir):
    done = tickwork(*command, "--state-dir", str(state_dir))
    assert done.returncode == 1
    assert done.stderr == (
        f"tickwork: error: no `tickwork serve` is running on state dir {str(state_dir)!r}\n"
    )


def test_the_live_view_is_drawn_on_a_terminal_and_not_when_quiet():
    terminal = {"TTY_INTERACTIVE": "1", "FORCE_COLOR": "1", "COLUMNS": "120"}
    drawn = tickwork("run", "examples/quickstart.toml", "--json", env=terminal)
    summary_of(drawn)
    for text in ("agents done", "ticks/s", "inference", "queued", "parked", "open prompts"):
        assert text in drawn.stderr
    quiet = tickwork(
        "run", "examples/quickstart.toml", "--json", "--quiet", "--ticks", "5", env=terminal
    )
    summary_of(quiet)
    assert quiet.stderr == ""


def test_a_serve_refused_before_its_first_tick_leaves_no_journal(state_dir, tmp_path):
    # As `tickwork run`: "nothing was run" (exit 2) left the journal behind, and the same
    # command, corrected, was then refused: "journal already exists".
    import socket

    journal = tmp_path / "serve.db"
    where = ["--state-dir", str(state_dir), "--journal", str(journal), "--quiet"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tickwork(
            "serve", "examples/quickstart.toml", *where, "--metrics", f"127.0.0.1:{port}"
        )
    assert done.returncode == 2 and "cannot listen" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    again = tickwork("serve", "examples/quickstart.toml", *where)
    assert again.returncode == 0, again.stderr
    assert journal.exists()


BIG_SLEEPERS = """\
name = "sleepers"
[world]
clock = "virtual"
[[agents]]
count = 500
name = "s-{i}"
message = "job {i}, with words enough to make each tick's record weigh something"
steps = [{ sleep = 1 }, { sleep = 2 }, { sleep = 3 }, { finish = "{message}" }]
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="limits the file size of a child")
def test_a_serve_whose_journal_cannot_be_written_ends_with_the_error(state_dir, tmp_path):
    # Its tick loop died, and the serve waited for Ctrl-C, taking commands that no tick
    # would ever apply. A file size limit fails the journal's writes as a full disk does:
    # 800 kB take the first ticks' records (500 agents each) and not the whole run's.
    import resource

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (800_000, 800_000))

    scenario = tmp_path / "sleepers.toml"
    scenario.write_text(BIG_SLEEPERS)
    journal = tmp_path / "serve.db"
    where = ["--state-dir", str(state_dir), "--journal", str(journal), "--quiet"]
    done = subprocess.run(
        [TICKWORK, "serve", str(scenario), *where],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,  # it ends in about a second; it hung until Ctrl-C
        check=False,
        preexec_fn=small_files,  # only sets limits, before the exec
    )
    assert done.returncode != 0
    assert "tickwork: error: cannot write journal" in done.stderr, done.stderr
    assert not (state_dir / "control.sock").exists()
    with JournalReader(journal) as reader:
        assert reader.tick_count() > 0  # whole up to the tick before: resumable


def test_serve_respond_send_interrupt_and_cancel_end_to_end(state_dir, tmp_path):
    journal = tmp_path / "serve.db"
    where = ["--state-dir", str(state_dir)]
    serve = Serve("examples/needs_a_person.toml", *where, "--journal", str(journal), "--json")
    try:
        serve.wait_line("serving needs-a-person (3 agents)")
        serve.wait_line("prompt deployer/t1/p2 from deployer: Deploy release 1.4 where?")
        second = tickwork("serve", "examples/needs_a_person.toml", *where)
        assert second.returncode == 1
        assert "another `tickwork serve` is already running" in second.stderr

        listed = tickwork("respond", *where)
        assert "deployer/t1/p2" in listed.stdout and "1: production" in listed.stdout
        wrong = tickwork("respond", "deployer", "moon", *where)
        assert wrong.returncode == 2
        assert "'moon' is not one of the choices" in wrong.stderr

        answered = tickwork("respond", "deployer", "staging", *where)
        assert answered.stdout == "answered deployer/t1/p2 (deployer)\n", answered.stderr
        wait_for(lambda: statuses(state_dir)["deployer"] == "complete", what="the deployer")

        assert tickwork("send", "helper", "summarise the deploy", *where).returncode == 0
        wait_for(lambda: agents(state_dir)["helper"]["result"] is not None, what="the helper")
        assert tickwork("interrupt", "soak", *where).stdout == "interrupted soak\n"
        wait_for(lambda: statuses(state_dir)["soak"] == "idle", what="the soak to stop")
        ps = json.loads(tickwork("ps", "--json", *where).stdout)
        assert {a["id"]: (a["status"], a["result"]) for a in ps["agents"]} == {
            "deployer": ("complete", "deploying release 1.4 to staging"),
            "helper": ("idle", "the build is green"),  # each agent reads the script from the top
            "soak": ("idle", None),
        }
        assert tickwork("cancel", "soak", *where).returncode == 0
        assert tickwork("cancel", "helper", *where).returncode == 0
        status, out = serve.finish()  # every agent is terminal: serve ends by itself
    finally:
        serve.kill()
    assert status == 0
    summary = json.loads(out)
    assert summary["ended"] == "every agent is done"
    assert summary["agents"] == {"complete": 1, "cancelled": 2}
    assert (summary["prompts"]["opened"], summary["prompts"]["answered"]) == (1, 1)
    assert summary["model_calls"]["count"] == 2  # the deployer's and the helper's
    assert not (state_dir / "control.sock").exists() and not (state_dir / "token").exists()
    replayed = tickwork("replay", str(journal))
    assert replayed.returncode == 0 and replayed.stdout.startswith("replay matched")


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_serve_shuts_down_cleanly_on_a_signal(sig, state_dir, tmp_path):
    journal = tmp_path / "serve.db"
    serve = Serve(
        "examples/needs_a_person.toml",
        "--state-dir",
        str(state_dir),
        "--journal",
        str(journal),
        "--json",
        "--quiet",
    )
    try:
        serve.wait_line("serving needs-a-person")
        wait_for(lambda: statuses(state_dir)["deployer"] == "waiting", what="the prompt")
        serve.proc.send_signal(sig)
        status, out = serve.finish()
    finally:
        serve.kill()
    assert status == 128 + sig  # the README's exit-status table: stopped by signal N
    summary = json.loads(out)
    assert summary["ended"] == f"stopped by {sig.name}"
    assert os.listdir(state_dir) == []  # no socket, token or serve.lock left behind
    assert summary["agents"]["waiting"] == 1
    assert not (state_dir / "control.sock").exists()
    assert tickwork("replay", str(journal)).returncode == 0


def test_run_stops_cleanly_on_ctrl_c_and_leaves_a_replayable_journal(tmp_path):
    journal = tmp_path / "run.db"
    proc = subprocess.Popen(
        [TICKWORK, "run", "examples/needs_a_person.toml", "--json", "--journal", str(journal)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def recorded() -> bool:
            if not journal.exists():
                return False
            try:
                with JournalReader(journal) as reader:
                    return reader.tick_count() >= 3
            except Exception:
                return False

        wait_for(recorded, timeout=20, what="the run to record its first ticks")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert json.loads(out)["ended"] == "stopped by SIGINT"
    assert "Traceback" not in err
    assert tickwork("replay", str(journal)).returncode == 0
