"""`census --against M2`: each head's cosine of the flattened maps (Kovaleva et al. 2019) averaged
over texts and its rows' total variation averaged over rows, against both models' weights from
transformers' output_attentions; the heads that changed most, first. Controls: the total variation
without its half, and a model against itself."""

from __future__ import annotations

import json
from pathlib import Path

import checkpoints
import pytest
import torch
from invoking import invoke
from test_census_measures import corpus, eager


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, list[str]]:
    base = checkpoints.built(tmp_path_factory, "gpt2-census", checkpoints.build_gpt2, n_positions=512)
    tuned = checkpoints.built(tmp_path_factory, "gpt2-census-b", checkpoints.build_gpt2, n_positions=512, seed=5)
    texts = corpus(40, seed=9)
    path = tmp_path_factory.mktemp("against") / "corpus.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return base, tuned, path, texts


def reference(base: Path, tuned: Path, texts: list[str], half: float = 0.5) -> dict[tuple[int, int], tuple[float, float]]:
    """(cosine over texts, tv over rows) of each head, from transformers' weights of both models."""
    _, mine = eager(base, tuple(texts))
    _, theirs = eager(tuned, tuple(texts))
    cosines: dict[tuple[int, int], list[float]] = {}
    tvs: dict[tuple[int, int], list[float]] = {}
    for (ids, _, a), (other_ids, _, b) in zip(mine, theirs):
        assert ids == other_ids
        for layer, (x, y) in enumerate(zip(a, b)):
            for head in range(x.shape[0]):
                cosines.setdefault((layer, head), []).append(float(torch.dot(x[head].flatten(), y[head].flatten()) / (x[head].norm() * y[head].norm())))
                tvs.setdefault((layer, head), []).extend((half * (x[head] - y[head]).abs().sum(dim=-1)).tolist())
    return {key: (sum(cosines[key]) / len(cosines[key]), sum(tvs[key]) / len(tvs[key])) for key in cosines}


def test_cosine_and_total_variation_are_transformers_recomputed(pair: tuple[Path, Path, Path, list[str]]) -> None:
    base, tuned, path, texts = pair
    got = json.loads(invoke("census", str(path), "--model", str(base), "--against", str(tuned), "-F", "json").stdout)
    want = reference(base, tuned, texts)
    assert got["against"] == str(tuned)
    for head in got["heads"]:
        cosine, tv = want[(head["layer"], head["head"])]
        assert head["measures"]["cosine"] == pytest.approx(cosine, abs=1e-6) and head["measures"]["tv"] == pytest.approx(tv, abs=1e-6)
    order = sorted(want, key=lambda key: -want[key][1])
    assert [(c["layer"], c["head"]) for c in got["changed"]] == order
    from attn_cli.render.picture.census import census_figure

    grids = {ax.get_title(): ax.get_images()[0].get_array() for ax in census_figure(got, "base").get_axes() if ax.get_images()}
    tv = grids["total variation from --against"]
    assert tv[1, 2] == pytest.approx(want[(1, 2)][1]) and grids["cosine with --against"][0, 1] == pytest.approx(want[(0, 1)][0])
    wrong = reference(base, tuned, texts, half=1.0)  # control: the total variation without its half
    assert any(h["measures"]["tv"] != pytest.approx(wrong[(h["layer"], h["head"])][1], abs=1e-6) for h in got["heads"])


def test_a_model_against_itself_and_the_refusals(pair: tuple[Path, Path, Path, list[str]], minilm_path: Path) -> None:
    base, _, path, _ = pair
    itself = json.loads(invoke("census", str(path), "--model", str(base), "--against", str(base), "--limit", "5", "-F", "json").stdout)
    assert all(h["measures"]["cosine"] == pytest.approx(1.0) and h["measures"]["tv"] == 0.0 for h in itself["heads"])
    assert "has 6 layers of 12 heads" in invoke("census", str(path), "--model", str(base), "--against", str(minilm_path), code=2).stderr
    assert "give --model too" in invoke("census", str(path), "--against", str(base), code=2).stderr
