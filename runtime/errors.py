"""The exceptions tickwork raises, all under one base class.

Catch ``TickworkError`` to handle anything tickwork raises on purpose. The tree::

    TickworkError
    ├── ConfigError            a bad argument or setting (also a ValueError)
    │   └── ScenarioError      a scenario file that does not validate (names file, key, line)
    ├── UnknownAgentError      a command names an agent the world never had (also a KeyError)
    ├── JoinCycleError         a ``Join`` that would wait for ever (itself, or a cycle)
    ├── DuplicateRequestError  a prompt opened with an id that is already open
    ├── LaneClosedError        a job submitted to a lane after ``close()``
    ├── WorldClosedError       a command sent to a world after ``close()``
    ├── TickLimitError         ``run_until_idle`` hit its tick or time limit with work left
    ├── BehaviorNotFound       a behaviour name (``module:function``) that does not resolve
    ├── ModelError             a ``Think`` whose model failed (thrown into the behaviour)
    │   ├── ProviderError      a model provider refused or failed (names provider and status)
    │   ├── BudgetExceeded     an agent has used its token budget
    │   └── CassetteMiss       a cassette has no recording for a request
    ├── JournalError           a journal file that is missing, corrupt, foreign or too new
    ├── ReplayDivergence       a replayed tick whose digest differs from the recording
    └── ControlError           the control channel refused a request or is unreachable

``Cancelled`` is not here: it is a control-flow signal and derives from ``BaseException``
(like trio's), so a broad ``except Exception`` in a tool does not swallow a cancellation.
"""

from __future__ import annotations

__all__ = [
    "BehaviorNotFound",
    "BudgetExceeded",
    "CassetteMiss",
    "ConfigError",
    "ControlError",
    "DuplicateRequestError",
    "JoinCycleError",
    "JournalError",
    "LaneClosedError",
    "ModelError",
    "ProviderError",
    "ReplayDivergence",
    "ScenarioError",
    "TickLimitError",
    "TickworkError",
    "UnknownAgentError",
    "WorldClosedError",
]


class TickworkError(Exception):
    """Base class of every error tickwork raises on purpose."""


class ConfigError(TickworkError, ValueError):
    """An argument or a setting has a value tickwork cannot use."""


class ScenarioError(ConfigError):
    """A scenario file does not validate; ``problems`` lists every problem found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class UnknownAgentError(TickworkError, KeyError):
    """A command or a lookup names an agent id the world does not know."""

    def __str__(self) -> str:
        # KeyError.__str__ would wrap the message in quotes.
        return str(self.args[0]) if self.args else ""


class JoinCycleError(TickworkError):
    """A ``Join`` would wait for ever: the agent joins itself, or an agent that waits (by
    its own ``Join``, directly or through others) for the joining agent. Thrown into the
    behaviour at its ``Join``; ``cycle`` lists the ids around the loop, the joiner first."""

    def __init__(self, message: str, cycle: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.cycle = cycle


class DuplicateRequestError(TickworkError):
    """A prompt was opened with an id that is already open in the hub."""


class LaneClosedError(TickworkError):
    """A job was submitted to a lane that has been closed."""


class WorldClosedError(TickworkError):
    """A command was sent to a world that has been closed."""


class TickLimitError(TickworkError):
    """``run_until_idle`` reached its tick or time limit while work was left."""


class BehaviorNotFound(TickworkError):
    """A behaviour name does not resolve to a generator function."""


class ModelError(TickworkError):
    """A model call failed; thrown into the behaviour at its ``Think``."""


class ProviderError(ModelError):
    """A model provider's call failed: ``provider``, ``status`` (None without a response),
    and the provider's own message, all in the text. Never holds an API key."""

    def __init__(
        self,
        provider: str,
        message: str,
        status: int | None = None,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.message = message  # the provider's own words, without the provider and status
        self.retryable = retryable
        self.retry_after = retry_after  # seconds the provider asked us to wait, if it did
        where = provider if status is None else f"{provider} HTTP {status}"
        super().__init__(f"{where}: {message}")


class BudgetExceeded(ModelError):
    """An agent asked a model for more after using its token budget."""


class CassetteMiss(ModelError):
    """A cassette in replay mode was asked a request it has no recording for."""


class JournalError(TickworkError):
    """A journal file cannot be read: missing, corrupt, foreign, truncated or too new."""


class ReplayDivergence(TickworkError):
    """A replayed tick's digest differs from the recorded one.

    ``tick`` is the first tick that differs, ``expected``/``actual`` the two digests, and
    ``agents`` maps each agent whose state differs to a list of ``field: expected != actual``
    lines.
    """

    def __init__(self, tick: int, expected: str, actual: str, agents: dict[str, list[str]]) -> None:
        self.tick = tick
        self.expected = expected
        self.actual = actual
        self.agents = dict(agents)
        lines = [f"replay diverged at tick {tick}: expected digest {expected}, got {actual}"]
        for agent_id in sorted(self.agents):
            lines.append(f"  agent {agent_id!r}:")
            lines.extend(f"    {line}" for line in self.agents[agent_id])
        super().__init__("\n".join(lines))


class ControlError(TickworkError):
    """The control channel refused a request or could not be reached."""
