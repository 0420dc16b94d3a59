"""The ``tickwork`` commands that talk to a running ``serve``: ps, respond, send, and steering."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from runtime.control import ControlClient
from runtime.errors import ConfigError, ControlError
from runtime.scenario.check import escape_controls

__all__ = ["add_control_commands"]

_STEERING = {
    "interrupt": ("abandon an agent's current turn (it keeps its history)", "interrupted"),
    "pause": ("stop stepping an agent until resume", "paused"),
    "resume": ("undo pause", "resumed"),
    "cancel": ("end an agent for good", "cancelled"),
}
_YES = ("y", "yes", "approve", "approved", "true")
_NO = ("n", "no", "deny", "denied", "false")


def add_control_commands(sub: Any, state_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ps, respond, send, interrupt, pause, resume, cancel and watch to ``sub``."""
    ps = sub.add_parser("ps", help="list the agents of a running serve")
    ps.add_argument("--json", action="store_true", help="print JSON")
    state_dir(ps)
    ps.set_defaults(func=cmd_ps)

    respond = sub.add_parser("respond", help="answer a prompt (no ID: list open prompts)")
    respond.add_argument("id", nargs="?", metavar="ID", help="a prompt id, or an agent id")
    respond.add_argument("value", nargs="?", metavar="VALUE", help="the answer's text")
    how = respond.add_mutually_exclusive_group()
    how.add_argument("--choice", type=int, metavar="N", help="pick choice N (from 0)")
    how.add_argument("--approve", action="store_true", help="approve (tool approvals, yes/no)")
    how.add_argument("--deny", action="store_true", help="deny (tool approvals, yes/no)")
    respond.add_argument("--json", action="store_true", help="print JSON")
    state_dir(respond)
    respond.set_defaults(func=cmd_respond)

    send = sub.add_parser("send", help="give an agent its next message")
    send.add_argument("agent", metavar="AGENT", help="the agent's id (see `tickwork ps`)")
    send.add_argument("text", metavar="TEXT", help="the message")
    state_dir(send)
    send.set_defaults(func=cmd_send)

    for op, (text, _) in _STEERING.items():
        if op == "resume":
            continue  # `resume AGENT` shares its command with `resume JOURNAL` (cli/resume.py)
        cmd = sub.add_parser(op, help=text)
        cmd.add_argument("agent", metavar="AGENT", help="the agent's id (see `tickwork ps`)")
        state_dir(cmd)
        cmd.set_defaults(func=cmd_steer, op=op)

    watch = sub.add_parser("watch", help="print events of a running serve as they happen")
    watch.add_argument("--json", action="store_true", help="one JSON event per line")
    state_dir(watch)
    watch.set_defaults(func=cmd_watch)


def _client(args: argparse.Namespace) -> ControlClient:
    # An empty --state-dir is the default one, as `tickwork serve` reads it (it was the
    # current directory here: the two never met).
    return ControlClient(args.state_dir or None)


def cmd_ps(args: argparse.Namespace) -> int:
    """``tickwork ps``: the agents of a running serve and their status."""
    with _client(args) as client:
        agents = client.request("agents")["agents"]
        prompts = client.request("prompts")["prompts"]
        stats = client.request("stats")
    if args.json:
        print(json.dumps({"agents": agents, "prompts": prompts, "tick": stats["tick"]}, indent=2))
        return 0
    waiting = {p["agent"]: p["id"] for p in prompts}
    table = Table("AGENT", "STATUS", "DETAIL", box=None, pad_edge=False)
    for agent in agents:
        detail = agent["message"] or agent["reason"] or ""
        if agent["status"] == "complete" or (agent["status"] == "idle" and agent["result"]):
            detail = _short(agent["result"])
        if agent["id"] in waiting:
            detail = f"prompt {waiting[agent['id']]}"
        table.add_row(_cell(agent["id"]), _cell(agent["status"]), _cell(detail))
    console = Console()
    console.print(table)
    console.print(
        f"{len(agents)} agents, {len(prompts)} open prompt{'' if len(prompts) == 1 else 's'},"
        f" tick {stats['tick']}",
        highlight=False,
    )
    return 0


def _cell(value: str) -> Text:
    """A table cell of text from the world (an answer, a prompt, a model's reply): shown
    as it is, never read as rich markup (``[/x]`` raised, ``[link=...]`` vanished), its
    control characters and lone surrogates escaped (never written raw to a terminal)."""
    return Text(escape_controls(value))


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def cmd_respond(args: argparse.Namespace) -> int:
    """``tickwork respond``: answer a prompt, or list the open ones."""
    with _client(args) as client:
        prompts = client.request("prompts")["prompts"]
        if args.id is None:
            return _list_prompts(prompts, args.json)
        prompt = _find_prompt(prompts, args.id)
        fields = _answer_fields(prompt, args)
        reply = client.request("answer", request_id=prompt["id"], **fields)
    if args.json:
        print(json.dumps(reply))
    elif reply.get("applied", True):
        print(f"answered {reply['answered']} ({reply['agent']})")
    else:  # settled at the hub: the agent takes it at the world's next tick
        print(_queued(f"answer {reply['answered']} to", reply["agent"], reply))
    return _status(reply)


