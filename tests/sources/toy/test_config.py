"""Config: every bad combination is a ConfigError, and resolved() fills in the sizes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from attn_cli.sources.toy.config import DEFAULT_D_MODEL, DEFAULT_SEED, DEFAULT_TOKENIZER, Config, Init, Positional
from attn_cli.runtime.errors import ConfigError, ExitStatus

BAD = [
    # (options, d_model to resolve with or None, words in the message)
    ({"heads": 3, "d_model": 16}, None, "--heads 3 does not divide d_model 16"),
    ({"heads": 5}, 16, "--heads 5 does not divide d_model 16"),
    ({"heads": 3, "d_model": 16, "d_k": 4}, None, "does not divide"),  # d_v still defaults to d_model / heads
    ({"heads": 0}, None, "--heads must be a whole number from 1"),
    ({"heads": -2}, None, "--heads must be"),
    ({"d_model": 0}, None, "--d-model must be a whole number from 1"),
    ({"d_model": -16}, None, "--d-model must be"),
    ({"d_k": 0}, None, "--d-k must be"),
    ({"d_v": -1}, None, "--d-v must be"),
    ({"d_model": 1 << 21}, None, "--d-model must be a whole number from 1 to 1048576"),
    ({"max_tokens": 0}, None, "--max-tokens must be"),
    ({"seed": -1}, None, "--seed must be a whole number from 0"),
    ({"seed": 2**63}, None, "--seed must be"),
    ({"heads": True}, None, "--heads must be"),
    ({"heads": 2.0}, None, "--heads must be"),
    ({"temperature": 0.0}, None, "--temperature must be a positive number"),
    ({"temperature": -1.0}, None, "--temperature must be a positive number"),
    ({"temperature": math.inf}, None, "--temperature must be"),
    ({"temperature": math.nan}, None, "--temperature must be"),
    ({"dropout": 1.0}, None, "--dropout must be in [0, 1)"),
    ({"dropout": -0.1}, None, "--dropout must be in [0, 1)"),
    ({"dropout": math.nan}, None, "--dropout must be"),
    ({"projections": False, "d_k": 4, "d_model": 16}, None, "--d-k 4 conflicts with --no-projections"),
    ({"projections": False, "d_v": 3, "heads": 2}, 16, "--d-v 3 conflicts with --no-projections"),
    ({"projections": False, "d_k": 8, "d_v": 8, "heads": 3}, 16, "--heads 3 does not divide d_model 16"),
    ({"projections": False, "qkv_bias": True, "d_model": 8}, None, "--qkv-bias needs projections"),
    ({"d_model": 8}, 12, "--d-model 8 does not match the embeddings' width 12"),
    ({"tokenizer": ""}, None, "--tokenizer"),
    ({"tokenizer": "  "}, None, "--tokenizer"),
]


@pytest.mark.parametrize(("options", "width", "message"), BAD)
def test_bad_config(options: dict, width: int | None, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config = Config(**options)
        if width is not None:
            config.resolved(width)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_status == ExitStatus.USAGE


def test_defaults() -> None:
    config = Config()
    assert config.tokenizer is None and config.tokenizer_name == DEFAULT_TOKENIZER == "gpt2"
    assert config.seed == DEFAULT_SEED == 123
    assert (config.heads, config.causal, config.scale, config.temperature, config.dropout) == (1, False, True, 1.0, 0.0)
    assert config.init is Init.linear and config.positional is Positional.none and config.projections
    assert not config.qkv_bias and not config.out_proj and config.embeddings is None
    resolved = config.resolved(DEFAULT_D_MODEL)
    assert (resolved.d_model, resolved.d_k, resolved.d_v) == (16, 16, 16)


RESOLVE = [
    # (options, width, (d_model, d_k, d_v))
    ({}, 16, (16, 16, 16)),
    ({"heads": 4}, 16, (16, 4, 4)),
    ({"d_k": 24, "d_v": 28}, 16, (16, 24, 28)),
    ({"heads": 3, "d_k": 5, "d_v": 7}, 16, (16, 5, 7)),  # heads need not divide d_model with both sizes given
    ({"heads": 2, "d_k": 3}, 16, (16, 3, 8)),
    ({"heads": 2, "projections": False}, 6, (6, 3, 3)),
    ({"heads": 2, "projections": False, "d_k": 3, "d_v": 3}, 6, (6, 3, 3)),
    ({"d_model": 12, "heads": 6}, 12, (12, 2, 2)),
]


@pytest.mark.parametrize(("options", "width", "sizes"), RESOLVE)
def test_resolved_sizes(options: dict, width: int, sizes: tuple[int, int, int]) -> None:
    resolved = Config(**options).resolved(width)
    assert (resolved.d_model, resolved.d_k, resolved.d_v) == sizes
    assert resolved.resolved(width) == resolved  # idempotent


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().heads = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "factor"),
    [
        ({"d_k": 4}, 0.5),
        ({"d_k": 16, "temperature": 2.0}, 0.125),
        ({"d_k": 9, "scale": False}, 1.0),
        ({"d_k": 9, "scale": False, "temperature": 0.5}, 2.0),
    ],
)
def test_scale_factor(options: dict, factor: float) -> None:
    config = Config(**options).resolved(16)
    assert config.scale_factor == pytest.approx(factor)
    assert config.as_dict()["scale_factor"] == pytest.approx(factor)


def test_as_dict_records_every_option() -> None:
    config = Config(seed=7, heads=2, causal=True, scale=False, temperature=0.5, dropout=0.1, qkv_bias=True,
                    out_proj=True, init=Init.normal, positional=Positional.sinusoidal).resolved(8)  # fmt: skip
    assert config.as_dict() == {
        "seed": 7, "d_model": 8, "heads": 2, "d_k": 4, "d_v": 4, "causal": True, "scale": False,
        "scale_factor": 2.0, "temperature": 0.5, "init": "normal", "projections": True, "qkv_bias": True,
        "out_proj": True, "dropout": 0.1, "positional": "sinusoidal", "embeddings": None,
    }  # fmt: skip


def test_every_config_field_is_an_option_of_the_command_line_and_the_api() -> None:
    """Config's fields are listed once: the command line's parameters and the API's keywords
    are derived from them, and each must exist (a field with no option would break build_config)."""
    import dataclasses

    from attn_cli.api import TOY_OPTIONS
    from attn_cli.cli.params import CONFIG_PARAMS, INPUT_PARAMS, TOY_ONLY, TRAINED_PARAMS
    from attn_cli.sources.toy.config import NEGATED, SHARED_FIELDS, config_fields

    declared = {p.name for p in CONFIG_PARAMS + INPUT_PARAMS + TRAINED_PARAMS}
    fields = config_fields()
    assert fields == tuple(f.name for f in dataclasses.fields(Config))
    assert {NEGATED.get(f, f) for f in fields} <= declared
    assert set(TOY_ONLY) | set(SHARED_FIELDS) == {NEGATED.get(f, f) for f in fields}
    assert set(TOY_OPTIONS.values()) == set(fields)
    # the control: a field the command line does not declare is seen
    assert "lookahead" not in declared and {NEGATED.get(f, f) for f in (*fields, "lookahead")} - declared == {"lookahead"}
