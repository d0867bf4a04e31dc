"""`attn-cli faithfulness` (``analysis.faithfulness``, ``sources.checkpoint.deletion``): every map's drops are
recomputed from transformers' probabilities on the same deletions (1e-5), the random baseline from the same
ten seeded rankings; a map that ranks tokens by their true single-deletion effect scores highest and a random
map within the random rankings' range (controls the test can fail); every format; the refusals."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import check_said_once, invoke

from attn_cli.analysis import faithfulness as f
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.deletion import Deletions

LABELS = {"num_labels": 2, "id2label": {0: "negative", 1: "positive"}, "label2id": {"negative": 0, "positive": 1}}
BUILDS: dict[str, tuple[Any, dict[str, Any]]] = {
    "bert": (checkpoints.build_encoder, dict(model_type="bert", cls="BertForSequenceClassification", **LABELS)),
    "bert-mlm": (checkpoints.build_encoder, dict(model_type="bert")),
}
TEXT = "the plot was not good at all"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, gpt2_folder: Path) -> Any:
    made = checkpoints.builds_maker(tmp_path_factory, "faithfulness", BUILDS)
    return lambda name: gpt2_folder if name == "gpt2" else made(name)


def their_probability(model: Any, ids: list[int], target: dict[str, Any], mask_id: int | None, removed: bool) -> float:
    """The target's probability: a classifier's label, the next token after the text, or the original mask's filler
    (where deleted tokens became masks too, the original's position; where they were removed, the first mask)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    if target["kind"] == "label":
        return float(torch.softmax(logits, dim=-1)[target["index"]])
    position = len(ids) - 1 if target["kind"] == "next" else ids.index(mask_id) if removed else target["position"]
    return float(torch.softmax(logits[position], dim=-1)[target["index"]])


@pytest.mark.parametrize("name, text", [("bert", TEXT), ("gpt2", TEXT), ("bert-mlm", TEXT.replace("plot", "[MASK]"))])
def test_drops_equal_transformers_probabilities(folders: Any, name: str, text: str) -> None:
    import attn_cli
    import transformers

    folder = folders(name)
    how = "remove" if name == "gpt2" else "mask"  # GPT-2's tokenizer has no mask, pad or unknown token
    data = json.loads(invoke("faithfulness", text, "--model", str(folder), "--delete-with", how, "-F", "json").stdout)
    target = data["target"]
    auto = {"bert": transformers.AutoModelForSequenceClassification, "gpt2": transformers.AutoModelForCausalLM}.get(name, transformers.AutoModelForMaskedLM)
    model = auto.from_pretrained(folder, attn_implementation="eager").eval()
    trace = attn_cli.trace(text, model=folder, what="rollout,norms,flow,value-zeroing-rollout,alti,attention-gradient")
    ids = list(trace.tokens.ids)
    mask_id = open_checkpoint(str(folder)).tokenizer.role_id("mask")
    replacement = mask_id if how == "mask" else None
    candidates = [i for i, s in enumerate(trace.tokens.special) if not s and i != target["position"]]
    sizes = [math.ceil(p * len(candidates) / 100) for p in (1, 5, 10, 20, 50)]
    base = their_probability(model, ids, target, mask_id, how == "remove")

    def drops(order: list[int]) -> list[float]:
        out = []
        for k in sizes:
            gone = set(order[:k])
            changed = [t for i, t in enumerate(ids) if i not in gone] if replacement is None else [replacement if i in gone else t for i, t in enumerate(ids)]
            out.append(base - their_probability(model, changed, target, mask_id, how == "remove"))
        return out

    assert [m["method"] for m in data["methods"]] == [c.method for c in f.ranked([f.Curve(m["method"], tuple(m["drops"])) for m in data["methods"]])]
    assert {m["method"] for m in data["methods"]} == set(f.METHODS)
    for entry in data["methods"]:
        row = f.map_row(trace, entry["method"], target["position"])
        want = drops(f.ranking(row, candidates))
        assert entry["drops"] == pytest.approx(want, abs=1e-5), entry["method"]
        assert entry["aopc"] == pytest.approx(sum(want) / 5, abs=1e-5)
    randoms = [drops(order) for order in f.random_rankings(candidates)]
    assert data["random"]["drops"] == pytest.approx([sum(r[b] for r in randoms) / 10 for b in range(5)], abs=1e-5)


def test_an_oracle_map_scores_highest_and_a_random_one_near_the_baseline(folders: Any) -> None:
    """The controls: ranking by each token's own deletion effect beats every map and the baseline; random maps
    score as the random baseline does."""
    import attn_cli

    folder = folders("bert")
    ckpt = open_checkpoint(str(folder))
    trace = attn_cli.trace(TEXT, model=folder, what="attention-gradient")
    deletions = Deletions(ckpt, trace.tokens, trace.explained, "mask")
    candidates = deletions.candidates()
    sizes = f.cut_sizes(len(candidates))
    effect = {j: deletions.base - deletions.probability(deletions.deleted([j])) for j in candidates}
    oracle = deletions.curve("oracle", sorted(candidates, key=lambda j: -effect[j]), sizes)
    data = json.loads(invoke("faithfulness", TEXT, "--model", str(folder), "-F", "json").stdout)
    assert oracle.aopc > max(m["aopc"] for m in data["methods"]) and oracle.aopc > data["random"]["aopc"]
    each = [deletions.curve("r", order, sizes).aopc for order in f.random_rankings(candidates)]
    spread = statistics.stdev(each)
    noise = []  # ten random maps (rows of noise, seeds 1 to 10): their mean AOPC is the baseline's, within the draws' spread
    for seed in range(1, 11):
        row = torch.rand(len(trace.tokens), generator=torch.Generator().manual_seed(seed)).tolist()
        noise.append(deletions.curve("noise", f.ranking(row, candidates), sizes).aopc)
    assert abs(statistics.mean(noise) - statistics.mean(each)) <= 4 * spread * math.sqrt(2 / 10)
    assert oracle.aopc > statistics.mean(each) + 2 * spread


def test_faithfulness_formats_and_refusals(folders: Any, minilm_path: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    bert = str(folders("bert"))
    table = invoke("faithfulness", TEXT, "--model", bert, "--methods", "weights,alti", "-F", "table").stdout
    assert "Faithfulness to label" in table and "alti" in table and "weights" in table and "random (10)" in table and "rollout" not in table
    csv = invoke("faithfulness", TEXT, "--model", bert, "--methods", "rollout", "--delete-with", "remove", "-F", "csv").stdout.splitlines()
    assert csv[0] == "method,rank,aopc,bin,drop" and len(csv) == 1 + 2 * 5
    texts = tmp_path / "texts.txt"
    texts.write_text(TEXT + "\ni loved the acting\n")
    both = json.loads(invoke("faithfulness", "--file", str(texts), "--lines", "--model", bert, "--methods", "weights", "-F", "json").stdout)
    one = [json.loads(invoke("faithfulness", line, "--model", bert, "--methods", "weights", "-F", "json").stdout) for line in texts.read_text().splitlines()]
    assert isinstance(both["target"], list) and len(both["target"]) == 2
    assert both["methods"][0]["drops"] == pytest.approx([(a + b) / 2 for a, b in zip(one[0]["methods"][0]["drops"], one[1]["methods"][0]["drops"])])
    for ext, where in (("json", "stderr"), ("csv", "stderr"), ("txt", "stderr"), ("png", "stdout")):  # said once, as every command's
        check_said_once(("faithfulness", TEXT, "--model", bert, "--methods", "weights"), ext, where, tmp_path)
    assert (tmp_path / "out.png").stat().st_size > 0 and (tmp_path / "out.json").read_text().startswith('{"bins"')
    bart = checkpoints.built(tmp_path_factory, "ablation-bart", checkpoints.build_bart)
    for args, code, said in [
        ((TEXT,), 2, "give --model"),
        ((TEXT, "--model", str(minilm_path)), 3, "masked-LM head"),
        ((TEXT, "--model", str(bart)), 2, "encoder-decoder"),
        ((TEXT, "--model", bert, "--methods", "saliency"), 2, "choose from weights"),
        ((TEXT, "--model", bert, "--target-label", "joy"), 2, "labels are 0 negative, 1 positive"),
        ((TEXT, "--model", str(folders("gpt2"))), 2, "use --delete-with remove"),
    ]:
        err = invoke("faithfulness", *args, "-F", "json", code=code).stderr
        assert said in err and len(err.strip().splitlines()) == 1, err
