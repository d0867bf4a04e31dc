"""explain --model on the rotary, grouped-query families (Llama, Mistral, Qwen2): every
number step 2, 3, 7 and 8 print equals transformers' own internal tensors, caught with
hooks on the layer's attention module and its projections (issue 25: W_k was cut with
the query head's rows, Q was labelled x W_qᵀ after RoPE, h_0 said "and positions")."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

import checkpoints
from attn_cli.sources.toy.config import Config
from attn_cli.sources.checkpoint.source import CheckpointSource
from attn_cli.render.explain import explain
from attn_cli.sources.spec import SourceSpec
from attn_cli.records.selection import Selection
from test_explain import grid, text_of
from test_explain_trained import TOL, body

TEXT = "The cat sat on the mat, and the dog sat on the log."
LAYER, HEAD = 1, 5  # 8 query heads, 2 key/value heads: head 5 reads key/value head 1


@pytest.fixture(scope="module", params=["llama", "mistral", "qwen2"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkpoints.built(tmp_path_factory, f"plain-{request.param}", checkpoints.build_llama, model_type=request.param)


def internals(folder: Path, ids: list[int]) -> dict[str, torch.Tensor]:
    """transformers' own tensors in layer LAYER: its attention's input, the projections'
    outputs, the rotary step applied by the family's own apply_rotary_pos_emb, the
    weights (output_attentions) and the heads' concatenated context (o_proj's input)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    attention = model.model.layers[LAYER].self_attn
    seen: dict[str, torch.Tensor] = {}

    def before_attention(module, args, kwargs):
        seen["x"] = kwargs["hidden_states"][0].detach()
        seen["cos"], seen["sin"] = (t.detach() for t in kwargs["position_embeddings"])

    hooks = [attention.register_forward_pre_hook(before_attention, with_kwargs=True)]
    for name in ("q_proj", "k_proj", "v_proj"):
        hooks.append(getattr(attention, name).register_forward_hook(lambda m, i, out, name=name: seen.__setitem__(name, out[0].detach())))
    hooks.append(attention.o_proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("concat", args[0][0].detach())))
    hooks.append(attention.o_proj.register_forward_hook(lambda m, i, out: seen.__setitem__("output", out[0].detach())))
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    for hook in hooks:
        hook.remove()
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dk = getattr(config, "head_dim", None) or config.hidden_size // heads
    q = seen["q_proj"].view(-1, heads, dk).transpose(0, 1)[None]  # (1, H, T, Dk)
    k = seen["k_proj"].view(-1, kv_heads, dk).transpose(0, 1)[None]  # (1, Hkv, T, Dk)
    rotary = importlib.import_module(type(model).__module__).apply_rotary_pos_emb
    q_rot, k_rot = rotary(q, k, seen["cos"], seen["sin"])
    g = HEAD // (heads // kv_heads)
    return {
        "x": seen["x"],
        "q": q[0, HEAD], "k": k[0, g], "v": seen["v_proj"].view(-1, kv_heads, dk).transpose(0, 1)[g],
        "q_rot": q_rot[0, HEAD], "k_rot": k_rot[0, g],
        "weights": out.attentions[LAYER][0, HEAD],
        "context": seen["concat"][:, HEAD * dk : (HEAD + 1) * dk], "concat": seen["concat"], "output": seen["output"],
        "W_q": attention.q_proj.weight[HEAD * dk : (HEAD + 1) * dk], "W_k": attention.k_proj.weight[g * dk : (g + 1) * dk],
        "W_v": attention.v_proj.weight[g * dk : (g + 1) * dk],
        "b_q": None if attention.q_proj.bias is None else attention.q_proj.bias[HEAD * dk : (HEAD + 1) * dk],
        "b_k": None if attention.k_proj.bias is None else attention.k_proj.bias[g * dk : (g + 1) * dk],
        "b_v": None if attention.v_proj.bias is None else attention.v_proj.bias[g * dk : (g + 1) * dk],
        "wrong_W_k": attention.k_proj.weight[HEAD * dk : (HEAD + 1) * dk] if (HEAD + 1) * dk <= attention.k_proj.weight.shape[0] else None,
        "g": torch.tensor(g), "dk": torch.tensor(dk),
    }  # fmt: skip


