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


def test_the_village_runs_records_and_replays_with_the_setup_the_user_allows(tmp_path):
    journal = tmp_path / "village.db"
    run = [sys.executable, "examples/village/run.py", "--frames", "40", "--npcs", "60"]
    done = subprocess.run(
        [*run, "--journal", str(journal)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "village: 40 frames, 60 villagers" in done.stdout
    assert "@" in done.stdout  # the map, drawn once when not on a terminal
    replay = [sys.executable, "-m", "runtime.cli.main", "replay", str(journal), "--quiet"]
    refused = subprocess.run(
        replay, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode == 2, refused.stderr  # the journal alone imports nothing
    assert "pass --path DIR" in refused.stderr
    allowed = subprocess.run(
        [*replay, "--path", str(ROOT / "examples" / "village")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "replay matched: 40 ticks" in allowed.stdout


def test_the_village_in_virtual_time_runs_the_same_twice_even_under_load():
    # Lockstep delivery (on under the virtual clock): the same frames, the same digest.
    run = [sys.executable, "examples/village/run.py", "--frames", "30", "--npcs", "40", "--quiet"]
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        digests = []
        for _ in range(2):
            done = subprocess.run(
                run, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
            )
            assert done.returncode == 0, done.stderr
            digests.append(done.stdout.rsplit("digest ", 1)[1].strip())
    finally:
        burner.kill()
        burner.wait(timeout=30)
    assert digests[0] == digests[1]
    assert len(digests[0]) == 32
