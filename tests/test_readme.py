"""Every Python block of the README runs as written (each in its own process and temp dir)."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import ClassVar

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


class _Collector(http.server.BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP collector: takes every POST and counts what reached it."""

    posts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Collector.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


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
    collector = None
    if "OTLPSpanExporter" in code:  # the host wiring OTLP: a collector on 127.0.0.1
        pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
        _Collector.posts = []
        collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
        threading.Thread(target=collector.serve_forever, daemon=True).start()
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{collector.server_port}"
    try:
        done = run_block(code, tmp_path, env)
    finally:
        if collector is not None:
            collector.shutdown()
            collector.server_close()
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr
    if collector is not None:
        assert "/v1/traces" in _Collector.posts  # the spans reached the collector
