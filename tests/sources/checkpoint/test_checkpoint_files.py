"""Finding and reading a checkpoint's files: the Hugging Face cache, shards, pickles
refused unopened, damaged files, unsupported models, reading only what is needed,
and the memory estimate."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO

import checkpoints
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.files import WeightReader
from attn_cli.runtime.errors import ExitStatus, ModelUnavailable, UsageError

TEXT = "The cat sat on the mat."
REPO = "tiny-org/tiny-gpt2"
CACHE_FOLDER = "models--tiny-org--tiny-gpt2"
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40




@pytest.fixture
def copy(tmp_path: Path):
    def copy(folder: Path, name: str = "model") -> Path:
        return Path(shutil.copytree(folder, tmp_path / name))

    return copy


def trace_weights(folder: Path | str, layers=(0, 1, 2), **kwargs) -> list[torch.Tensor]:
    ckpt = open_checkpoint(str(folder), **kwargs)
    return [layer.weights for layer in ckpt.trace(ckpt.tokenizer.encode(TEXT), list(layers))]


# -- the Hugging Face cache --------------------------------------------------------------


@pytest.fixture
def hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No cache variables, HOME in tmp_path, and the working folder elsewhere in it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def put_in_cache(hub: Path, source: Path, commit: str, refs: dict[str, str] | None = None) -> Path:
    """A cache entry as huggingface_hub lays it out: refs/<name> holds a commit hash,
    snapshots/<hash>/ the files."""
    repo = hub / CACHE_FOLDER
    snapshot = repo / "snapshots" / commit
    shutil.copytree(source, snapshot)
    for ref, target in (refs or {}).items():
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(target)
    return snapshot


def test_cache_lookup_reads_refs_main(hf_env: Path, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = put_in_cache(hf_env / "hf-home" / "hub", gpt2_folder, COMMIT_A, {"main": COMMIT_A})
    monkeypatch.setenv("HF_HOME", str(hf_env / "hf-home"))
    ckpt = open_checkpoint(REPO)
    assert (ckpt.info.source, ckpt.info.revision, ckpt.info.path) == (REPO, COMMIT_A, str(snapshot))
    assert ckpt.tokenizer.encode(TEXT).tokenizer == f"{REPO} tokenizer.json"
    assert all(torch.equal(a, b) for a, b in zip(trace_weights(REPO), trace_weights(gpt2_folder)))


# Each variable set, in huggingface_hub's order; the model sits in the last two
# places, and the first place that has it wins.
ORDER = ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"]
HUB = {"HF_HUB_CACHE": "", "HUGGINGFACE_HUB_CACHE": "", "HF_HOME": "hub", "XDG_CACHE_HOME": "huggingface/hub", "HOME": ".cache/huggingface/hub"}


@pytest.mark.parametrize("first", range(len(ORDER) - 1))
def test_cache_places_are_searched_in_huggingface_hubs_order(
    first: int, hf_env: Path, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ORDER:
        monkeypatch.setenv(var, str(hf_env / var))
    winner, runner_up = ORDER[first], ORDER[first + 1]
    put_in_cache(hf_env / winner / HUB[winner], gpt2_folder, COMMIT_A, {"main": COMMIT_A})
    put_in_cache(hf_env / runner_up / HUB[runner_up], gpt2_folder, COMMIT_B, {"main": COMMIT_B})
    assert open_checkpoint(REPO).info.revision == COMMIT_A


def test_revision_picks_a_ref_or_a_snapshot_by_commit(hf_env: Path, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = hf_env / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    put_in_cache(hub, gpt2_folder, COMMIT_A, {"main": COMMIT_A})
    put_in_cache(hub, gpt2_folder, COMMIT_B, {"v2": COMMIT_B})
    commit_c = "c" * 40
    put_in_cache(hub, gpt2_folder, commit_c)
    assert open_checkpoint(REPO).info.revision == COMMIT_A
    assert open_checkpoint(REPO, revision="v2").info.revision == COMMIT_B
    assert open_checkpoint(REPO, revision=commit_c).info.revision == commit_c
    with pytest.raises(ModelUnavailable, match=r"at revision v3 .*no refs/v3"):
        open_checkpoint(REPO, revision="v3")


def test_a_local_folder_of_that_name_wins(hf_env: Path, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_env / "hub"))
    put_in_cache(hf_env / "hub", gpt2_folder, COMMIT_A, {"main": COMMIT_A})
    shutil.copytree(gpt2_folder, Path(REPO))  # ./tiny-org/tiny-gpt2 under the working folder
    ckpt = open_checkpoint(REPO)
    assert (ckpt.info.revision, ckpt.info.path) == (None, REPO)
    with pytest.raises(UsageError, match="drop --revision"):
        open_checkpoint(REPO, revision="main")


def test_nothing_found_is_one_error_naming_every_place(hf_env: Path, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ORDER:
        monkeypatch.setenv(var, str(hf_env / var))
    # a partial download: the snapshot folder lacks config.json
    broken = put_in_cache(hf_env / "HF_HOME" / "hub", gpt2_folder, COMMIT_A, {"main": COMMIT_A})
    (broken / "config.json").unlink()
    with pytest.raises(ModelUnavailable) as caught:
        open_checkpoint(REPO)
    message = str(caught.value)
    assert caught.value.exit_status == ExitStatus.TOKENIZER_UNAVAILABLE == 3
    assert "\n" not in message
    places = [f"the folder {REPO}"] + [f"{hf_env / var / HUB[var]}".rstrip("/") + f"/{CACHE_FOLDER}" for var in ORDER]
    positions = [message.find(place) for place in places]
    assert -1 not in positions and positions == sorted(positions), message
    assert f"snapshots/{COMMIT_A} has no config.json" in message
    assert f"huggingface-cli download {REPO}" in message and "pass the model's folder" in message


@pytest.mark.parametrize("spec", ["./no/such/folder", "/no/such/folder", "not a repo id"])
def test_a_path_that_is_not_there_is_named(spec: str, hf_env: Path) -> None:
    with pytest.raises(ModelUnavailable, match="no folder"):
        open_checkpoint(spec)


# -- which weights, and only those -----------------------------------------------------


def test_sharded_weights_with_an_index_match_the_single_file(gpt2_folder: Path, tmp_path: Path) -> None:
    sharded = checkpoints.shard(gpt2_folder, tmp_path / "sharded", [["h.0."], ["h.1."]])
    assert len(list(sharded.glob("*.safetensors"))) == 3
    assert all(torch.equal(a, b) for a, b in zip(trace_weights(sharded), trace_weights(gpt2_folder)))


def test_layers_after_the_last_requested_are_never_read(gpt2_folder: Path, tmp_path: Path) -> None:
    sharded = checkpoints.shard(gpt2_folder, tmp_path / "sharded", [["wte", "wpe", "h.0.", "h.1."]])
    later = sharded / "model-00002-of-00002.safetensors"  # layer 2 and ln_f
    later.unlink()
    ckpt = open_checkpoint(str(sharded))
    tokens = ckpt.tokenizer.encode(TEXT)
    assert all(torch.equal(a, b) for a, b in zip(trace_weights(sharded, [0, 1]), trace_weights(gpt2_folder, [0, 1])))
    assert ckpt.estimate_bytes(len(tokens), [1])["weights"] > 0
    with pytest.raises(ModelUnavailable, match=f"{later}.* is missing"):
        ckpt.trace(tokens, [2])


def test_a_trace_reads_embedding_rows_and_the_layers_it_runs_only(gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole, rows = [], []
    read, read_rows, read_at = WeightReader.read, WeightReader.read_rows, WeightReader.read_at
    monkeypatch.setattr(WeightReader, "read", lambda self, name: whole.append(name) or read(self, name))
    monkeypatch.setattr(WeightReader, "read_rows", lambda self, name, a, b: rows.append(name) or read_rows(self, name, a, b))
    monkeypatch.setattr(WeightReader, "read_at", lambda self, name, at: rows.append(name) or read_at(self, name, at))
    ckpt = open_checkpoint(str(gpt2_folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    assert whole == rows == []  # opening reads headers only
    ckpt.trace(tokens, [1])
    assert set(rows) == {"wte.weight", "wpe.weight"}
    assert all(name.startswith(("h.0.", "h.1.attn", "h.1.ln_1")) for name in whole), whole
    assert "h.0.mlp.c_fc.weight" in whole and len(whole) == 12 + 6


def test_a_prefixed_save_is_read_like_a_bare_one(bert_folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    prefixed = Path(shutil.copytree(bert_folder, tmp_path / "bert-for-masked-lm"))
    tensors = load_file(str(prefixed / "model.safetensors"))
    save_file({f"bert.{name}": t for name, t in tensors.items()}, str(prefixed / "model.safetensors"))
    assert all(torch.equal(a, b) for a, b in zip(trace_weights(prefixed), trace_weights(bert_folder)))


# -- refused: pickles, damaged files, other architectures --------------------------------


class RunsCode:
    """Unpickling this creates the file named: proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.pt", "model.ckpt"])
