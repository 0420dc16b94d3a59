"""Interaction data: prompts for a person, their answers, and the hub's change events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._enum import IdentityEnum
from ._frozen import fast_frozen_init, frozen_builder

__all__ = [
    "InteractionKind",
    "InteractionRequest",
    "InteractionResponse",
    "PromptOpened",
    "PromptSettled",
    "Settlement",
    "response_approved",
]


class InteractionKind(IdentityEnum):
    """What sort of answer a prompt wants."""

    FREE_TEXT = "free_text"
    CHOICE = "choice"
    CONFIRM = "confirm"
    TOOL_APPROVAL = "tool_approval"


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class InteractionRequest:
    """A question for a person. An empty ``id`` lets the hub mint one.

    ``payload`` carries kind-specific data as plain JSON values (for a tool approval:
    ``{"tool": name, "args": {...}}``).
    """

    id: str
    kind: InteractionKind
    prompt: str
    choices: tuple[str, ...] = ()
    stage: str = ""
    required: bool = True
    payload: Any = None

    @classmethod
    def free_text(
        cls, id: str, prompt: str, stage: str = "", required: bool = True
    ) -> InteractionRequest:
        """A question answered with any text."""
        if cls is InteractionRequest:  # the common case, built quicker (`build_request`)
            return build_request(id, _FREE_TEXT, prompt, (), stage, required, None)
        return cls(id, InteractionKind.FREE_TEXT, prompt, (), stage, required)

    @classmethod
    def choice(
        cls,
        id: str,
        prompt: str,
        choices: Sequence[str],
        stage: str = "",
        required: bool = True,
    ) -> InteractionRequest:
        """A question answered by picking one of ``choices`` (by index).

        Raises:
            ValueError: ``choices`` is empty, or a string (a str is a sequence too: ``"yes"``
                offered ``y``, ``e`` and ``s``).
        """
        if isinstance(choices, str):
            raise ValueError(f"`choices` must be a list of strings, got the string {choices!r}")
        if not choices:
            raise ValueError("`choices` must offer at least one choice, got none")
        return cls(id, InteractionKind.CHOICE, prompt, tuple(choices), stage, required)

    @classmethod
    def confirm(
        cls, id: str, prompt: str, stage: str = "", required: bool = True
    ) -> InteractionRequest:
        """A yes/no question; the answer's ``approved`` carries it."""
        return cls(id, InteractionKind.CONFIRM, prompt, (), stage, required)

    def with_id(self, id: str) -> InteractionRequest:
        """This request under another id (a copy; requests are frozen).

        Spelled out rather than ``dataclasses.replace``, which inspects the fields on every
        call and cost more than the rest of opening a prompt in the hub together; built by
        `build_request` (the hub mints an id this way for every request opened without one).
        """
        return build_request(
            id, self.kind, self.prompt, self.choices, self.stage, self.required, self.payload
        )

    @classmethod
    def tool_approval(
        cls, id: str, tool: str, args: Mapping[str, Any], stage: str = ""
    ) -> InteractionRequest:
        """Ask a person whether the tool ``tool`` may run with ``args``."""
        return cls(
            id,
            InteractionKind.TOOL_APPROVAL,
            f"allow tool {tool!r} with {dict(args)!r}?",
            (),
            stage,
            True,
            {"tool": tool, "args": dict(args)},
        )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class InteractionResponse:
    """An answer to a prompt. The neutral response (timeout, cancel, expiry) is
    ``InteractionResponse(request_id)``: ``value == ""``, ``choice is None``,
    ``approved is None``, which an approval reads as **deny**."""

    request_id: str
    value: str = ""
    choice: int | None = None
    approved: bool | None = None

    @classmethod
    def text(cls, request_id: str, value: str) -> InteractionResponse:
        """A free-text answer."""
        if cls is InteractionResponse:  # the common case, built quicker (`build_response`)
            return build_response(request_id, value, None, None)
        return cls(request_id, value)

    @classmethod
    def choose(cls, request_id: str, index: int, value: str = "") -> InteractionResponse:
        """The answer picking choice ``index`` (``value`` may carry its label)."""
        return cls(request_id, value=value, choice=index)

    @classmethod
    def approval(cls, request_id: str, approved: bool, value: str = "") -> InteractionResponse:
        """A yes/no answer to a confirm or tool-approval prompt."""
        return cls(request_id, value=value, approved=approved)

    @classmethod
    def neutral(cls, request_id: str) -> InteractionResponse:
        """The one response that timeout, cancel and expiry all resolve to."""
        if cls is InteractionResponse:
            return build_response(request_id, "", None, None)
        return cls(request_id)


def response_approved(response: InteractionResponse) -> bool:
    """Whether ``response`` approves: only ``approved is True`` does (rule: expiry denies)."""
    return response.approved is True


_FREE_TEXT = InteractionKind.FREE_TEXT


class Settlement(IdentityEnum):
    """How an open prompt left the open set."""

    ANSWERED = "answered"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class PromptOpened:
    """Hub change event: ``request`` from ``agent_id`` joined the open set at ``at``."""

    agent_id: str
    request: InteractionRequest
    at: float
    deadline: float | None = None


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class PromptSettled:
    """Hub change event: a prompt left the open set, ``how`` and with which ``response``.

    ``response`` is the neutral one unless ``how`` is ``ANSWERED``.
    """

    agent_id: str
    request_id: str
    how: Settlement
    response: InteractionResponse
    opened_at: float
    at: float
    kind: InteractionKind = field(default=InteractionKind.FREE_TEXT)


# The hub builds these on every opening and settlement: every field, positionally, quicker
# than the classes themselves (see `frozen_builder`). For the hub's own use; not exported.
build_request = frozen_builder(InteractionRequest)
build_response = frozen_builder(InteractionResponse)
build_prompt_opened = frozen_builder(PromptOpened)
build_prompt_settled = frozen_builder(PromptSettled)
