"""Line numbers for the keys of a TOML document, so a scenario error can say where.

``tomllib`` parses without positions. ``key_lines(text)`` scans the (already valid) text once
more and maps every key path it meets to the line where it starts: tables, array-of-table
entries, keys, array elements and inline-table keys. A path is a tuple of keys and indexes,
``("agents", 2, "steps", 1, "think")``. The scan is best effort: on anything it does not
follow it stops and returns what it found, and ``line_of`` falls back to the nearest parent.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Mapping

__all__ = ["Path", "format_path", "key_lines", "line_of"]

Path = tuple[str | int, ...]

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def format_path(path: Path) -> str:
    """Write a key path the way a user reads it: ``agents[2].steps[1].think``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if part and all(c in _BARE for c in part) else f'"{part}"'
            out += f".{key}" if out else key
    return out


def line_of(lines: Mapping[Path, int], path: Path) -> int | None:
    """The line of ``path``, else of its nearest parent that has one, else None."""
    for end in range(len(path), 0, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None


def key_lines(text: str) -> dict[Path, int]:
    """Map each key path of the TOML ``text`` to its 1-based line (best effort)."""
    scanner = _Scanner(text)
    # On a part the scanner does not follow, keep what was found before it.
    with contextlib.suppress(IndexError, ValueError):
        scanner.document()
    return scanner.found


class _Scanner:
    """A small recursive-descent walk over valid TOML that records where keys start."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.found: dict[Path, int] = {}
        self._starts = [0] + [n + 1 for n, c in enumerate(text) if c == "\n"]
        # The index of the latest entry of each array of tables, by its resolved path.
        self._aot: dict[Path, int] = {}

    def line(self, at: int) -> int:
        return bisect.bisect_right(self._starts, at)

    def note(self, path: Path, at: int) -> None:
        self.found.setdefault(path, self.line(at))

    def document(self) -> None:
        table: Path = ()
        while True:
            self.skip(newlines=True)
            if self.i >= len(self.s):
                return
            if self.s[self.i] == "[":
                table = self.header()
            else:
                self.key_value(table)

    def header(self) -> Path:
        start = self.i
        many = self.s.startswith("[[", self.i)
        self.i += 2 if many else 1
        keys = self.key()
        self.i = self.s.index("]]" if many else "]", self.i) + (2 if many else 1)
        path: Path = ()
        for n, key in enumerate(keys):
            path = (*path, key)
            last = n == len(keys) - 1
            if last and many:
                self.note(path, start)  # the array itself: `[[agent]]`, a typo, has a line
                index = self._aot.get(path, -1) + 1
                self._aot[path] = index
                # A new entry: forget the entries of arrays nested in the previous one.
                for known in [p for p in self._aot if p[: len(path)] == path and p != path]:
                    del self._aot[known]
                path = (*path, index)
            elif path in self._aot:
                path = (*path, self._aot[path])
        self.note(path, start)
        return path

    def key_value(self, table: Path) -> None:
        start = self.i
        path = (*table, *self.key())
        self.note(path, start)
        self.skip()
        if self.s[self.i] != "=":
            raise ValueError("expected '='")
        self.i += 1
        self.value(path)

    def key(self) -> list[str]:
        keys = []
        while True:
            self.skip()
            c = self.s[self.i]
            if c in "\"'":
                keys.append(self.string())
            else:
                start = self.i
                while self.i < len(self.s) and self.s[self.i] in _BARE:
                    self.i += 1
                if self.i == start:
                    raise ValueError("expected a key")
                keys.append(self.s[start : self.i])
            self.skip()
            if self.i < len(self.s) and self.s[self.i] == ".":
                self.i += 1
                continue
            return keys

    def value(self, path: Path) -> None:
        self.skip()
        c = self.s[self.i]
        if c in "\"'":
            self.string()
        elif c == "[":
            self.i += 1
            index = 0
            while True:
                self.skip(newlines=True)
                if self.s[self.i] == "]":
                    self.i += 1
                    return
                self.note((*path, index), self.i)
                self.value((*path, index))
                self.skip(newlines=True)
                if self.s[self.i] == ",":
                    self.i += 1
                index += 1
        elif c == "{":
            self.i += 1
            while True:
                self.skip(newlines=True)
                if self.s[self.i] == "}":
                    self.i += 1
                    return
                self.key_value(path)
                self.skip(newlines=True)
                if self.s[self.i] == ",":
                    self.i += 1
        else:
            while self.i < len(self.s) and self.s[self.i] not in ",]}\n#":
                self.i += 1

    def string(self) -> str:
        quote = self.s[self.i]
        if self.s.startswith(quote * 3, self.i):
            end = self.i + 3
            while not self.s.startswith(quote * 3, end):
                if end >= len(self.s):
                    raise ValueError("unterminated multi-line string")
                # A basic string's escape (`\"""`) is no end: the lines after it were
                # counted as inside the string, and their keys got the wrong line or none.
                end += 2 if quote == '"' and self.s[end] == "\\" else 1
            while self.s.startswith(quote, end + 3):  # up to two quotes may close the body
                end += 1
            body = self.s[self.i + 3 : end]
            self.i = end + 3
            return body
        j = self.i + 1
        while self.s[j] != quote:
            j += 2 if quote == '"' and self.s[j] == "\\" else 1
        body = self.s[self.i + 1 : j]
        self.i = j + 1
        return body

    def skip(self, *, newlines: bool = False) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            else:
                return
