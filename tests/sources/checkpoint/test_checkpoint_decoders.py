"""The rotary decoders beyond Llama (Qwen3, Gemma 1-3, Phi-3, GPT-NeoX, OLMo 2)
computed by attn-cli against transformers' eager attention (1e-5 in float32) on
sharpened tiny checkpoints saved as *ForCausalLM, some with the older config keys
Hub checkpoints carry; and, for each family's own step, the bug the comparison catches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import checkpoints
from checkpoints import GEMMA3_ROPE, LOCAL_GLOBAL, LONG, LONGROPE, TEXT, WINDOW  # shared with the precision and CUDA tests
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families import activations, decoder, gemma, gpt_neox, llama, olmo2, rotary
from attn_cli.runtime.errors import ModelUnavailable

ORIGINAL = 32  # Phi-3's original_max_position_embeddings here


def gemma3_old(config: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3 as most Hub files spell it: rope_theta (global), rope_local_base_freq,
    rope_scaling for the global layers, sliding_window_pattern instead of layer_types."""
    config.pop("rope_parameters")
    config.pop("layer_types")
    return {**config, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "sliding_window_pattern": 2}  # fmt: skip


def phi3_old(config: dict[str, Any]) -> dict[str, Any]:
    """Phi-3.5 and Phi-4-mini as their Hub files spell it: rope_scaling of "type" longrope,
    rope_theta, partial_rotary_factor and original_max_position_embeddings beside it.
    (The first Phi-3 files say "su": transformers 5 fails to load those, so their test
    below compares with this form.)"""
    params = config.pop("rope_parameters")
    scaling = {"type": "longrope", "short_factor": params["short_factor"], "long_factor": params["long_factor"]}
    return {**config, "rope_scaling": scaling, "rope_theta": params["rope_theta"], "partial_rotary_factor": 0.5,
            "original_max_position_embeddings": ORIGINAL}  # fmt: skip


def neox_old(config: dict[str, Any]) -> dict[str, Any]:
    """Pythia's config.json: rotary_pct and rotary_emb_base, no rope_parameters."""
    params = config.pop("rope_parameters")
    return {**config, "rotary_pct": params["partial_rotary_factor"], "rotary_emb_base": params["rope_theta"]}


def gemma_old(config: dict[str, Any]) -> dict[str, Any]:
    """Gemma's official files: hidden_act "gelu", which means the tanh approximation."""
    return {**config, "hidden_act": "gelu"}


CHECKPOINTS: dict[str, tuple[dict[str, Any], str]] = {
    # name: (build_decoder's keyword arguments, text)
    "qwen3": (dict(model_type="qwen3", attention_bias=True), TEXT),
    "qwen3-window": (dict(model_type="qwen3", use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1), LONG),
    "gemma": (dict(model_type="gemma", num_key_value_heads=1), TEXT),
    "gemma-old": (dict(model_type="gemma", old_keys=gemma_old), TEXT),
    "gemma2": (
        dict(model_type="gemma2", sliding_window=WINDOW, query_pre_attn_scalar=32, attn_logit_softcapping=5.0),
        LONG,
    ),
    "gemma3": (
        dict(model_type="gemma3_text", sliding_window=WINDOW, query_pre_attn_scalar=32, layer_types=LOCAL_GLOBAL,
             rope_parameters=GEMMA3_ROPE),
        LONG,
    ),  # fmt: skip
    "gemma3-old": (
        dict(model_type="gemma3_text", sliding_window=WINDOW, query_pre_attn_scalar=32, layer_types=LOCAL_GLOBAL,
             rope_parameters=GEMMA3_ROPE, old_keys=gemma3_old),
        LONG,
    ),  # fmt: skip
    "phi3": (
        dict(model_type="phi3", rope_parameters={**LONGROPE, "partial_rotary_factor": 0.5},
             original_max_position_embeddings=ORIGINAL, sliding_window=12),
        LONG,
    ),  # fmt: skip
    "phi3-short": (
        dict(model_type="phi3", rope_parameters={**LONGROPE, "partial_rotary_factor": 0.5},
             original_max_position_embeddings=ORIGINAL, sliding_window=12),
        TEXT,
    ),  # fmt: skip
    "phi3-old": (
        dict(model_type="phi3", rope_parameters={**LONGROPE, "partial_rotary_factor": 0.5},
             original_max_position_embeddings=ORIGINAL, sliding_window=12, old_keys=phi3_old),
        LONG,
    ),  # fmt: skip
    "neox": (dict(model_type="gpt_neox"), TEXT),
    "neox-serial": (dict(model_type="gpt_neox", use_parallel_residual=False, old_keys=neox_old), TEXT),
    "olmo2": (dict(model_type="olmo2"), TEXT),
    "llama-yarn": (
        dict(model_type="qwen3", rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                  "original_max_position_embeddings": ORIGINAL}),
        LONG,
    ),  # fmt: skip
}
FOLDER = {"phi3-short": "phi3"}  # the same checkpoint, another text


