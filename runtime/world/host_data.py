"""What a host component is: the checks, its names, its digest fields, esper's entity table.

Any dataclass instance is a host component, except tickwork's own (``components``,
``systems``), which the world owns. A leaf module: the digest, the host bookkeeping and
`SystemContext` all build on it.

esper 3.9 has no API to create an entity under a given id or to mint one without creating
it; `entity_table`, `mint_entity` and `create_entity_as` are the only places that reach into
esper's module state for that (pinned ``esper>=3.9,<4``).
"""

from __future__ import annotations

import copy
import enum
import json
from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from typing import Any

import esper

from runtime.errors import ConfigError

__all__ = [
    "build_component",
    "check_components",
    "copy_component",
    "create_entity_as",
    "entity_table",
    "field_names",
    "flatten",
    "is_builtin",
    "mint_entity",
    "type_name",
]

_builtin: dict[type, bool] = {}
_field_names: dict[type, tuple[str, ...]] = {}


def is_builtin(cls: type) -> bool:
    """Whether ``cls`` is one of tickwork's own components (the world owns those)."""
    known = _builtin.get(cls)
    if known is None:
        known = _builtin[cls] = cls.__module__.partition(".")[0] in ("components", "systems")
    return known


def field_names(cls: type) -> tuple[str, ...]:
    """The dataclass fields of ``cls``, in declaration order (cached per type)."""
    names = _field_names.get(cls)
    if names is None:
        names = _field_names[cls] = tuple(f.name for f in fields(cls))
    return names


def build_component(cls: type, values: dict[str, Any]) -> Any:
    """A ``cls`` instance holding ``values`` (a journal's fields, every one present), built
    as `copy_component` builds its copies: without ``__init__`` or ``__post_init__``. A
    field with ``init=False`` is in the journal but no argument, an ``InitVar`` is an
    argument but not in the journal, and a ``__post_init__`` ran when the live value was
    made: calling ``cls(**values)`` refused the first two and ran the third twice."""
    obj: Any = object.__new__(cls)
    for name in field_names(cls):
        object.__setattr__(obj, name, values[name])
    return obj


def type_name(cls: type) -> str:
    """``module:qualname`` of a component type: how a journal names it."""
    return f"{cls.__module__}:{cls.__qualname__}"


def check_components(arg: str, components: Iterable[object]) -> tuple[Any, ...]:
    """Check host components handed in by the host; returns them as a tuple.

    Raises:
        ConfigError: ``components`` is one component or no collection of them; one is not
            a dataclass instance, is a built-in component, or two share a type (the
            message names the argument, the index and the value).
    """
    given: object = components  # typed callers are right; untyped ones are checked
    if is_dataclass(given) and not isinstance(given, type):
        raise ConfigError(
            f"`{arg}` must be a list of components, got one: [{type(given).__name__}(...)]"
        )
    try:
        out = tuple(components)
    except TypeError:
        raise ConfigError(f"`{arg}` must be a list of components, got {components!r}") from None
    seen: set[type] = set()
    for index, comp in enumerate(out):
        cls = type(comp)
        if not is_dataclass(comp) or isinstance(comp, type):
            raise ConfigError(f"`{arg}[{index}]` must be a dataclass instance, got {comp!r}")
        if is_builtin(cls):
            raise ConfigError(
                f"`{arg}[{index}]` is a built-in component ({cls.__name__}); the world owns those"
            )
        if cls in seen:
            raise ConfigError(f"`{arg}[{index}]`: two components of type {cls.__name__}")
        seen.add(cls)
    return out


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind is int or kind is str or kind is float or kind is bool or value is None:
        return value
    try:
        return json.loads(_PLAIN.encode(value))  # dataclasses, enums, tuples: as plain JSON
    except Exception:  # keys JSON cannot sort or write, a 5,000-digit int, a raising repr
        # As it is: the digest's `canonical` writes what JSON cannot (it never raises), in
        # the tick that asked, so a host component's field never fails the tick.
        return value


def _fallback(value: Any) -> Any:
    # As runtime.world.digest encodes them: dataclasses by fields, enums by value, tuples
    # as lists, sets sorted, anything else by its type's name (never a repr's address).
    if is_dataclass(value) and not isinstance(value, type):
        return {name: getattr(value, name) for name in field_names(type(value))}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, set, frozenset)):
        return list(value) if isinstance(value, tuple) else sorted(value, key=repr)
    return f"<{type(value).__qualname__}>"


