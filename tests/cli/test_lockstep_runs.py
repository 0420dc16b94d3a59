"""Lockstep scenario runs: separate processes, one of them loaded and journaled, one run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runtime.journal import JournalReader
from tests.cli.test_cli import ROOT, summary_of, tickwork


def digests_in_a_fresh_process(scenario: str) -> dict:
    """Every tick's digest of a run in a process of its own (no journal, no load)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.scenario_digests", scenario],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.timeout(300)  # two runs of 5,000 agents, one of them beside a CPU burner
@pytest.mark.parametrize("name", ["factory", "quickstart"])
def test_a_lockstep_scenario_is_the_same_run_in_every_process_under_any_load(name, tmp_path):
    scenario = f"examples/{name}.toml"
    first = digests_in_a_fresh_process(scenario)
    journal = tmp_path / "run.db"
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:  # the second run: a CPU burner beside it, and every tick committed to a journal
        summary = summary_of(
            tickwork("run", scenario, "--json", "--quiet", "--journal", str(journal), timeout=120)
        )
    finally:
        burner.kill()
        burner.wait(10)
    with JournalReader(journal) as reader:
        recorded = [tick.digest for tick in reader.ticks()]
    assert first["ended"] == summary["ended"] == "finished"
    assert first["ticks"] == summary["ticks"] == len(recorded)
    assert first["digests"] == recorded  # the same digest after every tick
    assert summary["digest"] == recorded[-1]
    assert summary["lockstep"] is True
