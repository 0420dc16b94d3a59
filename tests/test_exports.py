"""The public face of each package is its __init__: explicit, sorted, importable."""

import importlib

import pytest


def _isort_order(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions (each alphabetical).
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


ROOMS = [
    "runtime.cli",
    "runtime.cluster",
    "runtime.control",
    "runtime.journal",
    "runtime.lane",
    "runtime.models",
    "runtime.scenario",
    "runtime.tools",
    "runtime.world",
]


@pytest.mark.parametrize("package", ["runtime", "components", "systems", *ROOMS])
def test_all_is_sorted_and_every_name_resolves(package):
    module = importlib.import_module(package)
    names = list(getattr(module, "__all__", []))
    assert names == sorted(names, key=_isort_order), f"{package}.__all__ is not sorted"
    for name in names:
        assert hasattr(module, name), f"{package}.{name} is exported but missing"


def test_components_are_reexported_from_runtime_unchanged():
    import components
    import runtime

    for name in (
        "ToolCall",
        "ToolResult",
        "InteractionRequest",
        "InteractionResponse",
        "LaneStats",
    ):
        assert getattr(runtime, name) is getattr(components, name)


def test_the_readme_import_paths_still_resolve():
    import runtime
    from runtime.cluster import DaskBackend
    from runtime.control import ControlClient

    assert runtime.ControlClient is ControlClient
    assert runtime.DaskBackend is DaskBackend


def test_the_resource_names_are_exported_from_runtime_and_its_world_room():
    import runtime
    import runtime.world
    from runtime.world import resource

    for name in ("Acquire", "Release", "Resource", "ResourceStats", "Use"):
        assert name in runtime.__all__ and name in runtime.world.__all__
        assert getattr(runtime, name) is getattr(resource, name)
