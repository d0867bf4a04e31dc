"""Every family through the command line: `run` (JSON: model_type, the family, the
softmax input each family's softmax read) and `explain` for every family; `heatmap`,
`heads` and `html` for the ones with a mask or score step of their own; `models`
on a cache holding several families."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import checkpoints
import pytest
import test_checkpoint_decoders as decoders
import test_checkpoint_encoders as encoders
from invoking import invoke

FAMILIES = {
    # name: (the test module that builds it, the family JSON names)
    "qwen3": (decoders, "qwen3"), "gemma": (decoders, "gemma"), "gemma2": (decoders, "gemma2"),
    "gemma3": (decoders, "gemma3_text"), "phi3": (decoders, "phi3"), "neox": (decoders, "gpt_neox"),
    "olmo2": (decoders, "olmo2"), "roberta": (encoders, "roberta"), "xlm-roberta": (encoders, "roberta"),
    "distilbert": (encoders, "distilbert"), "mpnet": (encoders, "mpnet"), "modernbert": (encoders, "modernbert"),
}  # fmt: skip


@pytest.fixture(scope="session")
def folder(tmp_path_factory: pytest.TempPathFactory):
    made = {
        decoders: checkpoints.folder_maker(tmp_path_factory, "decoder", checkpoints.build_decoder, decoders.CHECKPOINTS),
        encoders: checkpoints.folder_maker(tmp_path_factory, "encoder", checkpoints.build_encoder, encoders.CHECKPOINTS),
    }
    return lambda name: made[FAMILIES[name][0]](name)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_run_and_explain_on_every_family(name: str, folder) -> None:
    model = str(folder(name))
    module, family = FAMILIES[name]
    text = module.CHECKPOINTS[name][1]
    data = json.loads(invoke("run", text, "--model", model, "--layer", "1", "--head", "0", "-F", "json").stdout)
    config = json.loads((Path(model) / "config.json").read_text())
    assert (data["model"]["family"], data["model"]["model_type"]) == (family, config["model_type"])
    head = data["layers"][0]["heads"][0]
    assert abs(sum(head["weights"][-1]) - 1) < 1e-5
    out = invoke("explain", text[:40], "--model", model, "--layer", "1", "--head", "0").stdout
    assert "Softmax" in out and "Heads and output" in out


def test_json_scaled_scores_are_what_the_softmax_read(folder) -> None:
    """Gemma 2's capped scores and MPNet's biased ones, not scores / divisor."""
    for name, text, divisor in (("gemma2", decoders.LONG, 32**0.5), ("mpnet", encoders.LONG, 8**0.5)):
        data = json.loads(invoke("run", text, "--model", str(folder(name)), "--layer", "0", "--head", "0", "-F", "json").stdout)
        head = data["layers"][0]["heads"][0]
        divided = [[s / divisor for s in row] for row in head["scores"]]
        shown = head["scaled_scores"]
        assert any(abs(a - b) > 1e-3 for r, d in zip(shown, divided) for a, b in zip(r, d) if a is not None), name
        if name == "gemma2":
            assert max(abs(v) for row in shown for v in row if v is not None) <= 5.0


def test_explain_says_what_the_family_does_to_the_scores(folder) -> None:
    out = invoke("explain", decoders.LONG[:80], "--model", str(folder("gemma2")), "--layer", "0", "--head", "0").stdout
    assert "soft-capping" in out and "sliding window" in out
    out = invoke("explain", "The cat sat on the mat", "--model", str(folder("mpnet")), "--layer", "0", "--head", "0").stdout
    assert "relative position bias" in out
    out = invoke("explain", encoders.LONG, "--model", str(folder("modernbert")), "--layer", "1", "--head", "0").stdout
    assert "local window" in out and "Wqkv" in out
    out = invoke("explain", "The cat sat on the mat", "--model", str(folder("qwen3")), "--layer", "0", "--head", "0").stdout
    assert "after q_norm" in out


@pytest.mark.parametrize("name", ["gemma2", "modernbert", "mpnet"])
def test_heatmap_heads_and_the_page(name: str, folder, tmp_path: Path) -> None:
    model = str(folder(name))
    invoke("heatmap", "The cat sat on the mat", "--model", model, "-o", str(tmp_path / "one.png"))
    invoke("heatmap", "The cat sat on the mat", "--model", model, "--layer", "all", "-o", str(tmp_path / "all.png"))
    assert (tmp_path / "one.png").stat().st_size > 1000 and (tmp_path / "all.png").stat().st_size > 1000
    heads = json.loads(invoke("heads", "The cat sat on the mat", "--model", model, "-F", "json").stdout)
    assert len(heads["heads"]) == 3 * heads["model"]["heads"]
    invoke("html", "The cat sat on the mat", "--model", model, "-o", str(tmp_path / "page.html"))
    assert (tmp_path / "page.html").stat().st_size > 1000


def test_models_lists_a_cache_of_several_families(folder, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    for name in ("gemma2", "phi3", "modernbert", "mpnet"):
        snapshot = cache / f"models--test--{name}" / "snapshots" / ("a" * 40)
        shutil.copytree(folder(name), snapshot)
        (cache / f"models--test--{name}" / "refs").mkdir()
        (cache / f"models--test--{name}" / "refs" / "main").write_text("a" * 40)
    result = invoke("models", "--format", "json", env={"HF_HUB_CACHE": str(cache)})
    listed = {m["name"]: m for m in json.loads(result.stdout)}
    assert {m["family"] for m in listed.values()} == {"gemma2", "phi3", "modernbert", "mpnet"}
    assert all(m["supported"] for m in listed.values())


def test_hidden_tokens_cut_the_position_bias_too(folder, tmp_path: Path) -> None:
    """MPNet's bias is per pair of tokens: --hide-tokens cuts it with the mask, so the
    softmax input shown is still the weights' (a bias left whole did not fit the cut scores)."""
    model = str(folder("mpnet"))
    for args in (["run", "--show", "scaled,weights"], ["run", "-F", "json"], ["heatmap", "--what", "scaled", "-o", str(tmp_path / "b.png")]):
        invoke(args[0], "The cat sat on the mat", "--model", model, "--hide-tokens", "special", *args[1:])