def _list_prompts(prompts: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print(json.dumps(prompts, indent=2))
        return 0
    if not prompts:
        print("no open prompts")
        return 0
    table = Table("ID", "AGENT", "KIND", "PROMPT", box=None, pad_edge=False)
    for p in prompts:
        choices = "".join(f"\n  {n}: {escape_controls(c)}" for n, c in enumerate(p["choices"]))
        prompt = Text(escape_controls(p["prompt"]) + choices)
        table.add_row(_cell(p["id"]), _cell(p["agent"]), _cell(p["kind"]), prompt)
    Console().print(table)
    return 0


def _find_prompt(prompts: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    for prompt in prompts:
        if prompt["id"] == wanted:
            return prompt
    mine = [p for p in prompts if p["agent"] == wanted]
    if len(mine) == 1:
        return mine[0]
    if mine:
        ids = ", ".join(p["id"] for p in mine)
        raise ControlError(f"agent {wanted!r} has {len(mine)} open prompts ({ids}): name one")
    raise ControlError(f"no open prompt {wanted!r} (list them with `tickwork respond`)")


def _answer_fields(prompt: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The answer ``args`` give ``prompt``: a VALUE that names a choice or says yes/no counts."""
    value: str | None = args.value
    kind, where = prompt["kind"], f"prompt {prompt['id']!r} ({prompt['kind']})"
    if args.approve or args.deny:
        if kind not in ("confirm", "tool_approval"):
            raise ConfigError(f"{where} is not a yes/no question: --approve and --deny do not fit")
        approved = bool(args.approve)
        said = None if value is None else value.lower()
        if said is not None and said in _YES + _NO and (said in _YES) != approved:
            flag = "--approve" if approved else "--deny"
            raise ConfigError(f"VALUE {value!r} and {flag} disagree for {where}: give one")
        return {"approved": approved, "value": value or ""}
    if args.choice is not None:
        choices = prompt["choices"]
        if kind != "choice":
            raise ConfigError(f"{where} has no choices: --choice does not fit")
        if not 0 <= args.choice < len(choices):
            raise ConfigError(
                f"--choice must be 0..{len(choices) - 1} for {where}, got {args.choice}"
            )
        if value is not None and value != choices[args.choice]:
            raise ConfigError(
                f"VALUE {value!r} and --choice {args.choice} ({choices[args.choice]!r})"
                f" disagree for {where}: give one"
            )
        return {"choice": args.choice}
    if value is None:
        raise ConfigError(
            f"prompt {prompt['id']!r} needs an answer:"
            " give a VALUE, --choice N, --approve or --deny"
        )
    if prompt["kind"] == "choice":
        if value in prompt["choices"]:
            return {"choice": prompt["choices"].index(value), "value": value}
        # Short ASCII digits only: `isdigit` takes '²' and '①', and `int` refuses those
        # and 4,300 digits or more.
        if (
            value.isascii()
            and value.isdigit()
            and len(value) < 10
            and int(value) < len(prompt["choices"])
        ):
            return {"choice": int(value)}
        choices = ", ".join(repr(c) for c in prompt["choices"])
        raise ConfigError(f"{value!r} is not one of the choices of {prompt['id']!r}: {choices}")
    if prompt["kind"] in ("confirm", "tool_approval"):
        if value.lower() in _YES + _NO:
            return {"approved": value.lower() in _YES, "value": value}
        raise ConfigError(f"prompt {prompt['id']!r} wants yes or no, got {value!r}")
    return {"value": value}


def cmd_send(args: argparse.Namespace) -> int:
    """``tickwork send``: give an agent its next message (exit 1 if it has ended)."""
    with _client(args) as client:
        reply = client.request("send", agent=args.agent, text=args.text)
    print(
        f"sent to {args.agent}"
        if reply.get("applied", True)
        else _queued("send to", args.agent, reply)
    )
    return _status(reply)


def cmd_steer(args: argparse.Namespace) -> int:
    """``tickwork interrupt|pause|resume|cancel AGENT``."""
    with _client(args) as client:
        reply = client.request(args.op, agent=args.agent)
    done = f"{_STEERING[args.op][1]} {args.agent}"
    print(done if reply.get("applied", True) else _queued(args.op, args.agent, reply))
    return _status(reply)


def _status(reply: dict[str, Any]) -> int:
    # Exit 1 when no tick will confirm the command (the world's loop died), so a script
    # can tell it from a command applied or queued.
    return 1 if reply.get("reason") else 0


def _queued(what: str, agent: str, reply: dict[str, Any]) -> str:
    # A serve replies once a tick has applied a command, or says it has not (within its
    # `apply_timeout`; at once in lockstep, whose ticks wait for lane work): it is
    # queued. With a reason (the world's loop died, maybe in the tick applying it), no
    # tick will say whether it was applied.
    reason = reply.get("reason")
    if reason:
        return f"{what} {agent}: not confirmed; {escape_controls(str(reason))}"
    return f"{what} {agent}: queued; the world has not applied it yet"


def cmd_watch(args: argparse.Namespace) -> int:
    """``tickwork watch``: print the inputs a running serve applies, as they happen."""
    with _client(args) as client:
        for event in client.subscribe():
            if args.json:
                print(json.dumps(event), flush=True)
            elif event.get("event") == "delta":
                text = escape_controls(str(event.get("text", "")))
                print(f"{'':>11}  {'delta':<16} {event.get('agent_id')}: {text}", flush=True)
            elif event.get("event") == "input":
                data = event["data"]
                agent = data.get("agent_id", "")
                print(f"tick {event['tick']:>6}  {event['kind']:<16} {agent}", flush=True)
            else:
                print(f"-- {event.get('event')}: {event.get('error', '')}".rstrip(": "), flush=True)
    return 0
