"""`explain --model`: one real head's walk-through, its numbers checked against
transformers' eager attention and the checkpoint's own tensors (not our engine's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import checkpoints
from invoking import invoke
from attn_cli.sources.toy.config import Config
from attn_cli.analysis.headroles import text_scores
from attn_cli.sources.checkpoint.source import CheckpointSource
from attn_cli.render.explain import explain, to_text
from attn_cli.sources.spec import SourceSpec
from attn_cli.records.selection import Selection
from test_explain import grid, number, step, text_of

TEXT = "The cat sat on the mat."
LAYER, HEAD = 1, 2
PRECISION = 6
TOL = 0.5e-6 + 2e-6  # six decimals on screen, float32 sums


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    builder = checkpoints.build_gpt2 if request.param == "gpt2" else checkpoints.build_bert
    return checkpoints.built(tmp_path_factory, request.param, builder)


def walkthrough(folder: Path, *, layer: int = LAYER, head: int = HEAD, query: int | None = None):
    source = CheckpointSource(SourceSpec(Config(), model=str(folder)))
    trace = source.run(TEXT, Selection((layer,), (head,)))
    return trace, explain(trace, head=head, query=query, precision=PRECISION)


def reference(folder: Path, trace) -> checkpoints.Reference:
    # GPT-2 adds wte[token_type_ids] when given any: only a pair's type ids go in
    type_ids = trace.tokens.type_ids if any(trace.tokens.type_ids) else None
    return checkpoints.reference(folder, trace.tokens.ids, type_ids)


def head_weights(folder: Path, layer: int, head: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """W_q, W_k, W_v rows of ``head`` (nn.Linear's (out, in)) and their biases, from transformers' model."""
    import transformers

    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager")
    d = model.config.hidden_size
    dk = d // model.config.num_attention_heads
    rows = slice(head * dk, (head + 1) * dk)
    if isinstance(model, transformers.GPT2Model):
        attn = model.h[layer].attn.c_attn  # Conv1D: weight (D, 3D), input-first
        parts = {name: (attn.weight[:, i * d : (i + 1) * d].T, attn.bias[i * d : (i + 1) * d]) for i, name in enumerate("qkv")}
    else:
        self_attn = model.encoder.layer[layer].attention.self
        parts = {name: (m.weight, m.bias) for name, m in zip("qkv", (self_attn.query, self_attn.key, self_attn.value))}
    return {name: (w[rows].detach(), b[rows].detach()) for name, (w, b) in parts.items()}


def body(g, skip_last: int = 0) -> torch.Tensor:
    """A grid's numbers, dropping the "…" column of a summarised table and ``skip_last`` total columns."""
    rows = [[c for c in row[1 : len(row) - skip_last] if c not in ("…", "")] for row in g.rows if row[0] != "⋮"]
    return torch.tensor([[number(c) for c in row] for row in rows], dtype=torch.float64)


def test_queries_keys_values_are_the_layer_input_through_the_heads_rows(folder: Path) -> None:
    trace, expl = walkthrough(folder)
    tokens = trace.tokens
    assert len(tokens) <= 12, "the test wants whole T x T tables"
    ref = reference(folder, trace)
    x = ref.x[LAYER].double()  # (T, D) what transformers' attention read
    # step 2: the layer's input, columns 0-5 of the summarised (T, D) table
    shown_x = body(grid(expl, 2, f"x, layer {LAYER}'s input"))
    torch.testing.assert_close(shown_x, x[:, : shown_x.shape[1]], atol=TOL, rtol=0)
    for name, (w, b) in head_weights(folder, LAYER, HEAD).items():
        # step 3: the head's rows of W (a corner) with the bias as the last column
        g = grid(expl, 3, f"W_{name} rows {HEAD * w.shape[0]}")
        shown = body(g)
        torch.testing.assert_close(shown[:, :-1], w.double()[: shown.shape[0], : shown.shape[1] - 1], atol=TOL, rtol=0)
        torch.testing.assert_close(shown[:, -1], b.double()[: shown.shape[0]], atol=TOL, rtol=0)
        # the head's Q (K, V) = x W^T + b, whole (Dk = 8 columns)
        want = x @ w.double().T + b.double()  # (T, D) @ (D, Dk) -> (T, Dk)
        torch.testing.assert_close(body(grid(expl, 3, f"{name.upper()} (head {HEAD})")), want, atol=1e-5, rtol=0)


def test_weights_and_context_equal_transformers_eager_attention(folder: Path) -> None:
    trace, expl = walkthrough(folder)
    ref = reference(folder, trace)
    want = ref.weights[LAYER][HEAD].double()  # (T, T)
    torch.testing.assert_close(body(grid(expl, 7, f"weights (head {HEAD})"), skip_last=1), want, atol=TOL, rtol=0)
    dk = trace.model.head_dim
    context = ref.concat[LAYER][:, HEAD * dk : (HEAD + 1) * dk].double()  # (T, Dk) this head's block of the concat
    torch.testing.assert_close(body(grid(expl, 8, f"context (head {HEAD})")), context, atol=1e-5, rtol=0)


def test_scale_and_mask_follow_the_family(folder: Path) -> None:
    trace, expl = walkthrough(folder)
    assert f"factor = 1/sqrt({trace.model.head_dim})" in text_of(expl, 5)
    mask = step(expl, 6)
    if trace.model.family == "gpt2":
        assert not mask.skipped
        masked = grid(expl, 6, "Z masked")
        assert masked.rows[0][2] == "-inf" and masked.rows[-1][-1] != "-inf"
    else:
        assert mask.skipped and "encoder" in text_of(expl, 6)


def test_tokens_are_the_models_with_special_tokens_marked(folder: Path) -> None:
    trace, expl = walkthrough(folder)
    tokens = grid(expl, 1, "Tokens")
    assert [row[2] for row in tokens.rows] == [str(i) for i in trace.tokens.ids]
    assert [row[3] == "★" for row in tokens.rows] == [trace.tokens.is_special(i) for i in range(len(trace.tokens))]
    if trace.model.family == "bert":
        assert tokens.rows[0][1] == "[CLS]" and tokens.rows[0][3] == "★"


def test_the_roles_step_uses_the_heads_definitions(folder: Path) -> None:
    trace, expl = walkthrough(folder)
    ref = reference(folder, trace)
    mine = text_scores(ref.weights[LAYER], layer=LAYER, special=trace.tokens.special, mask=trace.layers[0].mask)[HEAD]
    roles = grid(expl, 10, "")
    shown = {row[0]: number(row[2]) for row in roles.rows}
    assert shown["previous"] == pytest.approx(mine.previous_mass, abs=TOL)
    assert shown["first"] == pytest.approx(mine.first_mass, abs=TOL)
    assert shown["self"] == pytest.approx(mine.self_mass, abs=TOL)
    assert f"reads as: {mine.role}." in text_of(expl, 10)


def test_explain_model_on_the_command_line(folder: Path) -> None:
    result = invoke("explain", TEXT, "--model", str(folder), "--layer", "-1", "--head", "3", "-F", "text")
    assert "Attention in layer 2, head 3 of" in result.stdout
    for title in ("1. Tokenize", "2. The layer's input", "3. Project", "7. Softmax", "9. Heads and output", "10. What this head does"):
        assert title in result.stdout
    assert "--emit-python" not in result.stdout  # the toy's hints stay with the toy


def test_explain_model_follows_a_query(folder: Path) -> None:
    trace, expl = walkthrough(folder, query=2)
    text = to_text(expl)
    assert f"Following query 2 {trace.tokens.labels[2]!r}" in text
    assert "Σ = S[2, j]" in text


def test_explain_model_refuses_several_heads(folder: Path) -> None:
    result = invoke("explain", TEXT, "--model", str(folder), "--head", "0-1", code=2)
    assert "give a single index" in result.stderr