@pytest.fixture(scope="session")
def folders(tmp_path_factory: pytest.TempPathFactory):
    return checkpoints.folder_maker(tmp_path_factory, "decoder", checkpoints.build_decoder, CHECKPOINTS, FOLDER)


traced = checkpoints.traced


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_every_layer_and_head_matches_transformers(name: str, folders) -> None:
    ckpt, _, layers = checkpoints.assert_family_matches(folders(name), CHECKPOINTS[name][1])
    assert all(layer.mask is not None for layer in layers) and ckpt.info.anatomy.rotary


def test_the_texts_go_past_the_windows_and_the_original_context(folders) -> None:
    _, tokens, layers = traced(folders("gemma2"), LONG)
    n = len(tokens)
    assert n > 2 * WINDOW and n > 2 * ORIGINAL
    window = causal_mask(n) | torch.ones(n, n, dtype=torch.bool).tril(-WINDOW)
    assert [torch.equal(layer.mask, window) for layer in layers] == [True, False, True]  # local, global, local
    _, short, _ = traced(folders("phi3"), TEXT)
    assert len(short) <= ORIGINAL


def test_old_config_keys_give_the_same_numbers_as_transformers_5s(folders) -> None:
    for new, old in (("gemma3", "gemma3-old"), ("phi3", "phi3-old")):
        _, _, a = traced(folders(new), LONG)
        _, _, b = traced(folders(old), LONG)
        for x, y in zip(a, b):
            assert torch.equal(x.weights, y.weights), (new, x.layer)
    config = json.loads((folders("gemma3-old") / "config.json").read_text())
    assert "rope_parameters" not in config and config["sliding_window_pattern"] == 2


@pytest.mark.parametrize("kind", ["su", "yarn"])
def test_su_and_yarn_in_a_phi3_config_mean_longrope(kind: str, folders, tmp_path: Path) -> None:
    import shutil

    folder = Path(shutil.copytree(folders("phi3-old"), tmp_path / kind))
    config = json.loads((folder / "config.json").read_text())
    config["rope_scaling"]["type"] = kind
    (folder / "config.json").write_text(json.dumps(config))
    _, _, theirs = traced(folders("phi3-old"), LONG)
    _, _, ours = traced(folder, LONG)
    assert all(torch.equal(a.weights, b.weights) for a, b in zip(theirs, ours))


def test_what_the_softmax_reads_is_shown(folders) -> None:
    """Gemma 2: the divisor is sqrt(query_pre_attn_scalar), then the cap; the scaled
    scores shown are capped (within +-5), and some raw ones are far beyond."""
    _, _, layers = traced(folders("gemma2"), LONG)
    layer = layers[1]
    assert layer.divisor_text == "sqrt(32)" and layer.softcap == 5.0
    shown = layer.scaled_scores[~layer.mask.expand_as(layer.scaled_scores)]
    assert float(shown.abs().max()) <= 5.0  # tanh rounds to 1 in float32 far out
    assert float((layer.scores / layer.divisor).abs().max()) > 7.5  # the cap bites in these sharpened weights