def test_pickled_weights_are_refused_unopened(
    weights: str, gpt2_folder: Path, copy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = copy(gpt2_folder)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    (folder / weights).write_bytes(pickle.dumps(RunsCode(marker)))
    pickle.loads((folder / weights).read_bytes())  # the file is live: loading it runs code
    assert marker.exists()
    marker.unlink()
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    with pytest.raises(ModelUnavailable) as caught:
        open_checkpoint(str(folder))
    message = str(caught.value)
    assert weights in message and "can run code" in message and "save_pretrained" in message
    assert "model.safetensors" in message
    assert not marker.exists()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: b"\xff" * 8 + data[8:], "its header claims"),
        (lambda data: data[:8] + b"{not json" + data[17:], "not JSON"),
        (lambda data: data[: len(data) // 2], "past the end of the file"),
        (lambda data: data[:5], "shorter than its 8-byte header length"),
    ],
)
def test_a_damaged_safetensors_file_is_named(damage, why: str, gpt2_folder: Path, copy) -> None:
    folder = copy(gpt2_folder)
    path = folder / "model.safetensors"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ModelUnavailable, match=f"{path} is not a readable safetensors file .*{why}"):
        open_checkpoint(str(folder))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "falcon", "architectures": ["FalconForCausalLM"]}, r"model_type 'falcon' \(FalconForCausalLM\).*gpt2, bert, roberta.*llama, mistral, qwen2, qwen3.*olmo2"),
        ({"model_type": None}, r"model_type None .*gpt2, bert"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
        ({"hidden_act": "xielu"}, "hidden_act 'xielu'"),
        ({"num_attention_heads": 5}, "heads must divide d_model"),
    ],
)
def test_unsupported_models_are_refused_by_name(config: dict, expected: str, bert_folder: Path, copy) -> None:
    folder = copy(bert_folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    with pytest.raises(ModelUnavailable, match=expected):
        open_checkpoint(str(folder))


@pytest.mark.parametrize(
    ("remove", "expected"),
    [
        (["config.json"], "has no config.json"),
        (["tokenizer.json", "vocab.txt"], r"has no tokenizer.json \(or vocab.txt\)"),
        (["model.safetensors"], r"has no weights \(model.safetensors"),
    ],
)
def test_a_missing_file_is_named(remove: list[str], expected: str, bert_folder: Path, copy) -> None:
    folder = copy(bert_folder)
    for name in remove:
        (folder / name).unlink()
    with pytest.raises(ModelUnavailable, match=expected):
        open_checkpoint(str(folder))


def test_weights_of_another_architecture_are_refused(gpt2_folder: Path, bert_folder: Path, copy) -> None:
    folder = copy(bert_folder)
    shutil.copy(gpt2_folder / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(ModelUnavailable, match="not a bert model"):
        open_checkpoint(str(folder))


# -- the memory estimate ---------------------------------------------------------------


def test_estimate_grows_with_tokens_squared_and_kept_layers(gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = open_checkpoint(str(gpt2_folder))
    monkeypatch.setattr(WeightReader, "read", lambda *a: pytest.fail("the estimate read a tensor"))
    monkeypatch.setattr(WeightReader, "read_rows", lambda *a: pytest.fail("the estimate read a tensor"))
    monkeypatch.setattr(WeightReader, "read_at", lambda *a: pytest.fail("the estimate read a tensor"))
    small, double = ckpt.estimate_bytes(10, [0]), ckpt.estimate_bytes(20, [0])
    assert double["tables"] == 4 * small["tables"] == 4 * (4 * 10 * 10 * 4 * 2)  # H x T^2 x float32 x 2
    assert ckpt.estimate_bytes(10, [0, 1, 2])["tables"] == 3 * small["tables"]
    assert ckpt.estimate_bytes(10, [0, 2])["activations"] > small["activations"]


def test_estimated_weights_count_layers_up_to_the_last_requested(gpt2_folder: Path) -> None:
    from safetensors.torch import load_file

    stored = load_file(str(gpt2_folder / "model.safetensors"))

    def layer_bytes(layers: range) -> int:
        return sum(t.numel() * 4 for name, t in stored.items() if any(f".h.{i}." in name for i in layers))

    ckpt = open_checkpoint(str(gpt2_folder))
    embedding_rows = 2 * 10 * 32 * 4  # wte and wpe: at most T rows of D float32 each
    assert ckpt.estimate_bytes(10, [0])["weights"] == layer_bytes(range(1)) + embedding_rows
    assert ckpt.estimate_bytes(10, [2])["weights"] == ckpt.estimate_bytes(10, [0, 2])["weights"]
    assert ckpt.estimate_bytes(10, [2])["weights"] == layer_bytes(range(3)) + embedding_rows


def test_layer_choices_out_of_range_are_usage_errors(gpt2_folder: Path) -> None:
    ckpt = open_checkpoint(str(gpt2_folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    with pytest.raises(UsageError, match="layers 0 to 2"):
        ckpt.trace(tokens, [3])
    with pytest.raises(UsageError, match="no layers chosen"):
        ckpt.estimate_bytes(5, [])


# -- what gets imported --------------------------------------------------------------


def test_the_engine_never_imports_transformers(gpt2_folder: Path) -> None:
    script = f"""
import sys
import attn_cli.sources.checkpoint
assert "torch" not in sys.modules, "importing the package imported torch"
from attn_cli.sources.checkpoint import open_checkpoint
ckpt = open_checkpoint({str(gpt2_folder)!r})
ckpt.trace(ckpt.tokenizer.encode("hi there"), [0, 2])
assert "transformers" not in sys.modules, "the engine imported transformers"
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
