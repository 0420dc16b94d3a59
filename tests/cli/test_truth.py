"""The CLI tells the truth: answers that fit, no-ops that say so, errors shown, exit statuses."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from runtime.cli.main import build_parser
from tests.cli.test_cli import EXAMPLES, TICKWORK, Serve, state_dir, statuses, tickwork
from tests.conftest import wait_for

__all__ = ["state_dir"]  # the fixture, re-used


@pytest.fixture
def deployer(state_dir):
    """`serve examples/needs_a_person.toml` with the deployer's choice prompt open."""
    serve = Serve(str(EXAMPLES / "needs_a_person.toml"), "--state-dir", str(state_dir))
    try:
        serve.wait_line("serving needs-a-person")
        wait_for(lambda: statuses(state_dir)["deployer"] == "waiting", what="the prompt")
        yield serve
    finally:
        serve.kill()


def test_answers_that_do_not_fit_a_choice_prompt_are_refused(deployer, state_dir):
    where = ("--state-dir", str(state_dir))
    approve = tickwork("respond", "deployer", "--approve", *where)
    assert approve.returncode == 2
    assert "is not a yes/no question" in approve.stderr
    clash = tickwork("respond", "deployer", "staging", "--choice", "1", *where)
    assert clash.returncode == 2
    assert "'staging' and --choice 1 ('production') disagree" in clash.stderr
    far = tickwork("respond", "deployer", "--choice", "5", *where)
    assert far.returncode == 2 and "--choice must be 0..1" in far.stderr
    assert statuses(state_dir)["deployer"] == "waiting"  # nothing answered it


def test_the_prompt_hint_of_serve_fits_the_prompt(state_dir):
    serve = Serve(str(EXAMPLES / "needs_a_person.toml"), "--state-dir", str(state_dir))
    try:
        line = serve.wait_line("answer with:")
    finally:
        serve.kill()
    assert line.strip().endswith("--choice 0..1")
    assert serve.seen[0].startswith("serving ") or serve.seen[0].startswith("prompt ")


def test_commands_that_would_do_nothing_say_so_and_fail(deployer, state_dir):
    where = ("--state-dir", str(state_dir))
    resume = tickwork("resume", "soak", *where)
    assert resume.returncode == 1 and "not paused: nothing to resume" in resume.stderr
    assert tickwork("cancel", "soak", *where).returncode == 0
    wait_for(lambda: statuses(state_dir)["soak"] == "cancelled", what="the cancel")
    again = tickwork("cancel", "soak", *where)
    assert again.returncode == 1 and "'soak' is cancelled: cancel does nothing" in again.stderr
    send = tickwork("send", "soak", "hello", *where)
    assert send.returncode == 1 and "send does nothing" in send.stderr
    assert "sent" not in send.stdout


FAILING = """
name = "failing"
[world]
clock = "virtual"
[[agents]]
count = 7
name = "bad-{i}"
behaviour = "failing_mod:explode"
"""


def _failing(tmp_path: Path) -> Path:
    (tmp_path / "failing_mod.py").write_text(
        "def explode(turn):\n    raise ValueError(f'[red]boom[/red] {turn.agent_id}')\n    yield\n"
    )
    scenario = tmp_path / "failing.toml"
    scenario.write_text(FAILING)
    return scenario


def test_agent_errors_are_shown_and_fail_the_run(tmp_path):
    scenario = _failing(tmp_path)
    done = tickwork("run", str(scenario), "--json")
    assert done.returncode == 1, done.stderr
    errors = json.loads(done.stdout)["errors"]
    assert len(errors) == 7
    assert errors[0]["agent"] == "bad-0" and "[red]boom[/red] bad-0" in errors[0]["message"]
    text = tickwork("run", str(scenario), env={"COLUMNS": "200"})
    assert text.returncode == 1
    assert "bad-0:" in text.stdout and "[red]boom[/red]" in text.stdout  # markup shown, not used
    assert "and 2 more (--json lists them all)" in text.stdout


def test_the_operator_hint_keeps_its_brackets():
    done = tickwork(
        "run", str(EXAMPLES / "needs_a_person.toml"), "--ticks", "50", env={"COLUMNS": "300"}
    )
    assert "give the scenario an [operator]" in done.stdout


def test_journals_are_private_and_replay_leaves_no_wal_or_shm(tmp_path):
    journal = tmp_path / "run.db"
    assert tickwork("run", "examples/quickstart.toml", "--journal", str(journal)).returncode == 0
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert tickwork("replay", str(journal)).returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["run.db"]


def test_journal_path_errors_name_the_reason_and_force_overwrites(tmp_path):
    cases = {
        str(tmp_path): "is a directory",
        str(tmp_path / "nowhere" / "run.db"): "no directory",
    }
    for path, reason in cases.items():
        done = tickwork("run", "examples/quickstart.toml", "--journal", path)
        assert done.returncode == 2 and reason in done.stderr, done.stderr
    journal = tmp_path / "run.db"
    journal.write_text("old")
    # --force replaces a journal, never another file (it unlinked whatever was there: a
    # device as root, a FIFO, the scenario being run).
    refused = tickwork("run", "examples/quickstart.toml", "--journal", str(journal), "--force")
    assert refused.returncode == 2 and "is not a tickwork journal" in refused.stderr
    assert journal.read_text() == "old"
    journal.unlink()
    first = tickwork("run", "examples/quickstart.toml", "--journal", str(journal))
    assert first.returncode == 0, first.stderr
    forced = tickwork("run", "examples/quickstart.toml", "--journal", str(journal), "--force")
    assert forced.returncode == 0, forced.stderr
    assert tickwork("replay", str(journal)).returncode == 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused = tickwork("run", "examples/quickstart.toml", "--journal", str(fifo), "--force")
    assert refused.returncode == 2 and "is not a regular file" in refused.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


EVIL = """
import os
with open(os.environ["EVIL_MARK"], "a") as mark:
    mark.write("imported\\n")
def fn(turn):
    return "done"
    yield
"""


def test_replay_never_imports_from_a_directory_the_journal_names(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "evil_mod.py").write_text(EVIL)
    (home / "s.toml").write_text(
        '[world]\nclock = "virtual"\n[[agents]]\nbehaviour = "evil_mod:fn"\n'
    )
    mark = tmp_path / "mark"
    env = {"EVIL_MARK": str(mark)}
    journal = tmp_path / "run.db"
    assert tickwork("run", str(home / "s.toml"), "--journal", str(journal), env=env).returncode == 0
    imported = mark.read_text()
    done = tickwork("replay", str(journal), env=env)  # from the repository root
    assert done.returncode == 2
    assert "never makes tickwork import code from a directory it names" in done.stderr
    assert f"--path {str(home)!r}" in done.stderr
    assert mark.read_text() == imported  # the module never ran
    trusted = tickwork("replay", str(journal), "--path", str(home), env=env)
    assert trusted.returncode == 0, trusted.stderr


def test_replay_of_a_local_module_behaviour_works_from_its_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "evil_mod.py").write_text(EVIL)
    (home / "s.toml").write_text(
        '[world]\nclock = "virtual"\n[[agents]]\nbehaviour = "evil_mod:fn"\n'
    )
    env = {**os.environ, "EVIL_MARK": str(tmp_path / "mark")}
    journal = tmp_path / "run.db"
    run = [TICKWORK, "run", "s.toml", "--journal", str(journal)]
    assert subprocess.run(run, cwd=home, env=env, timeout=60, check=False).returncode == 0
    replay = [TICKWORK, "replay", str(journal)]
    done = subprocess.run(replay, cwd=home, env=env, timeout=60, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_subcommand_has_a_description_and_helped_positionals():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        assert command.description, name
        for action in command._actions:
            if not action.option_strings:
                assert action.help, f"{name} {action.dest}"


def test_a_run_refused_before_its_first_tick_leaves_no_journal(tmp_path):
    # "nothing was run" (exit 2) left the journal file behind, and the same command,
    # corrected, was then refused: "journal already exists".
    import socket

    journal = tmp_path / "run.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tickwork(
            "run",
            "examples/quickstart.toml",
            "--quiet",
            "--metrics",
            f"127.0.0.1:{port}",
            "--journal",
            str(journal),
        )
    assert done.returncode == 2 and "cannot listen" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    again = tickwork("run", "examples/quickstart.toml", "--quiet", "--journal", str(journal))
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("command", ["run", "serve"])
def test_an_internal_error_before_the_first_tick_leaves_no_journal(
    command, monkeypatch, tmp_path, state_dir, capsys
):
    # Only a refusal (a `TickworkError`) discarded the journal: an internal error in the
    # spawn, or a Ctrl-C there, left a header-only file, and the same command, run again,
    # was refused: "journal already exists".
    from runtime.cli import run, serve
    from runtime.cli.main import main

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the spawn")

    monkeypatch.setattr(run if command == "run" else serve, "spawn_agents", broken)
    journal = tmp_path / "run.db"
    where = ["--state-dir", str(state_dir)] if command == "serve" else []
    argv = [command, str(EXAMPLES / "quickstart.toml"), "--quiet", "--journal", str(journal)]
    assert main([*argv, *where]) == 70
    assert "internal error: RuntimeError: a bug in the spawn" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    short = ["--ticks", "3"] if command == "run" else []
    assert main([*argv, *where, *short]) == 0
    assert journal.exists()