_PLAIN = json.JSONEncoder(sort_keys=True, default=_fallback)


def flatten(comps: dict[type, Any], journal_format: int) -> dict[str, Any]:
    """The host components of one entity as digest fields: ``{"Position.x": 3, ...}``.

    A type is named by its ``__qualname__``. From journal format 4, types of the entity
    that share one (``game.Position`` and ``physics.Position``) are named in full,
    ``module:qualname`` (``"game:Position.x"``), each of them: format 3 and older gave
    both the short name, the later type's fields overwrote the earlier's, and a change to
    the earlier went into no digest.
    """
    out: dict[str, Any] = {}
    named: list[str] = []
    for cls, comp in comps.items():
        if is_builtin(cls):
            continue
        prefix = cls.__qualname__
        if prefix in named and journal_format >= 4:
            return _named_apart(comps)  # rare: a pair, found at its second type
        named.append(prefix)
        for name in field_names(cls):
            out[f"{prefix}.{name}"] = _plain(getattr(comp, name))
    return out


def _named_apart(comps: dict[type, Any]) -> dict[str, Any]:
    # `flatten` (format 4) of an entity with types sharing a `__qualname__`: those in full.
    host = [cls for cls in comps if not is_builtin(cls)]
    short = [cls.__qualname__ for cls in host]
    out: dict[str, Any] = {}
    for cls, qualname in zip(host, short, strict=True):
        prefix = type_name(cls) if short.count(qualname) > 1 else qualname
        comp = comps[cls]
        for name in field_names(cls):
            out[f"{prefix}.{name}"] = _plain(getattr(comp, name))
    return out


def entity_table() -> dict[int, dict[type, Any]]:
    # The current esper world's entity table: entity -> {type: component}. Each entity's
    # dict is mutated in place by add/remove_component, so a reference to it stays live
    # for the entity's life (and can be read off the tick thread under the world's lock).
    return esper._entities


def mint_entity() -> int:
    """A new tick-thread entity id from esper's counter, without creating the entity
    (``create_entity`` would mark esper's whole query cache dirty)."""
    return next(esper._entity_count)


def create_entity_as(entity: int, components: Iterable[Any]) -> dict[type, Any]:
    """Create ``entity`` (an id minted earlier) with ``components``; returns its dict."""
    store = entity_table()
    if entity in store:
        raise ConfigError(f"entity {entity} already exists")
    store[entity] = {}
    for comp in components:
        esper.add_component(entity, comp)
    return store[entity]


_SCALARS = frozenset({int, float, str, bool, bytes, type(None)})
_copiers: dict[type, Callable[[Any], Any]] = {}


def copy_component(comp: Any) -> Any:
    """A copy of a host component: its fields copied, deeply only where they are not
    scalars. ``copy.deepcopy`` of a slots dataclass costs ~5 µs, a field loop ~2 µs; a
    copier compiled per type (attribute stores, no loop) about as much as the constructor,
    without running ``__init__``/``__post_init__``."""
    cls = comp.__class__
    copier = _copiers.get(cls)
    if copier is None:
        copier = _copiers[cls] = _compile_copier(cls)
    return copier(comp)


def _compile_copier(cls: type) -> Callable[[Any], Any]:
    frozen = bool(getattr(cls, "__dataclass_params__", None) and cls.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    lines = ["def copy(c):", "    o = new(cls)"]
    for index, name in enumerate(field_names(cls)):
        if not name.isidentifier():  # pragma: no cover - dataclass fields always are
            raise ConfigError(f"field {name!r} of {cls.__name__} is not an identifier")
        value = f"v{index}"
        lines.append(f"    {value} = c.{name}")
        lines.append(f"    if {value}.__class__ not in scalars: {value} = deepcopy({value})")
        lines.append(f"    setattr(o, {name!r}, {value})" if frozen else f"    o.{name} = {value}")
    lines.append("    return o")
    namespace: dict[str, Any] = {
        "new": object.__new__,
        "cls": cls,
        "scalars": _SCALARS,
        "deepcopy": copy.deepcopy,
        "setattr": object.__setattr__,
    }
    exec("\n".join(lines), namespace)
    return namespace["copy"]  # type: ignore[no-any-return]
