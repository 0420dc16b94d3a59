"""A request as chat messages: the agent's history, then the prompt.

History entries have the roles ``user``, ``assistant``, ``system`` (markers such as
``[interrupted by user]``) and ``tool`` (``name[id]: output``). Tool results are sent as
user messages, because the history keeps them as text, not as the structured pairs of an
assistant's tool call and its result that the providers' tool roles require.
"""

from __future__ import annotations

from typing import Any

from runtime.models.base import ModelRequest

__all__ = ["chat_messages", "tool_specs"]

Message = dict[str, str]


def chat_messages(request: ModelRequest) -> list[Message]:
    """The request as ``{"role", "content"}`` messages, oldest first, the prompt last."""
    messages: list[Message] = []
    for entry in request.history:
        if not entry.content:
            continue
        if entry.role in ("user", "assistant", "system"):
            messages.append({"role": entry.role, "content": entry.content})
        else:
            messages.append({"role": "user", "content": f"[{entry.role}] {entry.content}"})
    messages.append({"role": "user", "content": request.prompt})
    return messages


def tool_specs(tools: Any) -> tuple[dict[str, Any], ...]:
    """Tool declarations as ``{"name", "description", "parameters"}`` (a JSON schema).

    Raises:
        ConfigError: a declaration without a name, or with parameters that are not a table.
    """
    from runtime.errors import ConfigError

    specs = []
    for index, tool in enumerate(tools or ()):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ConfigError(f"`tools[{index}]` must be a table with a `name`, got {tool!r}")
        parameters = tool.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise ConfigError(f"`tools[{index}].parameters` must be a JSON schema table")
        specs.append(
            {
                "name": tool["name"],
                "description": str(tool.get("description", "")),
                "parameters": parameters,
            }
        )
    return tuple(specs)
