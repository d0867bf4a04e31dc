"""Llama-style decoders (Llama, Mistral, Qwen2) computed by attn-cli against
transformers' eager attention (1e-5 in float32) on sharpened tiny checkpoints:
grouped-query attention, default and llama3 rotary embeddings, Mistral's sliding
window, Qwen2's biases; and the bugs the comparison catches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import checkpoints
from checkpoints import LLAMA3, LONG, TEXT, WINDOW  # shared with the precision and CUDA tests
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import llama, loop, rotary

TOL = 1e-5

CHECKPOINTS = {
    # name: (builder keyword arguments, text)
    "llama": (dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), TEXT),
    "llama3": (dict(rope_parameters=LLAMA3, style="metaspace"), LONG),
    "mistral": (dict(model_type="mistral", sliding_window=WINDOW, num_key_value_heads=4), LONG),
    "qwen2": (dict(model_type="qwen2", num_key_value_heads=8), TEXT),
    "qwen2-window": (dict(model_type="qwen2", use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1), LONG),
}


@pytest.fixture(scope="session")
def folders(tmp_path_factory: pytest.TempPathFactory):
    def folder(name: str) -> Path:
        return checkpoints.built(tmp_path_factory, name, checkpoints.build_llama, **CHECKPOINTS[name][0])

    return folder


assert_matches = checkpoints.assert_matches
sharpness = checkpoints.sharpness


traced = checkpoints.traced


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_every_layer_and_head_matches_transformers(name: str, folders) -> None:
    checkpoints.assert_family_matches(folders(name), CHECKPOINTS[name][1])


def test_long_texts_go_past_the_windows_and_the_original_context(folders) -> None:
    _, tokens, _ = traced(folders("llama3"), LONG)
    assert len(tokens) > 2 * LLAMA3["original_max_position_embeddings"]
    # the three kinds of llama3 frequency are all there: kept, blended, divided by factor
    plain = rotary.inverse_frequencies(8, LLAMA3["rope_theta"])
    scaled = rotary.llama3_scaled(plain, rotary.settings(LLAMA3, head_dim=8, max_positions=256).params)
    ratios = (plain / scaled).tolist()
    assert ratios[0] == 1.0 and 1.0 < ratios[1] < 8.0 and ratios[-1] == pytest.approx(8.0)


def test_the_sliding_window_shows_in_the_mask(folders) -> None:
    _, tokens, layers = traced(folders("mistral"), LONG)
    n = len(tokens)
    assert n > 2 * WINDOW
    window = causal_mask(n) | torch.ones(n, n, dtype=torch.bool).tril(-WINDOW)
    for layer in layers:
        assert torch.equal(layer.mask, window)
        assert layer.visible_keys() == [min(q + 1, WINDOW) for q in range(n)]
    # Qwen2 slides only from max_window_layers on
    _, _, qwen = traced(folders("qwen2-window"), LONG)
    n = qwen[0].mask.shape[0]
    assert torch.equal(qwen[0].mask, causal_mask(n))
    assert not torch.equal(qwen[1].mask, causal_mask(n)) and bool(qwen[1].mask[WINDOW, 0])


def test_grouped_query_heads_share_their_key_value_head(folders) -> None:
    ckpt, _, layers = traced(folders("llama"), TEXT)
    info = ckpt.info
    assert (info.family, info.heads, info.kv_heads, info.head_dim, info.d_model) == ("llama", 8, 2, 16, 64)
    assert [info.kv_head(h) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    layer = layers[0]
    assert layer.queries.shape == layer.keys.shape == layer.values.shape == (8, layer.x.shape[0], 16)
    for h in range(8):
        assert torch.equal(layer.keys[h], layer.keys[info.kv_head(h) * 4])
        assert torch.equal(layer.values[h], layer.values[info.kv_head(h) * 4])
    assert not torch.equal(layer.keys[0], layer.keys[4])
    # queries and keys are after RoPE: the scores renderers derive are the softmax's input
    scores = layer.scaled_scores.softmax(-1)
    torch.testing.assert_close(scores, layer.weights, atol=1e-6, rtol=0)
    assert layer.divisor_text == "sqrt(16)"


def test_qwen2_biases_are_read(folders) -> None:
    ckpt, _, layers = traced(folders("qwen2"), TEXT)
    projections = layers[0].projections
    assert projections.out.bias is None and ckpt.info.qkv_bias
    for role in ("query", "key", "value"):  # sharpened: std 0.1, so leaving one out shows
        assert float(getattr(projections, role).bias.abs().max()) > 0.1, role


def test_rope_keys_old_and_new_give_the_same_numbers(folders, tmp_path: Path) -> None:
    folder = folders("llama3")
    old = Path(shutil.copytree(folder, tmp_path / "old"))
    config = json.loads((old / "config.json").read_text())
    parameters = config.pop("rope_parameters")
    config["rope_theta"] = parameters.pop("rope_theta")
    config["rope_scaling"] = {"type" if k == "rope_type" else k: v for k, v in parameters.items()}
    (old / "config.json").write_text(json.dumps(config))
    _, _, new_layers = traced(folder, LONG)
    _, _, old_layers = traced(old, LONG)
    for a, b in zip(new_layers, old_layers):
        assert torch.equal(a.weights, b.weights)


@pytest.mark.parametrize("style", ["byte_level", "metaspace"])
def test_bos_comes_first_flagged_special_with_transformers_ids(style: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = checkpoints.build_llama(tmp_path / style, style=style, num_hidden_layers=1)
    ckpt = open_checkpoint(str(folder))
    theirs = AutoTokenizer.from_pretrained(folder)
    for text in [TEXT, "café naïve 日本語 🐈  double  spaces", "x"]:
        tokens = ckpt.tokenizer.encode(text)
        assert tokens.ids == tuple(theirs(text)["input_ids"])
        assert tokens.texts[0] == checkpoints.BOS[style] and tokens.special[0] and not any(tokens.special[1:])
        if text.isascii():  # elsewhere a byte-level piece may hold part of a character, shown as \xNN
            assert "".join(tokens.texts[1:]).strip() == theirs.decode(tokens.ids[1:]).strip()


# -- dtype ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "qwen2"])  # Dk 16 and 8 (a divisor sqrt(8) that is not a power of two), biases
def test_bfloat16_matches_transformers_in_bfloat16_bit_for_bit(name: str, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same operations in the same order on the same bfloat16 operands: the same bits."""
    folder = folders(name)
    ckpt, tokens, layers = traced(folder, TEXT, dtype="bfloat16")
    assert ckpt.info.dtype == "bfloat16"
    assert all(layer.weights.dtype == torch.float32 and layer.queries.dtype == torch.float32 for layer in layers)
    ref = checkpoints.reference(folder, tokens.ids, dtype=torch.bfloat16)
    assert_matches(layers, ref, tol=0)
    # float32 is not bfloat16: the exact comparison sees the difference
    _, _, wide = traced(folder, TEXT)
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_matches(wide, ref, tol=0)
    # nor does it take a norm that applies its gain before rounding back to bfloat16
    # (LlamaRMSNorm rounds the normed rows first, then multiplies)
    def gain_before_rounding(x: torch.Tensor, weight: torch.Tensor, bias, eps: float) -> torch.Tensor:
        wide = x.float()  # (T, D)
        return (weight.float() * wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)  # (T, D)

    monkeypatch.setattr(llama.Llama, "norm", staticmethod(gain_before_rounding))
    _, _, rounded_late = traced(folder, TEXT, dtype="bfloat16")
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_matches(rounded_late, ref, tol=0)


