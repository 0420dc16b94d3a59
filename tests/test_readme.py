"""Every Python block of the README runs as written (each in its own process and temp dir)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runtime.control import ControlClient
from runtime.errors import ControlError
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[1]
TICKWORK = str(Path(sys.executable).parent / "tickwork")
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def run_block(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = cwd / "snippet.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        input="bob\n",  # the hub snippet asks for a name with input()
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _open_prompts(state: Path) -> bool:
    try:
        with ControlClient(state) as client:
            return bool(client.request("prompts")["prompts"])
    except ControlError:
        return False  # not serving yet


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{n}" for n in range(len(BLOCKS))])
def test_a_readme_python_block_runs_as_written(code, tmp_path):
    env: dict[str, str] = {}
    serve = None
    base = None
    if "ControlClient()" in code:  # the walkthrough's client: it talks to a running serve
        base = Path(tempfile.mkdtemp(prefix="tw-", dir="/tmp"))
        env["TICKWORK_STATE_DIR"] = str(base / "state")
        serve = subprocess.Popen(
            [TICKWORK, "serve", "examples/needs_a_person.toml", "--quiet"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: _open_prompts(base / "state"), timeout=30, what="the deployer's prompt")
    try:
        done = run_block(code, tmp_path, env)
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr
