"""The checking half of scenario loading: typed fields, and problems that say where.

A ``Checker`` collects every problem of one scenario file instead of stopping at the first,
each as ``FILE:LINE: KEY.PATH: message`` (the line when it can be found). Tables are read
through ``Field`` tables: each known key has a check and a default, an unknown key is a
problem (with a did-you-mean), and a value that fails its check is a problem that leaves the
default in place so checking can go on.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import math
import re
import string
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any

from runtime.scenario.toml_lines import Path, format_path, key_lines, line_of

__all__ = [
    "MAX_AGENTS",
    "Check",
    "Checker",
    "Field",
    "boolean",
    "escape_controls",
    "integer",
    "number",
    "one_of",
    "show",
    "string_list",
    "text",
]

Check = Callable[[Any], str | None]
"""A value check: None when the value is good, else the problem (``must be ..., got ...``)."""

MAX_AGENTS = 1_000_000
"""The most agents one scenario may start (all ``[[agents]]`` entries together, and one
spawn step): checking builds every agent's id and message up front, so an unbounded
``count`` would exhaust memory before anything ran."""

_FLOAT_MAX = int(sys.float_info.max)
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def show(value: Any) -> str:
    """A value as the TOML file spells it, for messages (``true``, ``'thnk'``, ``-1``).

    Long values are cut short (an integer of 4,000 digits is shown by its size).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of {len(str(abs(value)))} digits"
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def escape_controls(text: str) -> str:
    """``text`` with control and other unprintable characters written as escapes.

    Scenario keys and values reach the terminal in messages; an ``ESC`` in a key must not
    recolour it, nor a newline forge a line of output.
    """
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def integer(minimum: int | None = None, maximum: int | None = None) -> Check:
    """Check for an integer (not a boolean), at least ``minimum`` and at most ``maximum``."""
    bound = "" if minimum is None else f" >= {minimum}"
    if maximum is not None:
        bound = f" {minimum}..{maximum:,}" if minimum is not None else f" <= {maximum:,}"

    def check(value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
            return None
        return f"must be an integer{bound}, got {show(value)}"

    return check


def number(minimum: float = 0.0, *, above: bool = False) -> Check:
    """Check for a finite number >= ``minimum`` (> when ``above``)."""
    bound = f"> {minimum:g}" if above else f">= {minimum:g}"

    def check(value: Any) -> str | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and isinstance(value, int) and abs(value) > _FLOAT_MAX:
            return f"must be a number {bound} within float range, got {show(value)}"
        if ok and math.isfinite(value) and (value > minimum if above else value >= minimum):
            return None
        return f"must be a number {bound}, got {show(value)}"

    return check


def boolean(value: Any) -> str | None:
    """Check for true or false."""
    return None if isinstance(value, bool) else f"must be true or false, got {show(value)}"


def text(value: Any) -> str | None:
    """Check for a string."""
    return None if isinstance(value, str) else f"must be a string, got {show(value)}"


def string_list(value: Any) -> str | None:
    """Check for a non-empty array of strings."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return None
    return f"must be a non-empty array of strings, got {show(value)}"


def one_of(*choices: str) -> Check:
    """Check for one of ``choices``."""
    names = ", ".join(repr(c) for c in choices)

    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {names}, got {show(value)}"

    return check


@dataclass(frozen=True, slots=True)
class Field:
    """A known key of a table: how to check its value, and the value when it is absent."""

    check: Check
    default: Any = None


class Checker:
    """Collects the problems of one scenario file, each naming the file, line and key."""

    def __init__(self, where: str, source: str, base_dir: FilePath | None = None) -> None:
        self.where = where
        self.base_dir = base_dir
        self._found: list[tuple[int, str]] = []
        self._lines = key_lines(source)

    @property
    def problems(self) -> list[str]:
        """Every problem so far, in the order of the lines they are about."""
        return [message for _, message in sorted(self._found, key=lambda item: item[0])]

    def problem(self, path: Path, message: str) -> None:
        """Record one problem about the key at ``path``."""
        line = line_of(self._lines, path) if path else None
        place = f"{self.where}:{line}" if line is not None else self.where
        key = format_path(path)
        text = f"{place}: {key}: {message}" if key else f"{place}: {message}"
        self._found.append((line or 0, escape_controls(text)))

    def check(self, path: Path, value: Any, check: Check) -> bool:
        """Run ``check`` on ``value``; record the problem if it fails. True when good."""
        problem = check(value)
        if problem is not None:
            self.problem(path, problem)
        return problem is None

    def table(self, path: Path, value: Any) -> dict[str, Any] | None:
        """``value`` if it is a table, else record a problem and return None."""
        if isinstance(value, dict):
            return value
        self.problem(path, f"must be a table, got {show(value)}")
        return None

    def unknown_keys(
        self,
        path: Path,
        table: Mapping[str, Any],
        known: Collection[str],
        what: str = "key",
        where: str = "",
    ) -> None:
        """Record a problem for each key of ``table`` not in ``known`` (with a did-you-mean)."""
        for key in table:
            if key not in known:
                hint = suggest(key, known)
                self.problem((*path, key), f"unknown {what} {key!r}{where}{hint}")

    def fields(
        self, path: Path, table: Mapping[str, Any], fields: Mapping[str, Field]
    ) -> dict[str, Any]:
        """Every field of ``fields`` read from ``table``: its checked value or its default."""
        self.unknown_keys(path, table, fields)
        values = {}
        for key, spec in fields.items():
            value = table.get(key, spec.default)
            if key in table and not self.check((*path, key), value, spec.check):
                value = spec.default
            values[key] = value
        return values

    def template(self, path: Path, value: str, allowed: Collection[str] | None) -> bool:
        """Check that ``value`` is a ``str.format`` template of ``allowed`` names only, each
        a plain ``{name}``: no format spec (``{i:>99999999}`` filled memory at 10^6 agents,
        ``{i:{x}}`` raised at run time), no conversion, no index or attribute, no position.

        ``allowed`` None allows any name.
        """
        try:
            fields = [
                (name, spec, conversion)
                for _, name, spec, conversion in string.Formatter().parse(value)
                if name is not None
            ]
        except ValueError as exc:
            self.problem(path, f"bad template {value!r}: {exc}")
            return False
        ok = True
        names = []
        for name, spec, conversion in fields:
            if spec or conversion or not name.isidentifier():
                shown = escape_controls(
                    "{"
                    + name
                    + (f"!{conversion}" if conversion else "")
                    + (f":{spec}" if spec else "")
                    + "}"
                )
                self.problem(
                    path,
                    f"placeholder {shown} must be a plain {{name}}: no format spec,"
                    " conversion, index or position",
                )
                ok = False
                continue
            names.append(name)
        for name in names:
            if allowed is not None and name not in allowed:
                close = difflib.get_close_matches(name, list(allowed), n=1)
                known = ", ".join(f"{{{n}}}" for n in sorted(allowed)) or "none"
                hint = f"did you mean {{{close[0]}}}?" if close else f"known here: {known}"
                self.problem(path, f"unknown placeholder {{{name}}} ({hint})")
                ok = False
        return ok

    def target(self, path: Path, value: str, what: str) -> Callable[..., Any] | None:
        """Import ``module:function`` (from the scenario's directory too); record why not."""
        if not _TARGET.match(value):
            self.problem(path, f"must name a {what} as 'module:function', got {value!r}")
            return None
        module_name, _, attrs = value.partition(":")
        with _importable(self.base_dir):
            try:
                obj: Any = importlib.import_module(module_name)
            except (Exception, SystemExit) as exc:  # any import failure is the scenario's
                # problem: a module that calls sys.exit() at import ended `validate` with
                # exit 0 and nothing said
                self.problem(path, f"cannot import {value!r}: {type(exc).__name__}: {exc}")
                return None
        for attr in attrs.split("."):
            if not hasattr(obj, attr):
                self.problem(path, f"cannot import {value!r}: {module_name!r} has no {attr!r}")
                return None
            obj = getattr(obj, attr)
        if not callable(obj):
            self.problem(path, f"{value!r} is not a function, got {type(obj).__name__}")
            return None
        return obj  # type: ignore[no-any-return]


def suggest(word: str, known: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or nothing."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@contextlib.contextmanager
def _importable(base_dir: FilePath | None) -> Iterator[None]:
    """Let modules beside the scenario file be imported while the block runs."""
    entry = None if base_dir is None else str(base_dir)
    if entry is None or entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)
