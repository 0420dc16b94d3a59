"""Token usage of model calls, and per-agent token budgets."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from runtime.errors import BudgetExceeded, ConfigError

__all__ = ["Budget", "Usage", "UsageMeter", "token_count"]


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens one model call read (the prompt) and wrote (the reply)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        """Tokens in and out together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


def token_count(value: object) -> int:
    """A token count as a provider's stream gives it (absent or null: 0).

    Raises:
        ValueError: ``value`` is not a whole number >= 0 (a negative count would give an
            agent's budget back; a string, a bool or an infinity is no count).
    """
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise ValueError(f"a token count must be a whole number >= 0, got {value!r}")


class Budget:
    """A token budget for each agent that uses a model: ``Budget(tokens=10_000)``.

    Each agent has its own allowance of ``tokens`` (in and out together). A call that
    starts while the agent has used its allowance fails with `BudgetExceeded`; the call
    that crosses the line still completes (its tokens were spent before anyone knew), so
    the agent stops at its next ``Think``. A call that ends without a reply once the
    server began one (interrupted, cancelled, cut off) is charged what it spent so far.
    Other agents are unaffected. Thread-safe: lane workers charge and check it
    concurrently.
    """

    __slots__ = ("_lock", "_used", "tokens")

    def __init__(self, tokens: int) -> None:
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ConfigError(f"`tokens` must be an integer >= 1, got {tokens!r}")
        self.tokens = tokens
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}

    def check(self, agent_id: str, model: str) -> None:
        """Refuse a call for an agent that has used its allowance.

        Raises:
            BudgetExceeded: the agent has used ``tokens`` or more.
        """
        used = self.used(agent_id)
        if used >= self.tokens:
            raise BudgetExceeded(
                f"agent {agent_id!r} has used its token budget for model {model!r}:"
                f" {used} of {self.tokens} tokens"
            )

    def charge(self, agent_id: str, usage: Usage | None) -> None:
        """Add a call's tokens to the agent's account."""
        if usage is None:
            return
        with self._lock:
            self._used[agent_id] = self._used.get(agent_id, 0) + usage.total

    def used(self, agent_id: str) -> int:
        """Tokens the agent has spent so far."""
        with self._lock:
            return self._used.get(agent_id, 0)

    def __repr__(self) -> str:
        return f"Budget(tokens={self.tokens})"


class UsageMeter:
    """Tokens in and out per model name, summed over the replies a world received.

    Thread-safe: lane workers add as replies arrive. For reports (the run summary,
    telemetry), not for the world's state: a replay calls no model and meters nothing.
    """

    __slots__ = ("_lock", "_totals")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, Usage] = {}

    def add(self, model: str, usage: Usage | None) -> None:
        """Count one reply's tokens for ``model`` (a reply without usage counts nothing)."""
        if usage is None:
            return
        with self._lock:
            self._totals[model] = self._totals.get(model, Usage()) + usage

    def totals(self) -> dict[str, Usage]:
        """Tokens per model name so far, sorted by name."""
        with self._lock:
            return dict(sorted(self._totals.items()))