def test_qwen3_and_gemma3_norm_each_head_and_olmo2_the_whole_projection(folders) -> None:
    for name, kind in (("qwen3", "head"), ("gemma3", "head"), ("olmo2", "whole")):
        ckpt, _, layers = traced(folders(name), TEXT)
        projections = layers[0].projections
        assert projections.query_norm is not None and projections.key_norm is not None, name
        assert ckpt._family.qk_norm == kind


# -- negative controls: the comparison above catches each family's own step left out ------


def _no_qk_norm(monkeypatch: pytest.MonkeyPatch, family: type) -> None:
    monkeypatch.setattr(family, "_qk_norms", lambda self, t: (None, None))


def _serial(monkeypatch: pytest.MonkeyPatch, family: type) -> None:
    monkeypatch.setattr(family, "parallel", False)
    original = family.__init__

    def init(self: Any, config: Any) -> None:
        original(self, config)
        self.parallel = False

    monkeypatch.setattr(family, "__init__", init)


BUGS = {
    # name: (checkpoint, the bug, the first field and layer the comparison must flag)
    "softcap-left-out": ("gemma2", lambda mp: mp.setattr(gemma.Gemma2, "attention_softcap", lambda self: None), "layer 0 weights"),
    "head-dim-scale": (
        "gemma2", lambda mp: mp.setattr(gemma.Gemma2, "divisor", decoder.Decoder.divisor), "layer 0 weights",
    ),
    "qwen3-qk-norm-skipped": ("qwen3", lambda mp: _no_qk_norm(mp, llama.Qwen3), "layer 0 weights"),
    "gemma3-qk-norm-skipped": ("gemma3", lambda mp: _no_qk_norm(mp, gemma.Gemma3Text), "layer 0 weights"),
    "olmo2-qk-norm-skipped": ("olmo2", lambda mp: _no_qk_norm(mp, olmo2.Olmo2), "layer 0 weights"),
    "gemma-plain-rms-norm": (
        "gemma", lambda mp: mp.setattr(gemma.Gemma, "norm", staticmethod(decoder.norms.rms_norm)), "layer 0",
    ),
    # RMSNorm does not see a scale, so layer 0 is right; the residual stream is not, from layer 1 on
    "gemma-embeddings-unscaled": ("gemma", lambda mp: mp.setattr(gemma.Gemma, "embed_scale", False), "layer 1 weights"),
    "gemma2-post-norms-left-out": ("gemma2", lambda mp: mp.setattr(gemma.Gemma2, "post_norm", False), "layer 1"),
    "olmo2-pre-norms-where-post": ("olmo2", lambda mp: _pre_norm_where_post(mp), "layer 0"),
    "serial-residual-where-parallel": ("neox", lambda mp: _serial(mp, gpt_neox.GptNeoX), "layer 1"),
    "local-window-ignored": ("gemma2", lambda mp: mp.setattr(decoder.Decoder, "layer_mask", lambda self, i, shared, n: shared), "layer 0 weights"),
    "gemma3-one-rope-for-all": (
        "gemma3", lambda mp: mp.setattr(gemma.Gemma3Text, "rotary_per_layer_type", False), "layer 0 weights",
    ),
    "long-factors-ignored": (
        "phi3", lambda mp: mp.setattr(rotary, "longrope", lambda s, n, f=rotary.longrope: f(s, 0)), "layer 0 weights",
    ),
    "longrope-attention-factor-ignored": (
        "phi3", lambda mp: mp.setattr(rotary, "longrope", lambda s, n, f=rotary.longrope: (f(s, n)[0], 1.0)),
        "layer 0 weights",
    ),
    "partial-rotary-ignored": (
        "neox", lambda mp: mp.setattr(rotary, "turn", lambda x, cos, sin: x if cos.shape[-1] < x.shape[-1] else x * cos),
        "layer 0 weights",
    ),
    "neox-qkv-as-blocks": ("neox", lambda mp: mp.setattr(gpt_neox.GptNeoX, "qkv_layout", "blocks"), "layer 0 weights"),
    "yarn-as-default": (
        "llama-yarn", lambda mp: mp.setattr(rotary, "yarn", lambda s: (rotary.inverse_frequencies(s.rotated, s.theta), 1.0)),
        "layer 0 weights",
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_family_step_left_out_fails_the_comparison(bug: str, folders, monkeypatch: pytest.MonkeyPatch) -> None:
    name, perturb, flagged = BUGS[bug]
    checkpoints.assert_bug_caught(folders(name), CHECKPOINTS[name][1], perturb, monkeypatch, flagged)


def _pre_norm_where_post(mp: pytest.MonkeyPatch) -> None:
    """OLMo 2's post-norms read as Llama's pre-norms (its two norms' tensors under the pre-norm roles)."""
    names = {**olmo2.Olmo2.names, "attn_norm": olmo2.Olmo2.names["attn_out_norm"], "mlp_norm": olmo2.Olmo2.names["mlp_out_norm"]}
    mp.setattr(olmo2.Olmo2, "names", {k: v for k, v in names.items() if "out_norm" not in k})
    mp.setattr(olmo2.Olmo2, "pre_norm", True)
    mp.setattr(olmo2.Olmo2, "post_norm", False)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def test_each_family_reads_its_config_keys_once_with_its_own_spellings_and_defaults() -> None:
    """decoder_config: a key as config.json says it (null included: said, not absent), or the
    first of a key's spellings that config.json sets; each family's defaults."""
    from attn_cli.sources.checkpoint.families.decoder_config import DecoderConfig, Gemma2Config, GptNeoXConfig

    assert Gemma2Config.read({}).sliding_window == 4096 and Gemma2Config.read({"sliding_window": None}).sliding_window is None
    assert GptNeoXConfig.read({"rotary_pct": None, "partial_rotary_factor": 0.5}).partial == 0.5  # the first that is set
    assert GptNeoXConfig.read({"rotary_pct": 0.3, "partial_rotary_factor": 0.5}).partial == 0.3  # Pythia's spelling first
    assert GptNeoXConfig.read({}).partial == 0.25 and DecoderConfig.read({}).partial == 1.0
    assert GptNeoXConfig.read({"layer_norm_eps": 1e-3, "rms_norm_eps": 1e-7}).eps == 1e-3 and GptNeoXConfig.key_of("eps") == "layer_norm_eps"
    family = gpt_neox.GptNeoX({"model_type": "gpt_neox", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32,
                               "rotary_emb_base": 500.0, "use_parallel_residual": False})  # fmt: skip
    assert family.c.theta == 500.0 and family.parallel is False and family.layers == 2


def test_a_family_whose_names_disagree_with_its_switches_is_an_error_when_defined() -> None:
    """The switches say what a layer computes; ``names`` only names the tensors, and must name each
    role the switches read and no other (OLMo 2 once said "no pre-norm" by leaving a name out)."""
    for family in (llama.Llama, llama.Qwen3, gemma.Gemma, gemma.Gemma2, gemma.Gemma3Text, olmo2.Olmo2, gpt_neox.GptNeoX):
        assert set(family.names) == decoder.roles_for(family), family.__name__
    with pytest.raises(TypeError, match=r"\['mlp_out_norm'\] missing"):
        type("Broken", (olmo2.Olmo2,), {"names": {k: v for k, v in olmo2.Olmo2.names.items() if k != "mlp_out_norm"}})
    with pytest.raises(TypeError, match=r"\['attn_norm', 'mlp_norm'\] not read"):
        type("Broken", (olmo2.Olmo2,), {"names": {**olmo2.Olmo2.names, "attn_norm": "input_layernorm", "mlp_norm": "x"}})
    type("Fine", (olmo2.Olmo2,), {"names": {**olmo2.Olmo2.names, "attn_norm": "a", "mlp_norm": "b"}, "pre_norm": True})  # the control


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_steps_written_in_place_give_transformers_formulas_bits(dtype: torch.dtype) -> None:
    """RoPE half by half, the RMSNorms' gains and the gated activations written into their
    own blocks: the same bits as transformers' formulas (x cos + rotate_half(x) sin;
    weight * normed; act(gate) * up), full and partial rotary, on a heads-first view."""
    torch.manual_seed(3)
    x = torch.randn(40, 4, 16).to(dtype).transpose(0, 1)  # (H, T, Dk), a view as split_heads gives
    for rotated in (16, 8):
        angles = torch.randn(40, rotated // 2) * 10
        both = torch.cat((angles, angles), dim=-1)
        cos, sin = (both.cos() * 1.2).to(dtype), (both.sin() * 1.2).to(dtype)
        part = x[..., :rotated]
        want = torch.cat((part * cos + rotate_half(part) * sin, x[..., rotated:]), dim=-1)
        assert torch.equal(rotary.turn(x, cos, sin), want), rotated
    h, w = (torch.randn(2, 40, 32) * 3).to(dtype), (torch.rand(32) + 0.5).to(dtype)
    before, x_before = h.clone(), x.clone()
    wide = h.float()
    normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.equal(decoder.norms.rms_norm(h, w, None, 1e-6), w * normed.to(dtype))
    assert torch.equal(decoder.norms.rms_norm_plus_one(h, w, None, 1e-6), (normed * (1.0 + w.float())).to(dtype))
    assert torch.equal(decoder.norms.rms_norm_wide_gain(h, w, None, 1e-6), (w.float() * normed).to(dtype))
    assert torch.equal(h, before) and torch.equal(x, x_before)  # the inputs are left as they were (float32: h.float() is h)
    for name in activations.IN_PLACE:
        gate = (torch.randn(40, 24) * 4).to(dtype)
        assert torch.equal(activations.activation(name, "k", "f", in_place=True)(gate.clone()), activations.ACTIVATIONS[name](gate)), name


# -- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope type 'dynamic'"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ({"model_type": "qwen3_moe"}, "model_type 'qwen3_moe'"),
        ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0, 2.0]}}, "short_factor has 1"),
    ],
)
def test_what_attn_cli_does_not_compute_is_exit_3_naming_it(change: dict, message: str, folders, tmp_path: Path) -> None:
    import shutil

    folder = Path(shutil.copytree(folders("qwen3"), tmp_path / "changed"))
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelUnavailable, match=message):
        open_checkpoint(str(folder))


