"""`attn-cli models`: cached checkpoints with their family, size and support, from a
fake Hugging Face cache; text and JSON; no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from invoking import commands, invoke, options

from attn_cli.sources.checkpoint.registry import MODEL_TYPES


def snapshot(cache: Path, repo: str, config: dict, files: dict[str, bytes | str]) -> Path:
    folder = cache / f"models--{repo.replace('/', '--')}"
    commit = "c" * 40
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    for name, data in files.items():
        (snap / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return snap


def safetensors_bytes(shapes: dict[str, tuple[int, ...]]) -> bytes:
    """A valid safetensors file of zeros (F32)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4
        for n in shape:
            size *= n
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + bytes(offset)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    snapshot(root, "tiny/gpt2", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
             {"model.safetensors": safetensors_bytes({"wte.weight": (10, 4), "h.0.ln_1.weight": (4,)})})  # fmt: skip
    index = {"metadata": {"total_size": 14_000_000_000}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    snapshot(root, "meta/llama-7b", {"model_type": "llama"}, {"model.safetensors.index.json": json.dumps(index)})
    snapshot(root, "google/t5", {"model_type": "t5"}, {"model.safetensors": safetensors_bytes({"shared.weight": (3, 2)})})
    snapshot(root, "state/mamba", {"model_type": "mamba"}, {"model.safetensors": safetensors_bytes({"embeddings.weight": (3, 2)})})
    snapshot(root, "old/bert", {"model_type": "bert"}, {"pytorch_model.bin": b"pickle"})
    return root


def test_models_lists_the_cache_as_json(cache: Path) -> None:
    result = invoke("models", "--format", "json")
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"tiny/gpt2", "meta/llama-7b", "google/t5", "state/mamba", "old/bert"}
    gpt2 = rows["tiny/gpt2"]
    assert (gpt2["family"], gpt2["parameters"], gpt2["bytes"], gpt2["supported"]) == ("gpt2", 44, 176, True)
    assert gpt2["architecture"] == "GPT2LMHeadModel" and gpt2["path"].endswith("c" * 40)
    llama = rows["meta/llama-7b"]
    assert (llama["family"], llama["parameters"], llama["bytes"], llama["supported"]) == ("llama", None, 14_000_000_000, False)
    assert llama["why"] == "1 of 1 shards missing"
    assert rows["google/t5"]["supported"] is True and rows["google/t5"]["family"] == "t5"  # an encoder-decoder: run --target
    assert rows["state/mamba"]["supported"] is False and "model_type 'mamba'" in rows["state/mamba"]["why"]
    assert rows["old/bert"]["why"].startswith("no safetensors weights")


def test_models_takes_dash_f_as_every_command_with_a_format_does(cache: Path) -> None:
    """-F is --format's short form here too (issue 34); the control: without -F json the output is
    the text listing, which is not JSON, so -F taken but ignored would fail."""
    assert invoke("models", "-F", "json").stdout == invoke("models", "--format", "json").stdout
    assert json.loads(invoke("models", "-F", "JSON").stdout)[0]["name"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(invoke("models").stdout)


def _formats_without_short(found: dict[tuple[str, ...], Any]) -> list[str]:
    """The commands whose --format has no -F."""
    return [" ".join(path) for path, command in found.items() if "--format" in options(command) and not any(
        "-F" in p.opts for p in command.params if "--format" in getattr(p, "opts", ())
    )]  # fmt: skip


def test_every_command_with_a_format_takes_dash_f() -> None:
    assert _formats_without_short(commands()) == []


def test_control_a_format_without_dash_f_is_found() -> None:
    found = commands()
    fmt = next(p for p in found[("models",)].params if "--format" in p.opts)
    fmt.opts.remove("-F")  # models as it was
    assert _formats_without_short(found) == ["models"]


def test_models_text_names_sizes_and_where_it_looked(cache: Path) -> None:
    result = invoke("models")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "type", "params", "size", "status"]
    gpt2 = next(line for line in lines if line.startswith("tiny/gpt2"))
    assert gpt2.split() == ["tiny/gpt2", "gpt2", "44", "176B", "ready"]
    llama = next(line for line in lines if line.startswith("meta/llama-7b"))
    assert "14.0GB" in llama and "shards missing" in llama
    assert f"$HF_HUB_CACHE = {cache}" in result.stdout
    assert "--model PATH" in result.stdout


def test_every_supported_model_type_has_a_family() -> None:
    from attn_cli.sources.checkpoint.families import Family, family_class

    for model_type, (family, _) in MODEL_TYPES.items():
        adapter = family_class(model_type)
        assert issubclass(adapter, Family) and adapter.family == family, model_type


def test_every_encoder_decoder_model_type_has_an_adapter() -> None:
    from attn_cli.sources.checkpoint.families import Family, seq2seq_class
    from attn_cli.sources.checkpoint.families.seq2seq import Seq2Seq
    from attn_cli.sources.checkpoint.registry import SEQ2SEQ_TYPES

    for model_type, (family, _) in SEQ2SEQ_TYPES.items():
        adapter = seq2seq_class(model_type)  # each stack a Family the one layer loop runs
        assert issubclass(adapter, Seq2Seq) and issubclass(adapter, Family) and adapter.family == family, model_type


def test_the_registry_is_what_the_family_modules_declare(tmp_path: Path) -> None:
    """registry.declared reads each module's literal without importing it: a new architecture is
    one module. The control: a module that declares nothing adds nothing."""
    from attn_cli.sources.checkpoint import registry

    (tmp_path / "b_one.py").write_text("import torch\nMODEL_TYPES = {'x': ('xfam', 'X'), 'y': ('xfam', 'X')}\n")
    (tmp_path / "a_two.py").write_text("MODEL_TYPES: dict = {'z': ('zfam', 'Z')}\nENCODER_DECODER_TYPES = {'p': ('pfam', 'P')}\n")
    (tmp_path / "c_none.py").write_text("OTHER = {'w': ('w', 'W')}\n")
    found = registry.declared("MODEL_TYPES", tmp_path)
    assert found == {"z": ("zfam", "a_two:Z"), "x": ("xfam", "b_one:X"), "y": ("xfam", "b_one:X")} and list(found) == ["z", "x", "y"]
    assert registry.declared("ENCODER_DECODER_TYPES", tmp_path) == {"p": ("pfam", "a_two:P")}
    assert list(registry.MODEL_TYPES)[:3] == ["gpt2", "bert", "roberta"] and list(registry.MODEL_TYPES)[-1] == "olmo2"  # LISTED's order
    assert {"gpt2", "llama", "qwen3", "gemma3_text", "olmo2", "xlm-roberta"} <= set(registry.MODEL_TYPES)
    assert set(registry.SEQ2SEQ_TYPES) == {"bart", "marian", "t5"}


def test_listing_does_not_import_torch(cache: Path) -> None:
    code = (
        "import sys\nfrom attn_cli.cli import app\n"
        "try:\n    app(['models'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")
