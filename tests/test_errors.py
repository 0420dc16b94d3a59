"""Every error tickwork raises on purpose is a TickworkError."""

import inspect

import pytest

from runtime import (
    Cancelled,
    ReplayDivergence,
    ScenarioError,
    TickworkError,
    UnknownAgentError,
    errors,
)


def test_every_error_class_derives_from_tickwork_error():
    classes = [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if obj.__module__ == errors.__name__
    ]
    assert len(classes) == len(errors.__all__)
    for cls in classes:
        assert issubclass(cls, TickworkError), cls


def test_cancelled_is_a_signal_not_an_error():
    assert not issubclass(Cancelled, Exception)
    assert issubclass(Cancelled, BaseException)
    assert Cancelled("stop").reason == "stop"


def test_the_module_docstring_names_every_error():
    for name in errors.__all__:
        assert name in (errors.__doc__ or ""), name


def test_a_replay_divergence_names_the_tick_and_the_agents():
    err = ReplayDivergence(7, "aa", "bb", {"a2": ["status: 'complete' != 'error'"]})
    text = str(err)
    assert "tick 7" in text and "'a2'" in text and "status" in text


def test_a_scenario_error_lists_every_problem():
    err = ScenarioError(["a.toml: world.seed: expected an integer", "a.toml: agents[0]: missing"])
    assert err.problems[1].endswith("missing")
    assert "world.seed" in str(err)
    assert isinstance(err, ValueError)


def test_an_unknown_agent_error_is_a_key_error_with_a_plain_message():
    with pytest.raises(KeyError):
        raise UnknownAgentError("unknown agent 'x'")
    assert str(UnknownAgentError("unknown agent 'x'")) == "unknown agent 'x'"
