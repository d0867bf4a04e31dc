"""`attn-cli heads`: the scores are the definitions (computed here from transformers'
eager attention, not from our engine), the probe has its documented layout, and
heads built to do one thing are found and ranked as doing it."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import pytest
import torch

import checkpoints
import invoking
from attn_cli.analysis.headroles import HeadScores, Probe, make_probe, probe_scores, role_of, text_scores
from attn_cli.render.terminal.heads import top_heads

TEXT = "The cat sat on the mat, and the dog sat on the log."
R = 12


cli = functools.partial(invoking.invoke, code=None, command=("heads",))


def json_of(*args: str) -> dict:
    result = cli(*args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module", params=["gpt2", "bert", "llama"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A decoder, an encoder and a grouped-query decoder (8 query heads, 2 key/value heads)."""
    if request.param == "llama":  # the defaults: the name is not test_checkpoint_llama's (its llama has other sizes)
        return checkpoints.built(tmp_path_factory, "plain-llama", checkpoints.build_llama, model_type="llama")
    builder = checkpoints.build_gpt2 if request.param == "gpt2" else checkpoints.build_bert
    return checkpoints.built(tmp_path_factory, request.param, builder)


def definitions(w: torch.Tensor, special: list[bool]) -> dict[str, float | None]:
    """The README's definitions, written out on one (T, T) head."""
    w = w.double()
    n = w.shape[0]
    logs = torch.where(w > 0, torch.log2(w), torch.zeros_like(w))
    return {
        "self_mass": sum(w[i, i].item() for i in range(n)) / n,
        "previous_mass": sum(w[i, i - 1].item() for i in range(1, n)) / (n - 1),
        "first_mass": sum(w[i, 0].item() for i in range(1, n)) / (n - 1),
        "mean_entropy_bits": sum(-(w[i] * logs[i]).sum().item() for i in range(n)) / n,
        "special_mass": (sum(w[i, j].item() for i in range(n) for j in range(n) if special[j]) / n) if any(special) else None,
    }


def test_text_scores_are_the_definitions_on_transformers_attention(folder: Path) -> None:
    data = json_of(TEXT, "--model", str(folder), "--no-probe")
    ids = tuple(t["id"] for t in data["tokens"])
    special = [t["special"] for t in data["tokens"]]
    ref = checkpoints.reference(folder, ids)
    assert data["probe"] is None
    n_layers, n_heads = len(ref.weights), ref.weights[0].shape[0]
    assert [(h["layer"], h["head"]) for h in data["heads"]] == [(l, h) for l in range(n_layers) for h in range(n_heads)]
    for entry in data["heads"]:
        want = definitions(ref.weights[entry["layer"]][entry["head"]], special)
        for name, value in want.items():
            if value is None:
                assert entry[name] is None
            else:
                assert entry[name] == pytest.approx(value, abs=1e-6), name
        assert entry["induction_score"] is None and entry["duplicate_score"] is None
    if any(special):  # BERT: [CLS] ... [SEP]
        assert all(h["special_mass"] is not None for h in data["heads"])
    else:
        assert all(h["special_mass"] is None for h in data["heads"])


def test_probe_layout_and_scores_on_transformers_attention(folder: Path) -> None:
    data = json_of(TEXT, "--model", str(folder), "--probe-length", str(R), "--seed", "7")
    probe = data["probe"]
    ids, start = probe["ids"], probe["start"]
    assert probe["repeat_length"] == R
    assert len(ids) == start + 2 * R  # nothing after the second copy
    assert ids[start : start + R] == ids[start + R :]
    if data["tokens"][0]["special"]:  # [CLS] or BOS, as the tokenizer adds it
        assert data["model"]["family"] in ("bert", "llama") and start == 1 and ids[0] == data["tokens"][0]["id"]
    else:
        assert data["model"]["family"] == "gpt2" and start == 0
    assert not set(ids[start:]) & special_ids(folder)  # drawn from ordinary ids only
    ref = checkpoints.reference(folder, tuple(ids))
    for entry in data["heads"]:
        w = ref.weights[entry["layer"]][entry["head"]].double()
        second = range(start + R, start + 2 * R)
        induction = sum(w[p, p - R + 1].item() for p in second) / R
        duplicate = sum(w[p, p - R].item() for p in second) / R
        assert entry["induction_score"] == pytest.approx(induction, abs=1e-6)
        assert entry["duplicate_score"] == pytest.approx(duplicate, abs=1e-6)
    again = json_of(TEXT, "--model", str(folder), "--probe-length", str(R), "--seed", "7")
    assert again["probe"] == probe  # drawn from --seed
    other = json_of(TEXT, "--model", str(folder), "--probe-length", str(R), "--seed", "8")
    assert other["probe"]["ids"] != ids


