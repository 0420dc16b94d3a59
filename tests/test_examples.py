"""Every bundled example runs to completion the way the README says to run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_embedded_host_example_runs():
    done = subprocess.run(
        [sys.executable, "examples/embedded_host.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "host loop: 5 scouts done" in done.stdout
    assert "deploy staging: yes" in done.stdout
    assert "deploy prod: not today" in done.stdout
