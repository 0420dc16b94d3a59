"""Subprocesses: whole groups die on timeout and cancel; clean exits kill nothing."""

import os
import sys
import time

import pytest

from runtime import CancelToken, ProcessEnd, run_process
from tests.test_cancel import _process_group_alive


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_command_runs_and_its_output_is_captured():
    result = run_process(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
    )
    assert result.ok
    assert result.stdout == "out\n" and result.stderr == "err\n"
    assert result.ended is ProcessEnd.EXITED


def test_a_failing_command_reports_its_exit_code():
    result = run_process([sys.executable, "-c", "raise SystemExit(3)"])
    assert result.ended is ProcessEnd.EXITED and result.exit_code == 3 and not result.ok


def test_a_timed_out_commands_grandchildren_are_killed(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 30 & echo $! > {pidfile}; wait"
    result = run_process(["sh", "-c", script], timeout=0.5)
    assert result.ended is ProcessEnd.TIMEOUT
    assert result.elapsed < 5
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(grandchild)
    assert not _process_group_alive(result.pid)


def test_a_clean_exit_leaves_a_background_job_alive(tmp_path):
    pidfile = tmp_path / "bg.pid"
    # The background job keeps stdout open; the wait must not hang on it.
    result = run_process(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; echo done"], timeout=10)
    try:
        assert result.ended is ProcessEnd.EXITED and result.exit_code == 0
        assert result.elapsed < 5
        assert "done" in result.stdout
        assert _alive(int(pidfile.read_text()))
    finally:
        os.kill(int(pidfile.read_text()), 9)


def test_long_output_keeps_its_head_and_tail():
    code = "import sys; sys.stdout.write('HEAD' + 'x' * 100000 + 'TAIL')"
    result = run_process([sys.executable, "-c", code], max_output=1000)
    assert result.stdout.startswith("HEAD")
    assert result.stdout.endswith("TAIL")
    assert "bytes cut" in result.stdout
    assert len(result.stdout) < 1200
    assert "[... 99008 bytes cut ...]" in result.stdout


def test_a_token_cancelled_before_the_start_runs_nothing(tmp_path):
    token = CancelToken()
    token.cancel()
    marker = tmp_path / "ran"
    result = run_process(["touch", str(marker)], cancel=token)
    assert result.ended is ProcessEnd.CANCELLED
    assert not marker.exists()


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="empty"):
        run_process([])
    with pytest.raises(ValueError, match="-1"):
        run_process(["true"], timeout=-1)
    with pytest.raises(FileNotFoundError):
        run_process(["/no/such/command"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"argv": "echo hi"}, "`argv` must be a list of strings, one per argument, got the string"),
        ({"argv": ["true"], "timeout": float("nan")}, "`timeout` must be > 0 or None, got nan"),
        ({"argv": ["true"], "timeout": "5"}, "`timeout` must be > 0 or None, got '5'"),
        ({"argv": ["true"], "max_output": 2.5}, "`max_output` must be an integer >= 2, got 2.5"),
        ({"argv": ["echo", None]}, "`argv` items must be strings, got None at index 1"),
        ({"argv": [b"echo"]}, "`argv` items must be strings, got b'echo' at index 0"),
        ({"argv": ["sleep", 1]}, "`argv` items must be strings, got 1 at index 1"),
    ],
    ids=[
        "argv-string",
        "timeout-nan",
        "timeout-text",
        "max-output-float",
        "argv-none",  # ran `echo None`
        "argv-bytes",  # ran `b'echo'`
        "argv-int",
    ],
)
def test_arguments_of_the_wrong_kind_are_refused_before_anything_runs(kwargs, message):
    # A string argv ran its first letter ("echo hi" -> `e`: FileNotFoundError 'e'); a NaN
    # timeout ran with no timeout at all; a "5" raised TypeError from a comparison.
    with pytest.raises(ValueError) as caught:
        run_process(**kwargs)
    assert str(caught.value).startswith(message)


def test_a_path_in_argv_runs_as_its_path(tmp_path):
    marker = tmp_path / "ran"
    result = run_process(["touch", marker])
    assert result.ended is ProcessEnd.EXITED and marker.exists()
    assert result.argv == ("touch", str(marker))


def test_a_huge_timeout_waits_without_overflowing():
    from runtime import ProcessEnd, run_process

    result = run_process(["true"], timeout=1e300)
    assert result.ended is ProcessEnd.EXITED


def test_an_error_in_the_wait_kills_the_childs_group(monkeypatch, tmp_path):
    # A Ctrl-C (or any error) in the wait closed the pipes and left the child and its
    # grandchildren running.
    from runtime import process

    pidfile = tmp_path / "grandchild.pid"
    real_wait = process._wait

    def interrupted(proc, *args):
        deadline = time.monotonic() + 5
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "_wait", interrupted)
    started: list[int] = []
    real_popen = process.subprocess.Popen

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(process.subprocess, "Popen", popen)
    with pytest.raises(KeyboardInterrupt):
        run_process(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], timeout=60)
    assert real_wait is not interrupted
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(grandchild)
    assert not _process_group_alive(started[0])


def test_a_run_refused_its_wake_pipe_leaves_no_child_running(monkeypatch):
    # The child was started first: a pipe refused then (no descriptor left, another tool
    # holding them) raised with it running, its timeout never applied.
    import errno
    import subprocess

    real_pipe, real_popen = os.pipe, subprocess.Popen
    children: list[subprocess.Popen[bytes]] = []

    def pipe() -> tuple[int, int]:
        if sys._getframe(1).f_code.co_name == "run_process":  # the run's own, not Popen's
            raise OSError(errno.EMFILE, "Too many open files")
        return real_pipe()

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        child = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        children.append(child)
        return child

    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.setattr(subprocess, "Popen", popen)
    try:
        with pytest.raises(OSError, match="Too many open files"):
            run_process([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
        assert [child.poll() for child in children if child.poll() is None] == []
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=10)
