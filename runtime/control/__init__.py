"""The control channel: steer a running world from another process.

``tickwork serve`` opens a ``ControlServer`` in a state directory (``--state-dir``, default
``default_state_dir()``): a Unix socket ``control.sock`` created 0600 and a ``token`` file
(0600) holding a random token that every request must carry. ``ControlClient`` reads the
token and talks to the socket. The protocol is newline-delimited JSON, one request and one
reply per line::

    -> {"token": "...", "op": "answer", "request_id": "deployer/t1/p1", "choice": 0}
    <- {"ok": true, "answered": "deployer/t1/p1", "agent": "deployer"}
    <- {"ok": false, "code": "no_prompt", "error": "no open prompt 'x'"}

Ops: ``ping``, ``agents``, ``prompts``, ``answer`` (``request_id`` and any of ``value``,
``choice``, ``approved``), ``cancel_prompt`` (``request_id``), ``send`` (``agent``,
``text``), ``pause`` / ``resume`` / ``cancel`` / ``interrupt`` (``agent``), ``stats``, and
``subscribe``, after whose reply the server streams one event per line (every input the
world applies, as ``{"event": "input", "tick", "seq", "kind", "data"}``, and every streamed
model delta as it arrives, as ``{"event": "delta", "agent_id", "text"}``) until it closes.
"""

from runtime.control.client import ControlClient
from runtime.control.server import MAX_CLIENTS, MAX_LINE, ControlServer
from runtime.control.state_dir import StateDir, default_state_dir

__all__ = [
    "MAX_CLIENTS",
    "MAX_LINE",
    "ControlClient",
    "ControlServer",
    "StateDir",
    "default_state_dir",
]
