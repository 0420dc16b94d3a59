"""The built-in tools: `ShellTool`, `AskUserTool` and `SleepTool` (see `runtime.tools.base`).

Each is a plain object with slots, no locks and no threads, so a registry holding them pickles.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from components import InteractionRequest
from runtime.cancel import Cancelled
from runtime.errors import ConfigError
from runtime.process import DEFAULT_MAX_OUTPUT, ProcessEnd, run_process
from runtime.tools.base import ToolBase, ToolContext

__all__ = ["AskUserTool", "ShellTool", "SleepTool"]


class ShellTool(ToolBase):
    """A command run without a shell: each ``argv`` item is filled from the call's arguments.

    Each item is formatted on its own with ``str.format(**args)``, so an argument becomes
    exactly one argv entry, whatever it contains (``;``, ``$(...)``, quotes): it cannot
    inject a command. Returns ``{"exit_code", "stdout", "stderr"}`` when the command exits
    (whatever its status). On cancel or timeout the command's whole process group is killed.
    """

    __slots__ = ("argv", "cwd", "env", "max_output")

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        requires_approval: bool = False,
        idempotent: bool = False,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> None:
        """Describe the command; nothing runs until the tool is called.

        Raises:
            ConfigError: ``argv`` is empty or not all strings (or one holds a NUL),
                ``timeout`` is not positive, ``env`` does not map strings to strings (or
                holds a name that is empty or has '=' or NUL, or a value with NUL), or
                ``max_output`` is not an integer >= 2 (each failed the call, not the
                set-up, before).
        """
        if not isinstance(argv, str) and not isinstance(argv, list | tuple):
            argv = list(argv)  # an iterator: read once, here (the check consumed it)
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError(f"`argv` of tool {name!r} must be a list of strings, got {argv!r}")
        if env is not None and not (
            isinstance(env, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise ConfigError(f"`env` of tool {name!r} must map strings to strings, got {env!r}")
        for key, value in (env or {}).items():
            # What the OS refuses (each failed every call, not the set-up, before).
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ConfigError(
                    f"`env` of tool {name!r}: {key!r}={value!r} is no environment variable"
                    " (a name must be non-empty, without '=' or NUL; a value without NUL)"
                )
        for item in argv:
            if "\0" in item:
                raise ConfigError(f"`argv` of tool {name!r}: {item!r} holds a NUL character")
        if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 2:
            raise ConfigError(
                f"`max_output` of tool {name!r} must be an integer >= 2, got {max_output!r}"
            )
        super().__init__(name, timeout, requires_approval, local_only=False, idempotent=idempotent)
        self.argv = tuple(argv)
        self.cwd = None if cwd is None else os.fspath(cwd)
        self.env = None if env is None else dict(env)
        self.max_output = max_output

    def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Run the command and return its exit code and output.

        Raises:
            ValueError: an argv item names an argument the call does not have.
            Cancelled: the call's token fired (a cancel or the timeout); the group is dead.
            OSError: the command cannot be started.
        """
        argv = [self._fill(item, args) for item in self.argv]
        result = run_process(
            argv, cancel=ctx.cancel, cwd=self.cwd, env=self.env, max_output=self.max_output
        )
        if result.ended is not ProcessEnd.EXITED:
            raise Cancelled(ctx.cancel.reason or "cancelled")
        return {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}

    def _fill(self, item: str, args: Mapping[str, Any]) -> str:
        try:
            return item.format_map(args)
        except KeyError as exc:
            raise ValueError(
                f"tool {self.name!r} needs the argument {exc.args[0]!r} (for {item!r})"
            ) from None
        except (IndexError, ValueError, AttributeError) as exc:
            raise ValueError(f"tool {self.name!r} cannot fill {item!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"<ShellTool {self.name!r} {list(self.argv)!r}>"


class AskUserTool(ToolBase):
    """Ask a person through the hub: args ``prompt`` (and optional ``choices``).

    Returns the answer's text, or for a choice the chosen label. The wait happens off the
    lane (the hub's ``ask`` steps off it), so a prompt never holds lane capacity.
    """

    __slots__ = ()

    def __init__(
        self, name: str = "ask_user", *, timeout: float | None = None, idempotent: bool = False
    ) -> None:
        """Name the tool; ``timeout`` (seconds) withdraws the prompt when it passes.

        ``idempotent=True``: a question cut short by a restart is asked again on resume.

        Raises:
            ConfigError: ``timeout`` is not positive.
        """
        super().__init__(
            name, timeout, requires_approval=False, local_only=True, idempotent=idempotent
        )

    def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Ask and return the answer.

        Raises:
            ValueError: ``prompt`` is missing or ``choices`` is not a list of strings.
            ConfigError: the call has no hub.
        """
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"tool {self.name!r} needs the argument 'prompt', got {prompt!r}")
        choices = args.get("choices") or ()
        if not isinstance(choices, list | tuple) or not all(isinstance(c, str) for c in choices):
            raise ValueError(f"tool {self.name!r}: `choices` must be strings, got {choices!r}")
        if choices:
            response = ctx.ask(InteractionRequest.choice("", prompt, list(choices)))
            if response.choice is not None and 0 <= response.choice < len(choices):
                return choices[response.choice]
        else:
            response = ctx.ask(InteractionRequest.free_text("", prompt))
        return response.value


class SleepTool(ToolBase):
    """Wait ``seconds`` of real time on the call's token; returns the seconds slept."""

    __slots__ = ()

    def __init__(
        self, name: str = "sleep", *, timeout: float | None = None, idempotent: bool = False
    ) -> None:
        """Name the tool; ``idempotent=True`` sleeps again after a restart cut it short.

        Raises:
            ConfigError: ``timeout`` is not positive.
        """
        super().__init__(
            name, timeout, requires_approval=False, local_only=False, idempotent=idempotent
        )

    def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Sleep, waking early if the call's token fires.

        Raises:
            ValueError: ``seconds`` is not a finite number >= 0.
            Cancelled: the token fired before the time was up.
        """
        seconds = args.get("seconds")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ValueError(f"tool {self.name!r} needs `seconds` >= 0, got {seconds!r}")
        if ctx.cancel.wait(seconds):
            raise Cancelled(ctx.cancel.reason or "cancelled")
        return seconds