def test_a_multimodal_checkpoint_runs_its_language_model(folders, tmp_path: Path) -> None:
    """Gemma 3's Gemma3ForConditionalGeneration: config.json nests the text model's
    config, the weights sit under model.language_model; the vision tower is never read."""
    import shutil

    from safetensors.torch import load_file, save_file

    source = folders("gemma3")
    folder = Path(shutil.copytree(source, tmp_path / "multimodal"))
    text = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
                    "vision_config": {"model_type": "siglip_vision_model"}})
    )  # fmt: skip
    tensors = load_file(str(folder / "model.safetensors"))
    renamed = {name.replace("model.", "model.language_model.", 1): t for name, t in tensors.items()}
    renamed["model.vision_tower.vision_model.embeddings.patch_embedding.weight"] = torch.zeros(4, 3, 2, 2)
    save_file(renamed, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _, _, ours = traced(folder, LONG)
    _, _, plain = traced(source, LONG)
    for a, b in zip(ours, plain):
        assert torch.equal(a.weights, b.weights)


@pytest.mark.parametrize(
    ("name", "change", "tensor"),
    [
        ("qwen3", {"head_dim": 8}, "self_attn.q_proj.weight"),
        ("gemma3", {"intermediate_size": 80}, "mlp.gate_proj.weight"),
        ("phi3", {"num_key_value_heads": 4}, "self_attn.qkv_proj.weight"),
        ("neox", {"hidden_size": 32}, "embed_in.weight"),
    ],
)
def test_a_config_that_disagrees_with_its_tensors_is_refused_from_the_headers(
    name: str, change: dict, tensor: str, folders, tmp_path: Path
) -> None:
    import shutil

    folder = Path(shutil.copytree(folders(name), tmp_path / name))
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelUnavailable, match=f"{tensor} is .* but config.json"):
        open_checkpoint(str(folder))
