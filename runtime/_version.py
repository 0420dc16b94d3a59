"""The installed tickwork version."""

from __future__ import annotations

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__ = metadata.version("tickwork")
except metadata.PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"
