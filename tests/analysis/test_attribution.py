"""Value zeroing and ALTI (``analysis.contributions``, ``families.attribution``) against their authors'
computations, written out here over transformers' own modules (their repositories import old
transformers internals and captum, which cannot run here):

- value zeroing as hmohebbi/ValueZeroing's demo computes it: layer l run again with token t's value
  vectors zeroed (their ``zero_value_index``: a hook on the value projection's output, every head),
  the cosine distance to the clean output of layer l, rows divided by their sums, and their
  ``compute_joint_attention(res=False)``. The distance in float64: scikit-learn's float32
  ``cosine_distances`` loses distances under about 1e-4 to rounding (0.03 apart on MiniLM's rows).
- ALTI post-norm as mt-upc/transformer-contributions' ``get_contributions`` (BERT, DistilBERT) and
  pre-norm as mt-upc/logit-explanations' (GPT-2), each with the norm's epsilon and the L1 distance as
  the paper has them (their code adds the epsilon to the states, and 1e-6 to each component of the
  distance: ``F.pairwise_distance``), normalized as their ``min_sum`` with the resultant's norm,
  combined by their ``compute_joint_attention``.

On the real MiniLM and tiny sharpened BERT, DistilBERT and GPT-2 classifiers, to 1e-5. Controls:
rows left unnormalized, the residual left out of ALTI, the wrong layer zeroed, the code's quirks.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import checkpoints
import numpy as np
import pytest
import torch
from invoking import invoke

from attn_cli.analysis.contributions import BlockNorm, alti_layer, cosine_distance
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.checkpoint.families.attribution import Attributions

TEXT = "The cat sat on the mat, and it purred."
LABELS = {"num_labels": 2, "id2label": {0: "negative", 1: "positive"}, "label2id": {"negative": 0, "positive": 1}}
BUILDS: dict[str, tuple[Any, dict[str, Any]]] = {
    "bert": (checkpoints.build_encoder, dict(model_type="bert", cls="BertForSequenceClassification", **LABELS)),
    "distilbert": (checkpoints.build_encoder, dict(model_type="distilbert", cls="DistilBertForSequenceClassification", **LABELS)),
    "gpt2": (checkpoints.build_gpt2, dict(cls="GPT2ForSequenceClassification", **LABELS)),
    "bert-mlm": (checkpoints.build_encoder, dict(model_type="bert")),
    "distilbert-mlm": (checkpoints.build_encoder, dict(model_type="distilbert")),
    "gpt2-lm": (checkpoints.build_gpt2, {}),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Any:
    made = checkpoints.builds_maker(tmp_path_factory, "attribution", BUILDS)
    return lambda name: minilm_path if name == "minilm" else made(name)


_VALUE_ZEROING: dict[tuple[str, tuple[int, ...], int], np.ndarray] = {}


class Theirs:
    """A transformers model of the checkpoint, run as the authors' code runs it: hooks on its modules."""

    def __init__(self, folder: Path, ids: tuple[int, ...]) -> None:
        import transformers

        self.model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
        self.kind = self.model.config.model_type
        self.ids = torch.tensor([ids])
        self.n = len(ids)
        with torch.no_grad():
            out = self.model(input_ids=self.ids, output_hidden_states=True, output_attentions=True)
        self.hidden, self.attentions = out.hidden_states, out.attentions
        c = self.model.config
        self.heads, self.d = c.num_attention_heads if self.kind != "distilbert" else c.n_heads, c.hidden_size if self.kind != "distilbert" else c.dim

    def layer(self, l: int) -> Any:
        m = self.model
        return {"gpt2": lambda: m.h[l], "distilbert": lambda: m.transformer.layer[l]}.get(self.kind, lambda: m.encoder.layer[l])()

    def value_module(self, l: int) -> Any:
        layer = self.layer(l)
        return {"gpt2": lambda: layer.attn.c_attn, "distilbert": lambda: layer.attention.v_lin}.get(self.kind, lambda: layer.attention.self.value)()

    def run(self, l: int, zero: int | None = None, capture: dict[str, Any] | None = None) -> torch.Tensor:
        """Layer l's output (1, T, D) in a forward with token ``zero``'s values zeroed in layer l."""
        got: dict[str, torch.Tensor] = {}

        def zeroing(module: Any, inputs: Any, output: torch.Tensor) -> torch.Tensor:
            output = output.clone()
            if self.kind == "gpt2":  # c_attn's output: [q | k | v]
                output[:, zero, 2 * self.d :] = 0.0
            else:
                output[:, zero, :] = 0.0
            return output

        hooks = [self.layer(l).register_forward_hook(lambda m, i, o: got.__setitem__("out", o[0] if isinstance(o, tuple) else o))]
        if zero is not None:
            hooks.append(self.value_module(l).register_forward_hook(zeroing))
        with torch.no_grad():
            self.model(input_ids=self.ids)
        for hook in hooks:
            hook.remove()
        return got["out"]

    def value_zeroing(self, l: int) -> np.ndarray:
        key = (str(self.model.name_or_path), tuple(self.ids[0].tolist()), l)
        if key not in _VALUE_ZEROING:  # T forwards a layer: computed once a session for each text and layer
            _VALUE_ZEROING[key] = self._value_zeroing(l)
        return _VALUE_ZEROING[key]

    def _value_zeroing(self, l: int) -> np.ndarray:
        clean = self.run(l)[0].double()
        scores = np.zeros((self.n, self.n))
        for t in range(self.n):
            x = self.run(l, zero=t)[0].double()
            scores[:, t] = (1 - (x * clean).sum(-1) / (x.norm(dim=-1) * clean.norm(dim=-1))).numpy()
        if self.kind == "gpt2":  # a key the causal mask hides changes nothing; float32 rounding aside, 0
            scores[np.triu_indices(self.n, 1)] = 0.0
        return scores / scores.sum(-1, keepdims=True)

    def captured(self, l: int, names: dict[str, Any]) -> dict[str, Any]:
        """Each named module's (input, output) in a clean forward."""
        got: dict[str, Any] = {}
        hooks = [m.register_forward_hook(lambda mod, i, o, k=k: got.__setitem__(k, (i[0], o))) for k, m in names.items()]
        with torch.no_grad():
            self.model(input_ids=self.ids)
        for hook in hooks:
            hook.remove()
        return got

    def alti(self, l: int, quirks: bool = False, residual: bool = True) -> np.ndarray:
        return self.alti_pre(l, quirks, residual) if self.kind == "gpt2" else self.alti_post(l, quirks, residual)

    def alti_post(self, l: int, quirks: bool, with_residual: bool) -> np.ndarray:
        """transformer-contributions' get_contributions for layer l."""
        layer, h, n, d = self.layer(l), self.heads, self.n, self.d
        dense, ln1 = (layer.attention.out_lin, layer.sa_layer_norm) if self.kind == "distilbert" else (layer.attention.output.dense, layer.attention.output.LayerNorm)
        got = self.captured(l, {"values": self.value_module(l), "ln1": ln1})
        value_layer = got["values"][1].view(1, n, h, d // h).permute(0, 2, 1, 3)
        with torch.no_grad():
            transformed = torch.einsum("bhsv,dhv->bhsd", value_layer, dense.weight.view(d, h, d // h))
            summed = torch.einsum("bhks,bhsd->bhksd", self.attentions[l], transformed).sum(dim=1)
            residual = torch.einsum("sk,bsd->bskd", torch.eye(n), self.hidden[l]) * (1.0 if with_residual else 0.0)
            weighted = summed + residual
            pre_ln = got["ln1"][0]
            coef = 1 / ((pre_ln + ln1.eps).std(-1, unbiased=False) if quirks else torch.sqrt(pre_ln.var(-1, unbiased=False) + ln1.eps))
            coef = coef.view(1, -1, 1)
            resultant = (l_transform(weighted, ln1.weight).sum(dim=2) + l_transform(dense.bias, ln1.weight)) * coef + ln1.bias
            if with_residual:
                assert torch.dist(resultant, got["ln1"][1]) < 1e-3
            vectors = l_transform(weighted, ln1.weight) * coef.unsqueeze(-1)
            return min_sum(vectors, resultant, quirks)

    def alti_pre(self, l: int, quirks: bool, with_residual: bool) -> np.ndarray:
        """logit-explanations' layer-wise contributions for layer l (GPT-2: Conv1D's (in, out) weights)."""
        layer, h, n, d = self.layer(l), self.heads, self.n, self.d
        ln1, c_attn, c_proj = layer.ln_1, layer.attn.c_attn, layer.attn.c_proj
        got = self.captured(l, {"ln2": layer.ln_2})
        with torch.no_grad():
            w_v = c_attn.weight[:, -d:].view(-1, h, d // h)
            b_v = c_attn.bias[-d:].view(h, -1)
            w_o = c_proj.weight.transpose(0, 1).reshape(d, h, d // h)
            x = self.hidden[l][0]
            var = x.var(-1, unbiased=False)
            normed = l_transform(x, ln1.weight) / torch.sqrt(var + ln1.eps)[:, None]
            a = self.attentions[l][0]
            v = torch.einsum("sd,dhz->hsz", normed, w_v)
            lin = torch.einsum("hsd,hts->htsd", torch.einsum("hsz,dhz->hsd", v, w_o), a)
            gamma = torch.einsum("hz,dhz->hd", torch.einsum("d,dhz->hz", ln1.bias, w_v) + b_v, w_o)
            aff = torch.einsum("hts,hd->htsd", a, gamma).sum(0) + lin.sum(0)
            vectors = aff + torch.einsum("sk,sd->skd", torch.eye(n), x) * (1.0 if with_residual else 0.0)
            resultant = vectors.sum(dim=1) + c_proj.bias
            if with_residual:
                assert torch.dist(resultant, got["ln2"][0][0]) < 1e-3
            return min_sum(vectors[None], resultant[None], quirks)


def l_transform(x: torch.Tensor, w_ln: torch.Tensor) -> torch.Tensor:
    """Their l_transform: centred, times the gain, as matrices."""
    mean = torch.eye(w_ln.size(0)) - 1 / w_ln.size(0) * torch.ones(w_ln.size(0), w_ln.size(0))
    return torch.einsum("... e , e f , f g -> ... g", x, mean, torch.diag(w_ln))


def min_sum(vectors: torch.Tensor, resultant: torch.Tensor, quirks: bool) -> np.ndarray:
    """-L1(T_i(x_j), y_i), then their normalize_contributions(scaling="min_sum", resultant_norm=||y||_1)."""
    if quirks:
        importance = -torch.nn.functional.pairwise_distance(vectors, resultant.unsqueeze(2), p=1)
    else:
        importance = -(vectors - resultant.unsqueeze(2)).abs().sum(-1)
    c = torch.clip(importance[0] + resultant[0].abs().sum(-1).unsqueeze(1), min=0)
    return (c / c.sum(-1, keepdim=True)).numpy()


def joint(maps: list[np.ndarray]) -> np.ndarray:
    """Their compute_joint_attention (res=False): C_L ... C_0."""
    out = maps[0]
    for m in maps[1:]:
        out = m @ out
    return out


def ours(folder: Path, names: tuple[str, ...] = ("value_zeroing", "alti")) -> tuple[Attributions, tuple[int, ...]]:
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    layers = list(range(ckpt.info.layers))
    visitor = Attributions(ckpt._family, names, layers)
    ckpt.trace(tokens, layers, "weights", visit=visitor)
    return visitor, tokens.ids


@pytest.mark.parametrize("name", ["minilm", "bert", "distilbert", "gpt2", "bert-mlm", "distilbert-mlm", "gpt2-lm"])
def test_value_zeroing_and_alti_equal_the_authors(folders: Any, name: str) -> None:
    got, ids = ours(folders(name))
    theirs = Theirs(folders(name), ids)
    layers = len(theirs.attentions)
    vz = [theirs.value_zeroing(l) for l in range(layers)]
    alti = [theirs.alti(l) for l in range(layers)]
    for l in range(layers):
        np.testing.assert_allclose(got.maps["value_zeroing"][l].numpy(), vz[l], atol=1e-5)
        np.testing.assert_allclose(got.maps["alti"][l].numpy(), alti[l], atol=1e-5)
    np.testing.assert_allclose(got.through("value_zeroing", layers - 1).weights.numpy(), joint(vz), atol=1e-5)
    np.testing.assert_allclose(got.through("alti", layers - 1).weights.numpy(), joint(alti), atol=1e-5)
    assert (got.through("alti", layers - 1).mask is not None) == name.startswith("gpt2")
    # controls: the wrong layer zeroed, rows left unnormalized, the residual left out, the code's quirks
    assert np.abs(got.maps["value_zeroing"][0].numpy() - vz[1]).max() > 1e-3
    assert np.abs(theirs.alti(0, residual=False) - alti[0]).max() > 1e-3
    assert np.abs(theirs.alti(0, quirks=True) - alti[0]).max() > 1e-7  # their code's epsilons: another computation


def test_controls_caught_by_the_arithmetic() -> None:
    """Rows left unnormalized differ from the map; a pre-norm block read as post-norm differs."""
    torch.manual_seed(0)
    h, n, dv, d = 2, 5, 3, 6
    weights = torch.softmax(torch.randn(h, n, n) * 3, dim=-1)
    values, w_out, residual = torch.randn(h, n, dv), torch.randn(d, h * dv), torch.randn(n, d)
    pre = alti_layer(weights, values, w_out, None, residual, BlockNorm("none"))
    torch.testing.assert_close(pre.sum(-1), torch.ones(n))
    post = alti_layer(weights, values, w_out, None, residual, BlockNorm("around", torch.ones(d), torch.zeros(d), 1e-5))
    assert (pre - post).abs().max() > 1e-3
    a, b = torch.randn(2, n, d), torch.randn(n, d)
    raw = cosine_distance(a, b)
    assert raw.min() >= 0 and (raw.sum(-1) - 1).abs().max() > 1e-3  # not normalized by itself


# Where each family's attention block ends in transformers' modules: (module, "input" or "output"), the
# block's output y there; GPT-NeoX's parallel layer: its input plus the attention's output.
BLOCK_ENDS = {
    "llama": ("post_attention_layernorm", "input"), "mistral": ("post_attention_layernorm", "input"),
    "qwen2": ("post_attention_layernorm", "input"), "qwen3": ("post_attention_layernorm", "input"),
    "gemma": ("post_attention_layernorm", "input"), "phi3": ("post_attention_layernorm", "input"),
    "gemma2": ("pre_feedforward_layernorm", "input"), "gemma3_text": ("pre_feedforward_layernorm", "input"),
    "olmo2": ("mlp", "input"), "modernbert": ("mlp_norm", "input"), "gpt_neox": ("attention", "output"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BLOCK_ENDS))
def test_alti_decomposition_sums_to_each_familys_block_output(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    """Every family's ``attention_block``: the T_i(x_j) and the biases' terms sum to the attention block's
    output as transformers computes it (the authors' assertion, for each kind of block: pre-norm, a
    norm of the attention's output, LayerNorm or RMS, Gemma's 1 + gain)."""
    import transformers

    from attn_cli.analysis.contributions import alti_parts

    folder = checkpoints.one_per_type(tmp_path_factory)(name)
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    made: dict[int, torch.Tensor] = {}

    def visit(index: int, hidden: torch.Tensor, t: Any, layer: Any) -> None:
        block = ckpt._family.attention_block(t)
        made[index] = alti_parts(layer.weights, layer.values, layer.projections.out.weight, layer.projections.out.bias, hidden, block)[1]

    ckpt.trace(tokens, list(range(ckpt.info.layers)), "weights", visit=visit)
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    module, side = BLOCK_ENDS[name]
    got: dict[int, torch.Tensor] = {}
    hooks = [
        getattr(layer, module).register_forward_hook(lambda m, i, o, l=l: got.__setitem__(l, i[0] if side == "input" else o[0]))
        for l, layer in enumerate(model.layers)
    ]
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([tokens.ids]), output_hidden_states=True).hidden_states
    for hook in hooks:
        hook.remove()
    for l in range(ckpt.info.layers):
        want = got[l][0] + (hidden[l][0] if name == "gpt_neox" else 0)
        torch.testing.assert_close(made[l], want.float(), atol=1e-4, rtol=1e-4)
    if name == "gemma2":  # control: Gemma's gain read as the stored weight alone
        block = dataclasses.replace(ckpt._family.attention_block(checkpoint_layer(ckpt, 0)), plus_one=False)
        assert block.linear(torch.ones(ckpt.info.d_model)).sub(ckpt._family.attention_block(checkpoint_layer(ckpt, 0)).linear(torch.ones(ckpt.info.d_model))).abs().max() > 0.5


def checkpoint_layer(ckpt: Any, index: int) -> Any:
    from attn_cli.sources.checkpoint.families.base import LayerTensors

    return LayerTensors(ckpt._weights, ckpt._family.layer_names(index), index)


def test_run_what_value_zeroing_and_alti_in_every_format(minilm_path: Path, tmp_path: Path) -> None:
    """`run --what value-zeroing,value-zeroing-rollout,alti`: the JSON's per-layer and top-level maps are the
    authors' (1e-5), CSV's tables, the human view's titles, --hide-tokens renormalizes them, heatmap draws
    each (and refuses value-zeroing over several layers), --from draws the file's again, the toy refuses."""
    import json

    from invoking import invoke

    model = str(minilm_path)
    data = json.loads(invoke("run", TEXT, "--model", model, "--what", "value-zeroing,value-zeroing-rollout,alti", "-F", "json").stdout)
    theirs = Theirs(minilm_path, tuple(t["id"] for t in data["tokens"]))
    vz = [theirs.value_zeroing(l) for l in range(6)]
    alti = [theirs.alti(l) for l in range(6)]
    assert [layer["layer"] for layer in data["layers"]] == list(range(6))
    for l in range(6):
        np.testing.assert_allclose(np.array(data["layers"][l]["value_zeroing"]), vz[l], atol=1e-5)
        np.testing.assert_allclose(np.array(data["layers"][l]["alti"]), alti[l], atol=1e-5)
    np.testing.assert_allclose(np.array(data["alti"]["weights"]), joint(alti), atol=1e-5)
    np.testing.assert_allclose(np.array(data["value_zeroing_rollout"]["weights"]), joint(vz), atol=1e-5)
    assert data["alti"]["through_layer"] == data["value_zeroing_rollout"]["through_layer"] == 5
    only = json.loads(invoke("run", TEXT, "--model", model, "--what", "value-zeroing", "--layer", "2", "-F", "json").stdout)
    assert "alti" not in only and "value_zeroing_rollout" not in only and set(only["layers"][0]) >= {"value_zeroing"}
    np.testing.assert_allclose(np.array(only["layers"][0]["value_zeroing"]), vz[2], atol=1e-5)
    n = len(data["tokens"])
    csv = invoke("run", TEXT, "--model", model, "--what", "alti", "--layer", "3", "-F", "csv").stdout
    assert sum(line.split(",")[2] == "alti" for line in csv.splitlines()) == 2 * n * n  # layer 3's and the product's
    table = invoke("run", TEXT, "--model", model, "--what", "alti,value-zeroing", "--head", "0", "--hide-tokens", "special").stdout
    assert "ALTI  of layers 0 to 5" in table and "Value zeroing  of layer 5" in table and "rows renormalized" in table
    for what in ("alti", "value-zeroing", "value-zeroing-rollout"):
        picture = tmp_path / f"{what}.png"
        invoke("heatmap", TEXT, "--model", model, "--what", what, "-o", str(picture))
        assert picture.stat().st_size > 0
    assert "give one --layer" in invoke("heatmap", TEXT, "--model", model, "--what", "value-zeroing", "--layer", "all", code=2).stderr
    saved = tmp_path / "maps.json"
    invoke("run", TEXT, "--model", model, "--what", "alti", "-F", "json", "-o", str(saved))
    invoke("heatmap", "--from", str(saved), "--what", "alti", "-o", str(tmp_path / "again.png"))
    missing = invoke("heatmap", "--from", str(saved), "--what", "value-zeroing-rollout", "-o", str(tmp_path / "no.png"), code=2).stderr
    assert "write the file with run --what value-zeroing-rollout" in missing and len(missing.strip().splitlines()) == 1
    toy = invoke("run", "I saw a saw", "-t", "words", "--what", "alti", code=2).stderr
    assert "give --model" in toy and len(toy.strip().splitlines()) == 1


def test_the_python_api_gives_the_maps(minilm_path: Path) -> None:
    """attn_cli.trace(..., what="alti,value-zeroing"): each kept layer's ``maps`` and ``Trace.maps``; a bad name is a UsageError."""
    import attn_cli
    from attn_cli.runtime.errors import UsageError

    traced = attn_cli.trace(TEXT, model=minilm_path, what="alti,value-zeroing")
    got, _ = ours(minilm_path)
    for layer in traced.layers:
        torch.testing.assert_close(layer.maps["alti"], got.maps["alti"][layer.layer])
        torch.testing.assert_close(layer.maps["value_zeroing"], got.maps["value_zeroing"][layer.layer])
    torch.testing.assert_close(traced.combined("alti").weights, got.through("alti", 5).weights)
    assert "value_zeroing_rollout" not in traced.maps and attn_cli.trace(TEXT, model=minilm_path).maps == {}
    with pytest.raises(UsageError, match="choose from"):
        attn_cli.trace(TEXT, model=minilm_path, what="alti,saliency")


@pytest.mark.parametrize("name, block_end", [("bart", "self_attn_layer_norm"), ("t5", None), ("marian", "self_attn_layer_norm")])
def test_an_encoder_decoders_encoder_maps(tmp_path_factory: pytest.TempPathFactory, name: str, block_end: str | None) -> None:
    """An encoder-decoder's maps are its encoder's: each encoder layer's decomposition sums to transformers' block
    output (BART, Marian: post-norm; T5: pre-norm, its first sub-layer's output), and `run --target --what alti`
    gives the encoder's maps (JSON "stack": "encoder"); another stack and attention x gradient: exit 2."""
    import transformers

    from attn_cli.analysis.contributions import alti_parts

    folder = checkpoints.one_per_type(tmp_path_factory)(name)
    pair = open_checkpoint(str(folder), pairs=True)
    encoder = pair.encoder_checkpoint()
    source = pair.tokenizer.encode("the cat sat on the mat")
    made: dict[int, torch.Tensor] = {}

    def visit(index: int, hidden: torch.Tensor, t: Any, layer: Any) -> None:
        out = layer.projections.out
        made[index] = alti_parts(layer.weights, layer.values, out.weight, out.bias, hidden, encoder._family.attention_block(t))[1]

    encoder.trace(source, list(range(encoder.info.layers)), "weights", visit=visit)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval().get_encoder()
    got: dict[int, torch.Tensor] = {}
    blocks = model.block if name == "t5" else model.layers
    hooks = [
        (blk.layer[0] if block_end is None else getattr(blk, block_end)).register_forward_hook(
            lambda m, i, o, l=l: got.__setitem__(l, o[0] if isinstance(o, tuple) else o)
        )
        for l, blk in enumerate(blocks)
    ]
    with torch.no_grad():
        model(input_ids=torch.tensor([source.ids]))
    for hook in hooks:
        hook.remove()
    for l in made:
        torch.testing.assert_close(made[l], got[l][0].float(), atol=1e-4, rtol=1e-4)
    data = json.loads(invoke("run", "the cat sat on the mat", "--model", str(folder), "--target", "a cat", "--what", "alti", "-F", "json").stdout)
    visitor = encoder.attributions(["alti"], list(range(encoder.info.layers)))
    encoder.trace(source, list(range(encoder.info.layers)), "weights", visit=visitor)
    assert data["alti"]["stack"] == "encoder" and "alti" in data["layers"][0] and "alti" not in data["decoder_layers"][0]
    np.testing.assert_allclose(np.array(data["alti"]["weights"]), visitor.through("alti", encoder.info.layers - 1).weights.numpy(), atol=1e-6)
    table = invoke("run", "the cat sat on the mat", "--model", str(folder), "--target", "a cat", "--what", "alti", "--head", "0").stdout
    assert "ALTI  of layers 0 to" in table
    for extra, said in ((("--stack", "cross", "--head", "0"), "give --stack encoder"), (("--stack", "decoder", "--head", "0"), "give --stack encoder")):
        err = invoke("run", "the cat sat on the mat", "--model", str(folder), "--target", "a cat", "--what", "alti", *extra, code=2).stderr
        assert said in err and len(err.strip().splitlines()) == 1