def walkthrough(folder: Path):
    source = CheckpointSource(SourceSpec(Config(), model=str(folder)))
    trace = source.run(TEXT, Selection((LAYER,), (HEAD,)))
    return trace, explain(trace, head=HEAD, query=None, precision=6)


def close(shown: torch.Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    torch.testing.assert_close(shown, want.double()[: shown.shape[0], : shown.shape[1]], atol=atol, rtol=0)


def test_every_number_of_the_grouped_query_walk_through_is_transformers(folder: Path) -> None:
    trace, expl = walkthrough(folder)
    ref = internals(folder, list(trace.tokens.ids))
    g, dk = int(ref["g"]), int(ref["dk"])
    assert trace.model.kv_heads < trace.model.heads and g == 1
    # step 2: the family's own first hidden state and the layer's input
    assert "h_0 = embed_tokens[ids]" in text_of(expl, 2) and "no position is added" in text_of(expl, 2)
    close(body(grid(expl, 2, f"x, layer {LAYER}'s input")), ref["x"], atol=TOL)
    # step 3: the query head's rows of W_q, the key/value head's rows of W_k and W_v, with biases where the family has them
    text = text_of(expl, 3)
    assert f"key/value head {g}" in text and f"K = x W_kᵀ" in text and f"→ {len(trace.tokens)} × {2 * dk}" in text
    for name, first in (("q", HEAD * dk), ("k", g * dk), ("v", g * dk)):
        shown = body(grid(expl, 3, f"W_{name} rows {first}…{first + dk - 1}"))
        bias = ref[f"b_{name}"]
        assert (bias is not None) == trace.model.qkv_bias  # Qwen2's q/k/v biases, shown as the last column
        if bias is not None:
            close(shown[:, -1:], bias[:, None], atol=TOL)
            shown = shown[:, :-1]
        close(shown, ref[f"W_{name}"], atol=TOL)
    # Q and K before and after the rotation; V (not rotated)
    close(body(grid(expl, 3, f"Q before the rotation (head {HEAD})")), ref["q"])
    close(body(grid(expl, 3, f"K before the rotation (head {HEAD})")), ref["k"])
    close(body(grid(expl, 3, f"Q (head {HEAD}), rotated")), ref["q_rot"])
    close(body(grid(expl, 3, f"K (head {HEAD}), rotated")), ref["k_rot"])
    close(body(grid(expl, 3, f"V (head {HEAD})")), ref["v"])
    assert "RoPE" in text and "θ_i = 10000^(−2i/8)" in text
    # step 4: the raw scores from the rotated Q and K; steps 7 and 8: the weights and the head's context
    close(body(grid(expl, 4, f"S, raw scores (head {HEAD})")), ref["q_rot"] @ ref["k_rot"].T, atol=1e-4)
    close(body(grid(expl, 7, f"weights (head {HEAD})"), skip_last=1), ref["weights"], atol=TOL)
    close(body(grid(expl, 8, f"context (head {HEAD})")), ref["context"])
    # step 9: the heads side by side, and through o_proj (summarised corners)
    close(body(grid(expl, 9, "concat")), ref["concat"])
    close(body(grid(expl, 9, "output")), ref["output"])


def test_the_comparison_would_catch_the_old_walk_through(folder: Path) -> None:
    """Negative controls: the query head's own rows of W_k (the old cut), and Q after the
    rotation shown as before it, each differ from what transformers computes, beyond the
    tolerance of the test above."""
    trace, expl = walkthrough(folder)
    ref = internals(folder, list(trace.tokens.ids))
    assert ref["wrong_W_k"] is None  # head 5's rows 40…47 do not even exist in a 16-row W_k: the old "0 × 64"
    with pytest.raises(AssertionError):
        close(body(grid(expl, 3, f"Q (head {HEAD}), rotated")), ref["q"])  # rotated Q is not x W_qᵀ
    other = 0  # key/value head 0, the other group's
    dk = int(ref["dk"])
    with pytest.raises(AssertionError):
        close(body(grid(expl, 3, f"W_k rows {int(ref['g']) * dk}")), trace.layers[0].projections.key.weight[other * dk : (other + 1) * dk])
