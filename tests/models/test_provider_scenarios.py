"""Provider models in scenarios: keys checked by name, built, run, and reported in tokens."""

from __future__ import annotations

import json
import textwrap

import pytest

from runtime import AnthropicMessages, OpenAIChat
from runtime.errors import ScenarioError
from runtime.scenario import build_world, parse_scenario

from ..cli.test_cli import tickwork
from .stub_server import openai_text

AGENT = '[[agents]]\nsteps = [{ think = "hi" }]\n'


def problems(body: str) -> list[str]:
    try:
        parse_scenario(textwrap.dedent(body) + AGENT, "s.toml")
    except ScenarioError as exc:
        return exc.problems
    return []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            '[models.default]\nprovider = "gpt"\nmodel = "m"\n',
            "s.toml:2: models.default.provider: must be one of 'scripted', 'openai', 'anthropic',"
            " got 'gpt'",
            id="unknown-provider",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\n',
            "s.toml:1: models.default: provider 'openai' needs `model`, the provider's model name",
            id="no-model",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\nbase_url = "localhost:8080"\n',
            "s.toml:4: models.default.base_url: must be an http:// or https:// URL,"
            " got 'localhost:8080'",
            id="bad-url",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\napi_key_env = "sk-abc"\n',
            "s.toml:4: models.default.api_key_env: must be the name of an environment variable,"
            " got 'sk-abc'",
            id="a-key-where-its-variable-goes",
        ),
        pytest.param(
            '[models.default]\nprovider = "anthropic"\nmodel = "m"\ntemperature = 2.5\n',
            "s.toml:4: models.default.temperature: must be a number from 0 to 2, got 2.5",
            id="temperature",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\nmax_tokens = 0\n',
            "s.toml:4: models.default.max_tokens: must be an integer >= 1, got 0",
            id="max-tokens",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\nrequests_per_minute = -1\n',
            "s.toml:4: models.default.requests_per_minute: must be a number > 0, got -1",
            id="rpm",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\ntokens_per_minute = nan\n',
            "s.toml:4: models.default.tokens_per_minute: must be a number > 0, got nan",
            id="tpm",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\nreplies = ["x"]\n',
            "s.toml:4: models.default.replies: only for scripted models, not provider 'openai'",
            id="replies-on-a-provider",
        ),
        pytest.param(
            '[models.default]\nreplies = ["x"]\nbase_url = "http://x"\n',
            "s.toml:3: models.default.base_url: only for provider = 'openai' or 'anthropic'"
            " (this model is scripted)",
            id="provider-key-on-scripted",
        ),
        pytest.param(
            '[models.default]\nprovider = "openai"\nmodel = "m"\napi_key = "sk-1"\n',
            "s.toml:4: models.default.api_key: unknown key 'api_key' (did you mean 'api_key_env'?)",
            id="no-key-in-the-file",
        ),
    ],
)
def test_each_bad_provider_key_is_named_with_its_value(body, expected):
    assert problems(body) == [expected]


def test_a_provider_table_builds_its_model_with_a_shared_rate_limit():
    scenario = parse_scenario(
        textwrap.dedent("""\
        [models.default]
        provider = "openai"
        model = "llama"
        base_url = "http://127.0.0.1:9/v1"
        api_key_env = "LOCAL_KEY"
        temperature = 0.2
        max_tokens = 64
        requests_per_minute = 120
        tokens_per_minute = 10000
        [models.claude]
        provider = "anthropic"
        model = "claude-x"
        """)
        + AGENT,
        "s.toml",
    )
    world = build_world(scenario)
    try:
        model = world.models["default"]
        assert isinstance(model, OpenAIChat)
        assert (model.model, model.base_url, model.api_key_env) == (
            "llama",
            "http://127.0.0.1:9/v1",
            "LOCAL_KEY",
        )
        assert (model.temperature, model.max_tokens) == (0.2, 64)
        assert model.rate_limit is not None
        assert model.rate_limit.requests_per_minute == 120
        assert model.rate_limit.tokens_per_minute == 10000
        claude = world.models["claude"]
        assert isinstance(claude, AnthropicMessages) and claude.api_key_env == "ANTHROPIC_API_KEY"
    finally:
        world.close()


def test_validate_exits_2_naming_the_bad_provider_key(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        '[models.default]\nprovider = "openai"\nmodel = "m"\nmax_tokens = "many"\n' + AGENT
    )
    done = tickwork("validate", str(path))
    assert done.returncode == 2, done.stderr
    assert "models.default.max_tokens: must be an integer >= 1, got 'many'" in done.stderr
    assert "Traceback" not in done.stderr


def test_run_reports_tokens_in_and_out_per_model(openai_server, tmp_path):
    openai_server.script(*[openai_text("ok", usage=(10, 4)) for _ in range(6)])
    path = tmp_path / "s.toml"
    path.write_text(
        f'[models.default]\nprovider = "openai"\nmodel = "m"\nbase_url = "{openai_server.url}"\n'
        '[[agents]]\ncount = 3\nsteps = [{ think = "hi {agent}" }, { finish = "{last}" }]\n'
    )
    done = tickwork("run", str(path), "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["agents"] == {"complete": 3}
    assert summary["tokens"] == {"default": {"in": 30, "out": 12}}
    table = tickwork("run", str(path), "--quiet")
    assert table.returncode == 0, table.stderr
    assert "default: 30 in · 12 out" in table.stdout
