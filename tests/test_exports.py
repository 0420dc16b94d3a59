"""The public face of each package is its __init__: explicit, sorted, importable."""

import importlib

import pytest


@pytest.mark.parametrize("package", ["runtime", "components", "systems"])
def test_all_is_sorted_and_every_name_resolves(package):
    module = importlib.import_module(package)
    names = list(getattr(module, "__all__", []))
    assert names == sorted(names), f"{package}.__all__ is not sorted"
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
