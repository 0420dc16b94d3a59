"""The simulated operator of a scenario: a person who answers every prompt after a delay.

It watches the inputs each tick applies (``world.observe``) for ``PromptOpened`` and sets a
host timer (``world.call_at``) for the opening time plus ``delay``, in world time, so under a
virtual clock the world skips straight to the answer instead of waiting for it. The timer
answers through the hub like any person would; a prompt settled meanwhile (cancelled,
expired, answered by someone else) is left alone. Prompts already open when the operator
arrives (a resumed run's, reopened by `runtime.resume` without a second opening event) are
answered the same way, ``delay`` after they first opened.

Policies: ``approve`` approves approvals and confirmations, picks the first choice, and
answers free text with ``text`` (default ``"yes"``); ``deny`` denies them, picks nothing,
and answers ``text`` (default ``"no"``); ``first-choice`` picks the first choice and answers
anything else with ``text`` (default ``"ok"``; an approval left unapproved reads as deny);
``text`` answers ``text`` to everything; ``none`` never answers.
"""

from __future__ import annotations

import threading
from functools import partial

from components import InteractionKind, InteractionRequest, InteractionResponse, PromptOpened
from runtime.world import TickReport, World

__all__ = ["Operator", "operator_response"]

_DEFAULT_TEXT = {"approve": "yes", "deny": "no", "first-choice": "ok", "text": "ok"}
_YES_NO = (InteractionKind.CONFIRM, InteractionKind.TOOL_APPROVAL)


def operator_response(
    request: InteractionRequest, policy: str, text: str | None = None
) -> InteractionResponse | None:
    """The answer ``policy`` gives ``request`` (None for ``none``)."""
    if policy == "none":
        return None
    value = text if text is not None else _DEFAULT_TEXT[policy]
    choices = request.choices
    if policy in ("approve", "first-choice") and choices:
        return InteractionResponse(request.id, value=choices[0], choice=0)
    if policy in ("approve", "deny") and request.kind in _YES_NO:
        return InteractionResponse.approval(request.id, policy == "approve", value)
    return InteractionResponse.text(request.id, value)


class Operator:
    """Answers ``world``'s prompts by ``policy`` ``delay`` world seconds after each opens."""

    def __init__(self, world: World, *, delay: float, policy: str, text: str | None = None):
        self._world = world
        self.delay = delay
        self.policy = policy
        self.text = text
        self._lock = threading.Lock()
        self.answered = 0
        if policy != "none":
            world.observe(self._on_tick, every_tick=False)  # reads only prompt openings
            for opened in world.hub.opened():
                self._schedule(opened)

    def _on_tick(self, report: TickReport, inputs: list[tuple[int, object]]) -> None:
        for _, item in inputs:
            if type(item) is PromptOpened:
                self._schedule(item)

    def _schedule(self, opened: PromptOpened) -> None:
        response = operator_response(opened.request, self.policy, self.text)
        if response is not None:
            self._world.call_at(opened.at + self.delay, partial(self._answer, response))

    def _answer(self, response: InteractionResponse) -> None:
        if self._world.hub.answer(response):
            with self._lock:
                self.answered += 1