def test_a_dtype_or_device_that_is_not_there_is_a_usage_error(folders) -> None:
    from attn_cli.runtime.errors import UsageError

    with pytest.raises(UsageError, match="--dtype float8"):
        open_checkpoint(str(folders("llama")), dtype="float8")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="--device cuda: torch sees no CUDA"):
            open_checkpoint(str(folders("llama")), device="cuda")


# -- negative controls: the comparison above catches these bugs ------------------------


def interleaved(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The other pairing convention: dimensions (2i, 2i + 1) turn together, as in Meta's original
    code (complex numbers), instead of (i, i + R/2); cos and sin are split the same way here."""
    return x[..., 0::2], x[..., 1::2]  # (..., Dk/2) each


def tiled(m: torch.Tensor, groups: int) -> torch.Tensor:
    return m if groups == 1 else m.repeat(groups, 1, 1)  # (Hkv, T, d) -> 0, 1, 0, 1, ...


@pytest.mark.parametrize(
    ("name", "module", "attribute", "bug"),
    [
        ("llama", rotary, "pairs", interleaved),
        ("llama3", rotary, "llama3_scaled", lambda inv_freq, settings: inv_freq),
        ("llama", loop, "repeat_kv", tiled),
    ],
    ids=["interleaved-rope-pairs", "llama3-scaling-ignored", "gqa-heads-tiled"],
)
def test_a_classic_bug_fails_the_comparison(name, module, attribute, bug, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt, tokens, ref = checkpoints.with_reference(folders(name), CHECKPOINTS[name][1])
    monkeypatch.setattr(module, attribute, bug)
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_matches(ckpt.trace(tokens, range(ckpt.info.layers)), ref)


@pytest.mark.parametrize("name", ["mistral", "qwen2-window"])
def test_a_dropped_sliding_window_fails_the_comparison(name: str, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt, tokens, ref = checkpoints.with_reference(folders(name), CHECKPOINTS[name][1])
    assert len(tokens) > 2 * WINDOW  # the window hides keys from most queries
    monkeypatch.setattr(llama.Llama, "layer_mask", lambda self, layer, shared, n: shared)  # causal only
    first = 0 if name == "mistral" else 1  # Qwen2 slides from max_window_layers (1) on
    with pytest.raises(AssertionError, match=f"layer {first} weights"):
        assert_matches(ckpt.trace(tokens, range(ckpt.info.layers)), ref)


@pytest.mark.parametrize(("role", "flagged"), [("query", "weights"), ("key", "weights"), ("value", "concat")])
def test_a_dropped_qwen2_bias_fails_the_comparison(role: str, flagged: str, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key bias would cancel in the softmax without RoPE; rotated, it does not. A
    value bias leaves the weights alone and shows in the concat."""
    ckpt, tokens, ref = checkpoints.with_reference(folders("qwen2"), TEXT)
    checkpoints.without_bias(monkeypatch, llama.Llama, role)
    with pytest.raises(AssertionError, match=f"layer 0 {flagged}"):
        assert_matches(ckpt.trace(tokens, range(ckpt.info.layers)), ref)


@pytest.mark.parametrize("bug", list(checkpoints.LAYER_BUGS))
def test_a_wrong_x_concat_or_output_fails_the_comparison_of_that_field(bug: str, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs that leave the weights right: x, concat and output are each compared for
    real, at their tolerance relative to their size (Mistral's W_o is square, as the
    untransposed bug needs)."""
    ckpt, tokens, ref = checkpoints.with_reference(folders("mistral"), LONG)
    perturb, flagged = checkpoints.LAYER_BUGS[bug]
    perturb(monkeypatch)
    with pytest.raises(AssertionError, match=flagged):
        assert_matches(ckpt.trace(tokens, range(ckpt.info.layers)), ref)


# -- a 7B-class checkpoint, from its config and shard index alone -------------------------

SEVEN_B = dict(
    model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, hidden_size=4096, intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192,
    rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
)  # fmt: skip
LAYER_ELEMENTS = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096  # q, k, v; o; the MLP; two norms


@pytest.fixture
def seven_b(folders, tmp_path: Path) -> Path:
    """config.json, model.safetensors.index.json over four shards that are not there, and a tokenizer."""
    folder = tmp_path / "llama-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SEVEN_B))
    shutil.copy(folders("llama") / "tokenizer.json", folder)
    roles = [
        "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    ]  # fmt: skip
    weight_map = {"model.embed_tokens.weight": "model-00001-of-00004.safetensors", "lm_head.weight": "model-00004-of-00004.safetensors"}
    for layer in range(32):
        for role in roles:
            weight_map[f"model.layers.{layer}.{role}.weight"] = f"model-{1 + layer // 8:05d}-of-00004.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


@pytest.mark.parametrize(
    ("dtype", "layers", "refused"),
    [
        ("float32", range(32), "mostly for the T x T tables of 2048 tokens x 32 layers x 32 heads"),
        ("bfloat16", [31], None),  # 14 GB of weights and one layer's tables
        ("float32", [31], "mostly for the weights of layers 0 to 31"),  # 28 GB of weights
        ("float32", [0], None),
    ],
)
def test_a_7b_config_is_refused_or_accepted_from_its_config_alone(
    seven_b: Path, dtype: str, layers, refused: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attn_cli.runtime import budget
    from attn_cli.sources.base import check_budget
    from attn_cli.sources.checkpoint.source import _checkpoint_culprits
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.records.selection import Selection

    ckpt = open_checkpoint(str(seven_b), dtype=dtype)
    assert (ckpt.info.layers, ckpt.info.heads, ckpt.info.kv_heads, ckpt.info.head_dim) == (32, 32, 8, 128)
    parts = ckpt.estimate_bytes(2048, list(layers))
    size = 4 if dtype == "float32" else 2
    assert parts["weights"] == (max(layers) + 1) * LAYER_ELEMENTS * size + 2048 * 4096 * size
    assert parts["tables"] == len(layers) * 32 * 2048 * 2048 * 4 * 2
    monkeypatch.setattr(budget, "available_bytes", lambda: 24 * 2**30)  # this machine's 24 GiB
    culprits = _checkpoint_culprits(2048, Selection(tuple(layers), tuple(range(32))), ckpt.info)
    if refused is None:
        check_budget(parts, culprits)
    else:
        with pytest.raises(TooLargeError, match=refused):
            check_budget(parts, culprits)


# -- the command line ------------------------------------------------------------------------


def test_run_takes_dtype_and_says_what_ran(folders) -> None:
    from invoking import invoke

    result = invoke("run", TEXT, "--model", str(folders("llama")), "--dtype", "bfloat16", "--format", "json")
    data = json.loads(result.stdout)
    assert (data["model"]["dtype"], data["model"]["kv_heads"], data["model"]["heads"]) == ("bfloat16", 2, 8)
    assert data["tokens"][0]["special"] is True


@pytest.mark.parametrize("flag", [["--dtype", "bfloat16"], ["--device", "cpu"]])
def test_dtype_and_device_need_a_model(flag: list[str]) -> None:
    from invoking import invoke

    from attn_cli.runtime.errors import ExitStatus

    result = invoke("run", TEXT, *flag, code=ExitStatus.USAGE)
    assert f"{flag[0]} only makes sense with --model" in result.stderr
