"""The base of the runtime's enums: members that hash in C, by identity."""

from __future__ import annotations

import enum

__all__ = ["IdentityEnum"]


class IdentityEnum(enum.Enum):
    """An ``enum.Enum`` whose members hash by identity.

    ``enum.Enum.__hash__`` is ``hash(self._name_)`` written in Python: a Python call
    (~150 ns on 3.11) each time a member keys a dict or a set. ``World.counts()`` paid it
    twice an agent (100k agents: ~55 ms holding the world's lock, every refresh of the
    live view and every metrics scrape; ~18 ms without it). A member is a singleton that
    compares by identity (``Enum`` defines no ``__eq__``; pickling and copying hand back
    the same member), so its identity is a hash consistent with its equality. No order
    the runtime produces iterates a set of members.
    """

    __hash__ = object.__hash__
