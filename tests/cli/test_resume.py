"""`tickwork resume`, run as a user runs it: after kill -9, with the control channel, forks."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from components import PromptOpened, PromptSettled
from runtime.journal import JournalReader
from tests.cli.test_cli import ROOT, TICKWORK, Serve, state_dir, summary_of, tickwork
from tests.conftest import wait_for

__all__ = ["state_dir"]  # the fixture, shared with test_cli

DEPLOYER = """
name = "deploy"

[world]
clock = "real"
interaction_timeout_secs = 600

[tools.echo]
shell = ["echo", "{text}"]
timeout = 5

[models.default]
replies = ["the build is green"]

[[agents]]
name = "deployer"
message = "release 1.4"
steps = [
    { think = "check the build of {message}" },
    { ask = "Deploy {message} where?", choices = ["staging", "production"] },
    { tools = [{ name = "echo", args = { text = "deploying {message} to {last}" } }] },
    { finish = "{last}" },
]
"""


def _prompt_events(journal: Path) -> list[object]:
    with JournalReader(journal) as reader:
        return [
            item
            for tick in reader.ticks()
            for _, item in tick.inputs
            if isinstance(item, PromptOpened | PromptSettled)
        ]


def test_tickwork_respond_answers_a_prompt_reopened_by_tickwork_resume_serve(tmp_path):
    scenario = tmp_path / "deploy.toml"
    scenario.write_text(DEPLOYER)
    journal = tmp_path / "run.db"
    first, second = tmp_path / "s1", tmp_path / "s2"
    serve = Serve(str(scenario), "--state-dir", str(first), "--journal", str(journal))
    try:
        serve.wait_line("prompt deployer/t1/p2 from deployer: Deploy release 1.4 where?")
        serve.proc.send_signal(signal.SIGKILL)
        serve.proc.wait(timeout=10)
    finally:
        serve.kill()
    (opened,) = _prompt_events(journal)
    assert isinstance(opened, PromptOpened) and opened.deadline == opened.at + 600

    where = ["--state-dir", str(second)]
    resumed = Serve(str(journal), "--serve", *where, "--json", command="resume")
    try:
        resumed.wait_line("prompt deployer/t1/p2 from deployer: Deploy release 1.4 where?")
        resumed.wait_line("serving deploy (1 agents)")
        listed = tickwork("respond", *where)
        assert "deployer/t1/p2" in listed.stdout and "0: staging" in listed.stdout
        answered = tickwork("respond", "deployer", "staging", *where)
        assert answered.stdout == "answered deployer/t1/p2 (deployer)\n", answered.stderr
        status, out = resumed.finish()  # the deployer is done: resume --serve ends
    finally:
        resumed.kill()
    assert status == 0
    assert json.loads(out)["agents"] == {"complete": 1}
    events = _prompt_events(journal)
    assert [type(e).__name__ for e in events] == ["PromptOpened", "PromptSettled"]
    settled = events[1]
    assert isinstance(settled, PromptSettled) and settled.opened_at == opened.at  # same prompt
    assert settled.response.choice == 0
    replayed = tickwork("replay", str(journal))
    assert replayed.returncode == 0 and replayed.stdout.startswith("replay matched")


def test_the_quickstart_killed_mid_run_is_resumed_to_its_end(tmp_path):
    journal = tmp_path / "run.db"
    run = subprocess.Popen(
        [TICKWORK, "run", "examples/quickstart.toml", "--quiet", "--journal", str(journal)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def some_ticks() -> bool:
            try:
                with JournalReader(journal) as reader:
                    return reader.tick_count() >= 10
            except Exception:
                return run.poll() is not None

        wait_for(some_ticks, timeout=60, what="10 recorded ticks")
        run.send_signal(signal.SIGKILL)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait(timeout=10)
    bare = tickwork("resume", str(journal))
    assert bare.returncode == 2
    assert "No module named 'quickstart_tools'" in bare.stderr
    assert "--scenario examples/quickstart.toml" in bare.stderr
    done = tickwork("resume", str(journal), "--scenario", "examples/quickstart.toml", "--json")
    summary = summary_of(done)
    assert summary["agents"] == {"complete": 6}
    assert "resumed quickstart at tick" in done.stderr
    assert tickwork("replay", str(journal)).returncode == 0

    fork = tmp_path / "fork.db"
    forked = tickwork(
        "resume", str(journal), "--scenario", "examples/quickstart.toml",
        "--at-tick", "5", "--journal", str(fork), "--json",
    )  # fmt: skip
    assert summary_of(forked)["agents"] == {"complete": 6}
    assert tickwork("replay", str(fork)).returncode == 0
    needs_new = tickwork("resume", str(journal), "--at-tick", "5")
    assert needs_new.returncode == 2
    assert "--at-tick forks the run: name the new journal with --journal NEW" in needs_new.stderr
    other = tmp_path / "other.toml"
    other.write_text((ROOT / "examples/quickstart.toml").read_text() + "\n# changed\n")
    (tmp_path / "quickstart_tools.py").write_text(
        (ROOT / "examples/quickstart_tools.py").read_text()
    )
    changed = tickwork("resume", str(journal), "--scenario", str(other))
    assert changed.returncode == 2 and "is not the scenario" in changed.stderr


def test_resume_of_a_name_that_is_not_a_file_is_the_control_command(state_dir):
    done = tickwork("resume", "worker-0", "--state-dir", str(state_dir))
    assert done.returncode == 1
    assert "no `tickwork serve` is running" in done.stderr
    # Both readings are named: a mistyped journal path used to read only as an agent.
    assert "no journal at 'worker-0'; as an agent: no `tickwork serve`" in done.stderr


def test_a_resume_whose_models_cannot_be_built_starts_no_backend(tmp_path, monkeypatch):
    # The backend (a Dask cluster) was started before the tools and models were built,
    # and nothing closed it when they raised.
    from runtime.cli import main
    from runtime.cli import resume as cli_resume
    from runtime.errors import ConfigError
    from tests.conftest import CountingBackend

    journal = tmp_path / "run.db"
    done = tickwork("run", "examples/quickstart.toml", "--quiet", "--journal", str(journal))
    assert done.returncode == 0, done.stderr
    made: list[CountingBackend] = []

    def backend(*args: object, **kwargs: object) -> CountingBackend:
        made.append(CountingBackend())
        return made[-1]

    def no_models(*args: object) -> None:
        raise ConfigError("model 'default': no such provider")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cli_resume, "tool_backend", backend)
    monkeypatch.setattr(cli_resume, "build_models", no_models)
    assert main(["resume", str(journal), "--scenario", "examples/quickstart.toml"]) == 2
    assert all(b.closed for b in made), made


@pytest.mark.parametrize("serve", [False, True], ids=["run", "serve"])
def test_a_fork_stopped_by_an_error_before_its_first_live_tick_is_removed(
    tmp_path, monkeypatch, capsys, serve
):
    # The fork was removed only when the rebuild failed: an error after it (starting the
    # run, say) left the fork holding the prefix, and the same command, run again, was
    # refused: "journal already exists".
    from runtime.cli import resume as cli_resume
    from runtime.cli.main import main

    journal, fork = tmp_path / "run.db", tmp_path / "fork.db"
    done = tickwork("run", "examples/quickstart.toml", "--quiet", "--journal", str(journal))
    assert done.returncode == 0, done.stderr

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the start")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cli_resume, "_no_new_agents" if serve else "_start", broken)
    base = tempfile.mkdtemp(prefix="tw-", dir="/tmp")
    where = ["--serve", "--state-dir", f"{base}/state"] if serve else []
    argv = [
        "resume", str(journal), "--scenario", "examples/quickstart.toml",
        "--at-tick", "5", "--journal", str(fork), "--quiet", *where,
    ]  # fmt: skip
    try:
        assert main(argv) == 70
        assert "internal error: RuntimeError: a bug in the start" in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run.db"]
        monkeypatch.undo()
        monkeypatch.chdir(ROOT)
        assert main(argv) == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
    with JournalReader(fork) as reader:
        assert reader.tick_count() > 5


def test_a_fork_that_ran_live_ticks_is_kept_whatever_stops_it(tmp_path, monkeypatch, capsys):
    # The other side of the rule: once the fork holds a live tick, a run is on record,
    # and an error after it keeps the fork for `tickwork resume` to carry on.
    from runtime.cli import resume as cli_resume
    from runtime.cli import run as cli_run
    from runtime.cli.main import main

    journal, fork = tmp_path / "run.db", tmp_path / "fork.db"
    done = tickwork("run", "examples/quickstart.toml", "--quiet", "--journal", str(journal))
    assert done.returncode == 0, done.stderr

    def three_ticks_then_a_bug(world: object, **kwargs: object) -> str:
        for _ in range(3):
            world.tick()  # type: ignore[attr-defined]
        raise RuntimeError("a bug after three live ticks")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cli_run, "run_to_end", three_ticks_then_a_bug)
    assert cli_resume.run_world is cli_run.run_world  # the run it patches is resume's
    argv = [
        "resume", str(journal), "--scenario", "examples/quickstart.toml",
        "--at-tick", "5", "--journal", str(fork), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 70
    assert "a bug after three live ticks" in capsys.readouterr().err
    with JournalReader(fork) as reader:
        assert reader.tick_count() == 8  # the prefix and the three live ticks
