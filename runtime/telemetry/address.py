"""Listening addresses as a person writes them: ``HOST:PORT``."""

from __future__ import annotations

from runtime.errors import ConfigError

__all__ = ["parse_address"]


def parse_address(text: str, *, name: str = "address") -> tuple[str, int]:
    """``"HOST:PORT"`` (``"[::1]:9464"`` for IPv6; port 0 picks a free one) as a pair.

    Raises:
        ConfigError: ``text`` is not ``HOST:PORT`` with a port from 0 to 65535 (the
            message names ``name`` and shows the value escaped).
    """
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or any(c.isspace() or not c.isprintable() for c in host):
        raise ConfigError(f"`{name}` must be HOST:PORT (such as 127.0.0.1:9464), got {text!r}")
    if not (port.isascii() and port.isdigit() and len(port) <= 5) or int(port) > 65535:
        raise ConfigError(f"`{name}` must have a port from 0 to 65535, got {text!r}")
    return host, int(port)
