"""The models room: the `Model` protocol a ``Think`` runs, and the models tickwork ships."""

from runtime.models.base import Model, ModelReply, ModelRequest
from runtime.models.scripted import ScriptedModel

__all__ = ["Model", "ModelReply", "ModelRequest", "ScriptedModel"]
