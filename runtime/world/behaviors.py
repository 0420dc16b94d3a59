"""Behaviour names: how a journal refers to the code an agent runs.

A journal stores a behaviour by name, never by pickled code: ``module:qualname`` for an
importable function, or a name registered with ``register_behavior``/``@behavior``. A
replay resolves the names again; a name that does not resolve fails with an error naming
it. Nothing in a journal is executed: resolving imports a module the user already has.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from runtime.errors import BehaviorNotFound

__all__ = ["BehaviorRegistry", "behavior", "import_by_name", "register_behavior"]

F = TypeVar("F", bound=Callable[..., Any])


class BehaviorRegistry:
    """Names to behaviours and back. Lookups fall back to a parent, then to import."""

    def __init__(self, parent: BehaviorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, Callable[..., Any]] = {}
        self._names: dict[Callable[..., Any], str] = {}
        # Names found by import, both ways. A world resolves a behaviour's name on every
        # spawn (three times: naming it, checking it, creating the agent) and an import
        # lookup costs ~8 µs; the cache lives as long as the registry (one world), so a
        # module reloaded later is seen by the next world.
        self._imported: dict[str, Callable[..., Any]] = {}
        self._imported_names: dict[Callable[..., Any], str] = {}
        self._parent = parent

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        """Register ``fn`` under ``name``.

        Raises:
            ValueError: ``name`` is empty or already names another function.
        """
        if not name:
            raise ValueError("a behaviour name must not be empty")
        if not callable(fn):
            raise TypeError(f"behaviour {name!r} must be callable, got {fn!r}")
        with self._lock:
            known = self._by_name.get(name)
            if known is not None and known is not fn:
                raise ValueError(f"behaviour name {name!r} is already registered")
            self._by_name[name] = fn
            self._names.setdefault(fn, name)

    def update(self, behaviors: Mapping[str, Callable[..., Any]]) -> None:
        """Register every ``name: fn`` of ``behaviors``."""
        for name, fn in behaviors.items():
            self.register(name, fn)

    def name_of(self, fn: Callable[..., Any]) -> str:
        """The name a journal stores for ``fn``: its registered name, else ``module:qualname``.

        A function that cannot be found again by name (a lambda, a nested function) is
        registered here under its qualified name, so this world can still run it; a replay
        must then be given it with ``behaviors=``.
        """
        # Reads take no lock (see `resolve`).
        name = self._names.get(fn)
        if name is not None:
            return name
        if self._parent is not None:
            parent_name = self._parent.try_name_of(fn)
            if parent_name is not None:
                return parent_name
        name = self._imported_names.get(fn)  # after the registered names: they come first
        if name is not None:
            return name
        name = qualified_name(fn)
        if self._import(name) is not fn:
            self.register(name, fn)
        return name

    def try_name_of(self, fn: Callable[..., Any]) -> str | None:
        """The registered name of ``fn`` here or in a parent, or None."""
        name = self._names.get(fn)  # no lock: see `resolve`
        if name is None and self._parent is not None:
            return self._parent.try_name_of(fn)
        return name

    def resolve(self, name: str) -> Callable[..., Any]:
        """The behaviour called ``name``.

        Raises:
            BehaviorNotFound: nothing is registered under ``name`` and it does not import.
        """
        # Reads take no lock: each is one `dict.get`, atomic under the GIL, and the maps
        # only grow (a name, once registered or imported, keeps its function), so a
        # lookup racing a `register` finds the state before it or after it, as under the
        # lock. A spawn resolves twice (at the call, then on the tick thread) and names
        # once: nine lock round trips a spawn, all on the host's or the tick's thread.
        fn = self._by_name.get(name)
        if fn is not None:
            return fn
        parent = self._parent
        if parent is not None:
            fn = parent._by_name.get(name)
            if fn is not None:
                return fn
        fn = self._imported.get(name)  # after the registered names: they come first
        if fn is None:
            fn = self._import(name)
        if fn is None:
            raise BehaviorNotFound(
                f"behaviour {name!r} cannot be found: register it with register_behavior()"
                " or pass it to replay(behaviors=...)"
            )
        return fn

    def _import(self, name: str) -> Callable[..., Any] | None:
        """Import ``name`` (``module:qualname``), remembering what it found."""
        fn = _import(name)
        if fn is not None:
            with self._lock:
                self._imported[name] = fn
                self._imported_names.setdefault(fn, name)
        return fn


def qualified_name(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function.

    A function of a module run as ``python -m package.module`` is named after
    ``package.module``, not ``__main__``, so another process can import it by name.
    """
    module = getattr(fn, "__module__", None) or "?"
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            module = spec.name
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    return f"{module}:{qualname}"


def import_by_name(name: str) -> object | None:
    """The object a ``module:qual.name`` names, imported; None when it cannot be found."""
    module_name, sep, attr_path = name.partition(":")
    if not sep or not module_name or not attr_path or "<" in attr_path:
        return None
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr_path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    found: object = obj
    return found


def _import(name: str) -> Callable[..., Any] | None:
    obj = import_by_name(name)
    return obj if callable(obj) and not inspect.isclass(obj) else None


GLOBAL_BEHAVIORS = BehaviorRegistry()


def register_behavior(name: str, fn: Callable[..., Any]) -> None:
    """Register ``fn`` process-wide under ``name`` (every world and replay sees it)."""
    GLOBAL_BEHAVIORS.register(name, fn)


def behavior(name: str | None = None) -> Callable[[F], F]:
    """Decorator: register a behaviour process-wide, under ``name`` or ``module:qualname``."""

    def decorate(fn: F) -> F:
        GLOBAL_BEHAVIORS.register(name or qualified_name(fn), fn)
        return fn

    return decorate