def special_ids(folder: Path) -> set[int]:
    """The special tokens' ids, as tokenizer.json lists them (<|endoftext|>; [PAD] [UNK] [CLS] [SEP] [MASK])."""
    added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    return {token["id"] for token in added if token["special"]}


def test_the_probe_draws_from_every_id_but_the_special_ones(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool itself, not a dozen draws from it (which would rarely meet a special id)."""
    import attn_cli.analysis.headroles

    pools = []
    real = attn_cli.analysis.headroles.make_probe

    def watched(leading, ordinary, repeat_length, seed):
        pools.append(list(ordinary))
        return real(leading, ordinary, repeat_length, seed)

    monkeypatch.setattr(attn_cli.analysis.headroles, "make_probe", watched)
    json_of(TEXT, "--model", str(folder), "--probe-length", str(R))
    vocab = set(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"].values())
    assert special_ids(folder) and special_ids(folder) <= vocab  # they are there to be left out
    assert pools == [sorted(vocab - special_ids(folder))]


def test_make_probe_layout() -> None:
    probe = make_probe((101,), range(1000, 2000), 5, seed=0)
    assert probe.start == 1 and probe.repeat_length == 5
    assert probe.ids[0] == 101 and len(probe.ids) == 11
    assert probe.ids[1:6] == probe.ids[6:] and all(1000 <= i < 2000 for i in probe.ids[1:])
    assert make_probe((101,), range(1000, 2000), 5, seed=0) == probe


def shift(n: int) -> torch.Tensor:
    """(T, T) the exact previous-token pattern (row 0 on itself)."""
    w = torch.zeros(n, n)
    w[0, 0] = 1
    w[torch.arange(1, n), torch.arange(0, n - 1)] = 1
    return w


def test_hand_built_heads_get_their_roles() -> None:
    n = 8
    causal = torch.ones(n, n, dtype=torch.bool).triu(1)
    uniform = (~causal).float() / (~causal).float().sum(-1, keepdim=True)  # (T, T) even over the visible keys
    first = torch.zeros(n, n)
    first[:, 0] = 1
    weights = torch.stack([uniform, shift(n), first, torch.eye(n)])  # (4, T, T)
    scores = text_scores(weights, layer=3, mask=causal)
    assert [s.role for s in scores] == ["broad", "previous", "first", "self"]
    assert scores[1].previous_mass == 1.0 and scores[2].first_mass == 1.0 and scores[3].self_mass == 1.0
    assert scores[0].mean_entropy_bits == pytest.approx(sum(math.log2(i + 1) for i in range(n)) / n)
    assert scores[0].special_mass is None


def test_probe_scores_find_induction_and_duplicate_heads() -> None:
    probe = Probe(tuple(range(1 + 2 * 4)), start=1, repeat_length=4)
    n = len(probe.ids)
    induction, duplicate = torch.zeros(n, n), torch.zeros(n, n)
    for p in range(n):
        induction[p, p - 4 + 1 if p >= 5 else 0] = 1
        duplicate[p, p - 4 if p >= 5 else 0] = 1
    ind, dup = probe_scores(torch.stack([induction, duplicate]), probe)
    assert ind == [1.0, 0.0] and dup == [0.0, 1.0]
    base = HeadScores(0, 0, 0.1, 0.1, 0.1, 2.0, None, 0.5)

    assert role_of(dataclasses.replace(base, induction_score=0.9, duplicate_score=0.0)) == "induction"
    assert role_of(dataclasses.replace(base, induction_score=0.0, duplicate_score=0.9)) == "duplicate"
    assert role_of(base) == "mixed"


def build_designed(folder: Path) -> Path:
    """A two-layer GPT-2 whose weights make layer 0 head 1 an exact previous-token head
    and layer 1 head 0 a first-token head; every other head reads nothing (uniform).

    Token embeddings are 0 and position i's is 10 e_i, so after ln_1 the input is
    x_i = a e_i - b 1. The attention output and the MLP write nothing, so layer 1
    reads the same x. Head 1 of layer 0: W_q is the identity, W_k shifts e_j to
    e_(j+1), so q_i . k_j is large exactly when j = i - 1. Head 0 of layer 1: W_q
    sends every e_m to e_0 (q_i the same for every i), W_k keeps only e_0, so
    every query scores key 0 highest."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = checkpoints.byte_level_bpe()
    tokenizer.save(str(folder / "tokenizer.json"))
    d, heads, positions, big = 32, 2, 15, 50.0
    dk = d // heads
    config = transformers.GPT2Config(vocab_size=tokenizer.get_vocab_size(), n_layer=2, n_head=heads, n_embd=d, n_positions=positions)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for block in model.transformer.h:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
        model.transformer.ln_f.weight.fill_(1.0)
        model.transformer.wpe.weight.copy_(10.0 * torch.eye(positions, d))
        w_q, w_k = torch.zeros(d, d), torch.zeros(d, d)  # nn.Linear (out, in); head 1 = rows dk..2dk-1
        for m in range(dk - 1):
            w_q[dk + m, m] = big
            w_k[dk + m + 1, m] = 1.0  # e_m -> e_(m+1)
        c_attn = model.transformer.h[0].attn.c_attn.weight  # Conv1D (in, 3D)
        c_attn[:, :d] = w_q.T
        c_attn[:, d : 2 * d] = w_k.T
        w_q, w_k = torch.zeros(d, d), torch.zeros(d, d)  # head 0 = rows 0..dk-1
        w_q[0, :positions] = big
        w_k[0, 0] = 1.0
        c_attn = model.transformer.h[1].attn.c_attn.weight
        c_attn[:, :d] = w_q.T
        c_attn[:, d : 2 * d] = w_k.T
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def designed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.built(tmp_path_factory, "designed-heads", build_designed)


def test_designed_checkpoint_heads_are_found_and_ranked(designed: Path) -> None:
    text = "The cat sat on the mat."
    data = json_of(text, "--model", str(designed), "--probe-length", "5")
    by = {(h["layer"], h["head"]): h for h in data["heads"]}
    assert by[(0, 1)]["role"] == "previous" and by[(0, 1)]["previous_mass"] > 0.999
    assert by[(1, 0)]["role"] == "first" and by[(1, 0)]["first_mass"] > 0.999
    assert by[(0, 0)]["role"] == by[(1, 1)]["role"] == "broad"  # W_q = W_k = 0: even over the visible keys
    # the transformers reference agrees the heads are what they were built to be
    ref = checkpoints.reference(designed, tuple(t["id"] for t in data["tokens"]))
    n = len(data["tokens"])
    torch.testing.assert_close(ref.weights[0][1], shift(n), atol=1e-3, rtol=0)
    assert bool((ref.weights[1][0][:, 0] > 0.999).all())
    table = cli(text, "--model", str(designed), "--format", "table", "--probe-length", "5")
    assert table.exit_code == 0, table.stderr
    previous_row = next(line for line in table.stdout.splitlines() if line.strip().startswith("previous"))
    first_row = next(line for line in table.stdout.splitlines() if line.strip().startswith("first"))
    assert "L0H1 1.000" in previous_row and "L1H0 1.000" in first_row
    heads = [HeadScores(**{k: v for k, v in h.items() if k != "role"}, spread=0.0) for h in data["heads"]]
    assert [(h.layer, h.head) for h in top_heads(heads, "previous", 3)][0] == (0, 1)


def test_words_tokenizer_has_no_probe_and_says_so() -> None:
    result = cli("I saw a saw", "-t", "words", "--heads", "2", "--causal", "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["probe"] is None and "no fixed vocabulary" in data["probe_note"]
    assert "no probe" in result.stderr
    assert len(data["heads"]) == 2 and data["model"]["family"] == "toy"


def test_lines_gives_one_result_per_text_and_csv_has_the_scores(tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("I saw a saw\nthe cat sat\n")
    result = cli("--file", str(texts), "--lines", "-t", "words", "--heads", "2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["text_index"] for d in lines] == [0, 1]
    csv_out = cli("--file", str(texts), "--lines", "-t", "words", "--heads", "2", "--format", "csv")
    rows = csv_out.stdout.splitlines()
    assert rows[0].split(",")[:4] == ["text_index", "layer", "head", "self_mass"]
    assert len(rows) == 1 + 2 * 2


def test_probe_longer_than_the_model_is_a_usage_error(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    too_long = str((config.get("n_positions") or config["max_position_embeddings"]) // 2 + 1)  # twice that is over the positions
    result = cli(TEXT, "--model", str(folder), "--probe-length", too_long)
    assert result.exit_code == 2
    assert f"--probe-length {too_long}" in result.stderr and "or less" in result.stderr


def test_max_tokens_is_the_texts_limit_not_the_probes(tmp_path_factory) -> None:
    """A 2-token text with a 40-token probe under --max-tokens 20: the text is within it."""
    import checkpoints

    gpt2 = checkpoints.built(tmp_path_factory, "gpt2", checkpoints.build_gpt2)
    args = ["heads", "hi there", "--model", str(gpt2), "--probe-length", "20", "-F", "json"]
    invoking.invoke(*args, "--max-tokens", "20")
    too_long = invoking.invoke(*args, "--max-tokens", "1", code=None)
    assert too_long.exit_code == 4 and "the text has" in too_long.stderr
