"""Rollout and value-weighted norms (attn_cli.analysis) against references written here
from transformers' own tensors: its attentions for the rollout, its weights and hidden
states for the norms. Each comparison has a negative control: the bug it is about,
put in place, makes it fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import checkpoints
from invoking import invoke

from attn_cli.analysis import norms as norms_module
from attn_cli.analysis import rollout as rollout_module
from attn_cli.analysis.norms import head_outputs, value_norms
from attn_cli.analysis.rollout import rollout_of
from attn_cli.sources.toy.config import Config
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.toy.source import ToySource
from attn_cli.sources.spec import SourceSpec
from attn_cli.records.selection import Selection
from attn_cli.pipeline import open_source
from attn_cli.records.hiding import shown as shown_trace

TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # grouped-query (8 heads, 2 key/value heads), with q/k/v biases: b_v is in f
    return checkpoints.built(tmp_path_factory, "analysis-qwen2", checkpoints.build_llama, model_type="qwen2")


@pytest.fixture(scope="module")
def plain_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Llama itself: grouped-query (8 heads, 2 key/value heads), no biases anywhere
    return checkpoints.built(tmp_path_factory, "analysis-llama", checkpoints.build_llama, model_type="llama")


def checkpoint_trace(folder: Path, text: str, layers: tuple[int, ...] | None = None, **analyses: bool) -> Any:
    source = open_source(SourceSpec(Config(), model=str(folder)))
    chosen = layers if layers is not None else tuple(range(source.n_layers))
    return source.run(text, Selection(chosen, tuple(range(source.n_heads)), **analyses))


# -- rollout ------------------------------------------------------------------


def direct_rollout(attentions: list[torch.Tensor], through: int) -> torch.Tensor:
    """Abnar & Zuidema's rollout written out, from transformers' (H, T, T) attentions."""
    result = None
    for layer in attentions[: through + 1]:
        a = layer.double().mean(0)  # (T, T)
        a = 0.5 * a + 0.5 * torch.eye(a.shape[0], dtype=torch.float64)
        a = a / a.sum(-1, keepdim=True)
        result = a if result is None else a @ result
    assert result is not None
    return result.float()


def reference_attentions(folder: Path, text: str) -> list[torch.Tensor]:
    from attn_cli.sources.checkpoint import open_checkpoint

    tokens = open_checkpoint(str(folder)).tokenizer.encode(text)
    return checkpoints.reference(folder, tokens.ids).weights


@pytest.mark.parametrize("name", ["minilm", "gpt2", "qwen2"])
def test_rollout_equals_a_direct_implementation_from_transformers(
    name: str, minilm_path: Path, gpt2_folder: Path, llama_folder: Path
) -> None:
    folder = {"minilm": minilm_path, "gpt2": gpt2_folder, "qwen2": llama_folder}[name]
    trace = checkpoint_trace(folder, TEXT, rollout=True)
    attentions = reference_attentions(folder, TEXT)
    assert trace.rollout.through_layer == len(attentions) - 1
    torch.testing.assert_close(trace.rollout.weights, direct_rollout(attentions, len(attentions) - 1), atol=1e-5, rtol=0)
    torch.testing.assert_close(trace.rollout.weights.sum(-1), torch.ones(len(trace.tokens)), atol=1e-6, rtol=0)
    if name != "minilm":  # decoders: nothing reaches a position from its future
        future = torch.ones_like(trace.rollout.weights, dtype=torch.bool).triu(1)
        assert bool((trace.rollout.weights[future] == 0).all())
        assert trace.rollout.causal
    else:
        assert trace.rollout.mask is None


def test_minilm_rolls_out_through_layer_2(minilm_path: Path) -> None:
    trace = checkpoint_trace(minilm_path, TEXT, layers=(2,), rollout=True)
    expected = direct_rollout(reference_attentions(minilm_path, TEXT), 2)
    assert trace.rollout.through_layer == 2
    torch.testing.assert_close(trace.rollout.weights, expected, atol=1e-5, rtol=0)


def test_rollout_through_the_layer_chosen(gpt2_folder: Path) -> None:
    trace = checkpoint_trace(gpt2_folder, TEXT, layers=(1,), rollout=True)
    attentions = reference_attentions(gpt2_folder, TEXT)
    assert trace.rollout.through_layer == 1 and [layer.layer for layer in trace.layers] == [1]
    torch.testing.assert_close(trace.rollout.weights, direct_rollout(attentions, 1), atol=1e-5, rtol=0)
    # the negative control: through every layer is another matrix
    assert not torch.allclose(trace.rollout.weights, direct_rollout(attentions, 2), atol=1e-3)


@pytest.mark.parametrize(
    "bug",
    ["reversed order", "no residual", "no renormalization"],
)
def test_a_wrong_rollout_is_caught(bug: str, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def add(self: Any, weights: torch.Tensor, mask: Any) -> None:
        n = weights.shape[-1]
        mixed = weights.double().mean(0)
        if bug != "no residual":
            mixed = 0.5 * mixed + 0.5 * torch.eye(n, dtype=torch.float64)
        if bug == "no renormalization":
            mixed = mixed * 1.01
        if self._product is None:
            self._product = mixed
        else:
            self._product = self._product @ mixed if bug == "reversed order" else mixed @ self._product
        self._causal = False
        self._layers += 1

    monkeypatch.setattr(rollout_module.RolloutAccumulator, "add", add)
    trace = checkpoint_trace(gpt2_folder, TEXT, rollout=True)
    expected = direct_rollout(reference_attentions(gpt2_folder, TEXT), 2)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(trace.rollout.weights, expected, atol=1e-5, rtol=0)


def test_the_toy_rollout_is_one_layer_with_its_residual() -> None:
    trace = ToySource(Config(heads=4, tokenizer="words", causal=True)).run(TEXT, Selection((0,), (0, 1, 2, 3), rollout=True))
    weights = trace.layers[0].weights.double()  # (H, T, T)
    mixed = 0.5 * weights.mean(0) + 0.5 * torch.eye(weights.shape[-1], dtype=torch.float64)
    torch.testing.assert_close(trace.rollout.weights, (mixed / mixed.sum(-1, keepdim=True)).float(), atol=1e-7, rtol=0)
    assert trace.rollout.through_layer == 0 and trace.rollout.causal


def test_a_rollout_needs_every_layer_up_to_its_last() -> None:
    from attn_cli.sources.outside import from_attentions

    trace = from_attentions([torch.full((2, 3, 3), 1 / 3)] * 3, ["a", "b", "c"])
    assert rollout_of(trace.layers).through_layer == 2
    with pytest.raises(UsageError, match="layers 0 to 2.*layer 1 is not here"):
        rollout_of((trace.layers[0], trace.layers[2]))


def test_hidden_tokens_renormalize_the_rollout(gpt2_folder: Path) -> None:
    from attn_cli.records.hiding import HideSpec, hide

    trace = hide(checkpoint_trace(gpt2_folder, TEXT, rollout=True), HideSpec.parse("0"))
    shown = shown_trace(trace).rollout
    full = trace.rollout.weights
    expected = full[1:, 1:] / full[1:, 1:].sum(-1, keepdim=True)
    torch.testing.assert_close(shown.weights, expected, atol=1e-6, rtol=0)
    assert shown.weights.shape == (len(trace.tokens) - 1,) * 2


# -- value-weighted norms -------------------------------------------------------


def transformers_norms(folder: Path, text: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer ((H, T, T) ||a f||, (T, T) ||sum_h a f||) from transformers' attentions,
    its projections' weights and what they read, with the (T, T, D) sum written out."""
    import transformers

    from attn_cli.sources.checkpoint import open_checkpoint

    tokens = open_checkpoint(str(folder)).tokenizer.encode(text)
    ref = checkpoints.reference(folder, tokens.ids)
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").requires_grad_(False)
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", heads) or heads
    made = []
    for i, (a, x) in enumerate(zip(ref.weights, ref.x)):
        x = x.double()  # (T, D) what the projections read
        if isinstance(model, transformers.GPT2Model):  # Conv1D: y = x W + b, W (in, out)
            block = model.h[i].attn
            d = x.shape[-1]
            v = x @ block.c_attn.weight[:, 2 * d :].double() + block.c_attn.bias[2 * d :].double()  # (T, H*Dv)
            w_o = block.c_proj.weight.double().T  # (D_out, H*Dv) as nn.Linear holds it
        elif hasattr(model, "layers"):
            block = model.layers[i].self_attn
            v = torch.nn.functional.linear(x, block.v_proj.weight.double(), None if block.v_proj.bias is None else block.v_proj.bias.double())
            w_o = block.o_proj.weight.double()
        else:
            block = model.encoder.layer[i].attention
            v = torch.nn.functional.linear(x, block.self.value.weight.double(), block.self.value.bias.double())
            w_o = block.output.dense.weight.double()
        d_v = w_o.shape[1] // heads
        v = v.view(len(tokens), kv_heads, d_v)  # (T, Hkv, Dv)
        sent = torch.stack([v[:, h // (heads // kv_heads)] @ w_o[:, h * d_v : (h + 1) * d_v].T for h in range(heads)])  # (H, T, D)
        moved = a.double()[..., None] * sent[:, None, :, :]  # (H, T, T, D)
        made.append((moved.norm(dim=-1).float(), moved.sum(0).norm(dim=-1).float()))
    return made


def assert_norms_match(layers: Any, expected: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for layer in layers:
        head, summed = expected[layer.layer]
        for got, want, what in ((layer.norms, head, "head"), (layer.layer_norms, summed, "layer")):
            torch.testing.assert_close(got, want, atol=1e-5 * float(want.abs().max()), rtol=1e-5, msg=lambda m, what=what: f"layer {layer.layer} {what} norms: {m}")


@pytest.mark.parametrize("name", ["bert", "gpt2", "qwen2", "llama"])
def test_norms_equal_those_from_transformers_tensors(
    name: str, bert_folder: Path, gpt2_folder: Path, llama_folder: Path, plain_llama: Path
) -> None:
    folder = {"bert": bert_folder, "gpt2": gpt2_folder, "qwen2": llama_folder, "llama": plain_llama}[name]
    trace = checkpoint_trace(folder, TEXT, norms=True)
    assert_norms_match(trace.layers, transformers_norms(folder, TEXT))


@pytest.mark.parametrize("name", ["bert", "gpt2", "qwen2"])
def test_what_the_heads_send_sums_to_the_attention_output(name: str, bert_folder: Path, gpt2_folder: Path, llama_folder: Path) -> None:
    folder = {"bert": bert_folder, "gpt2": gpt2_folder, "qwen2": llama_folder}[name]
    trace = checkpoint_trace(folder, TEXT)
    for layer in trace.layers:
        sent = head_outputs(layer)  # (H, T, D)
        bias = layer.projections.out.bias
        total = torch.einsum("hij,hjd->id", layer.weights.double(), sent) + (0.0 if bias is None else bias.double())  # (T, D)
        torch.testing.assert_close(total.float(), layer.output, atol=1e-5 * float(layer.output.abs().max()), rtol=0)


@pytest.mark.parametrize(
    "options",
    [dict(heads=2), dict(heads=2, out_proj=True, qkv_bias=True), dict(heads=4, projections=False), dict(heads=4, out_proj=True, dropout=0.3)],
    ids=["no-out-proj", "out-proj", "no-projections", "dropout"],
)
def test_the_toy_norms_add_up_to_its_output(options: dict[str, Any]) -> None:
    config = Config(tokenizer="words", d_model=16, **options)
    trace = ToySource(config).run(TEXT, Selection((0,), tuple(range(config.heads)), norms=True))
    layer = trace.layers[0]
    a = (layer.dropped_weights if layer.dropped_weights is not None else layer.weights).double()  # what mixed the values
    sent = head_outputs(layer)  # (H, T, D)
    bias = layer.projections.out.bias.double() if layer.projections.out is not None else 0.0
    torch.testing.assert_close((torch.einsum("hij,hjd->id", a, sent) + bias).float(), layer.output, atol=1e-5, rtol=0)
    moved = a[..., None] * sent[:, None]  # (H, T, T, D)
    torch.testing.assert_close(layer.norms, moved.norm(dim=-1).float(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(layer.layer_norms, moved.sum(0).norm(dim=-1).float(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("bug", ["no cross-head terms", "W_o rows, not columns", "no value bias"])
def test_wrong_norms_are_caught(bug: str, gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if bug == "no cross-head terms":
        real = norms_module._gram
        monkeypatch.setattr(norms_module, "_gram", lambda layer: torch.diag_embed(torch.diagonal(real(layer), dim1=1, dim2=2)))
    elif bug == "W_o rows, not columns":
        real_outputs = norms_module.head_outputs

        def rows(layer: Any, keys: slice = slice(None), dtype: Any = torch.float64) -> torch.Tensor:
            heads, _, d_v = layer.values.shape
            w_o = layer.projections.out.weight.to(dtype).T.reshape(-1, heads, d_v).transpose(0, 1)  # W_o^T's slices
            return layer.values[:, keys].to(dtype) @ w_o.transpose(1, 2)

        assert real_outputs is not rows
        monkeypatch.setattr(norms_module, "head_outputs", rows)
    else:
        import dataclasses

        real_norms = norms_module.value_norms

        def unbiased(layer: Any) -> Any:
            bias = layer.projections.value.bias.view(layer.values.shape[0], 1, -1)  # (H, 1, Dv)
            return real_norms(dataclasses.replace(layer, values=layer.values - bias))

        monkeypatch.setattr(norms_module, "value_norms", unbiased)
    trace = checkpoint_trace(gpt2_folder, TEXT, norms=True)
    with pytest.raises(AssertionError, match="norms"):
        assert_norms_match(trace.layers, transformers_norms(gpt2_folder, TEXT))


def test_norms_never_build_a_tensor_per_pair_of_tokens_and_dimension(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer's norms through the Gram matrices: nothing of T x T x D elements."""
    config = Config(tokenizer="words", d_model=64, heads=4, out_proj=True)
    text = " ".join(f"w{i}" for i in range(96))
    layer = ToySource(config).run(text, Selection((0,), (0, 1, 2, 3))).layers[0]
    biggest = 0
    real_empty, real_einsum = torch.empty, torch.einsum

    def watch(result: torch.Tensor) -> torch.Tensor:
        nonlocal biggest
        biggest = max(biggest, result.numel())
        return result

    monkeypatch.setattr(torch, "einsum", lambda *a, **k: watch(real_einsum(*a, **k)))
    monkeypatch.setattr(torch, "empty", lambda *a, **k: watch(real_empty(*a, **k)))
    monkeypatch.setattr(norms_module, "BLOCK_BYTES", 4096)  # several blocks of rows and of keys
    head, summed = value_norms(layer)
    n = len(layer.weights[0])
    assert biggest <= 4 * n * n < n * n * 64  # the (H, T, T) result, not (T, T, D)
    moved = layer.weights.double()[..., None] * head_outputs(layer)[:, None]
    torch.testing.assert_close(summed, moved.sum(0).norm(dim=-1).float(), atol=1e-6, rtol=1e-5)


# -- the command line -------------------------------------------------------------


def test_run_json_has_the_rollout_and_norms_only_when_asked(gpt2_folder: Path) -> None:
    import json

    plain = json.loads(invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json").stdout)
    assert "rollout" not in plain and "norms" not in plain["layers"][0] and "norms" not in plain["layers"][0]["heads"][0]
    data = json.loads(invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "json", "--rollout", "--norms", "--layer", "1").stdout)
    assert data["rollout"]["through_layer"] == 1
    expected = direct_rollout(reference_attentions(gpt2_folder, TEXT), 1)
    torch.testing.assert_close(torch.tensor(data["rollout"]["weights"]), expected, atol=1e-5, rtol=0)
    head, summed = transformers_norms(gpt2_folder, TEXT)[1]
    layer = data["layers"][0]
    assert layer["layer"] == 1
    got = torch.tensor([entry["norms"] for entry in layer["heads"]])
    torch.testing.assert_close(got, head, atol=1e-5 * float(head.max()), rtol=1e-5)
    torch.testing.assert_close(torch.tensor(layer["norms"]), summed, atol=1e-5 * float(summed.max()), rtol=1e-5)


def test_run_csv_has_rollout_norms_and_layer_norms_tables(gpt2_folder: Path) -> None:
    import csv
    import io

    out = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "csv", "--rollout", "--norms", "--layer", "2", "--hide-tokens", "0").stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    n = len([r for r in rows if r["table"] == "token_id"])
    by_table: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_table.setdefault(row["table"], []).append(row)
    assert len(by_table["rollout"]) == n * n and {r["layer"] for r in by_table["rollout"]} == {"2"}
    assert len(by_table["rollout_shown"]) == (n - 1) ** 2
    assert len(by_table["norms"]) == 4 * n * n and {r["head"] for r in by_table["norms"]} == {"0", "1", "2", "3"}
    assert len(by_table["layer_norms"]) == n * n and {r["head"] for r in by_table["layer_norms"]} == {""}
    shown_rows: dict[str, float] = {}
    for r in by_table["rollout_shown"]:
        shown_rows[r["row"]] = shown_rows.get(r["row"], 0.0) + float(r["value"])
    assert all(abs(total - 1) < 1e-6 for total in shown_rows.values())


def test_tables_show_the_rollout_and_norms(gpt2_folder: Path) -> None:
    plain = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "table").stdout
    assert "Attention rollout" not in plain and "Value-weighted norms" not in plain
    both = invoke("run", TEXT, "--model", str(gpt2_folder), "-F", "table", "--rollout", "--norms", "--head", "0").stdout
    assert "Attention rollout  of layers 0 to 2" in both and "Value-weighted norms  ||a_ij f(x_j)||" in both
    asked = invoke("run", TEXT, "--model", str(gpt2_folder), "--show", "norms,rollout").stdout  # --show asks for them
    assert "Attention rollout" in asked and asked.count("Value-weighted norms") == 5  # four heads, and the layer


def test_the_memory_estimate_counts_the_norms_and_rollout(gpt2_folder: Path) -> None:
    from attn_cli.sources.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(gpt2_folder))
    plain = ckpt.estimate_bytes(40, [0, 1, 2])
    with_norms = ckpt.estimate_bytes(40, [0, 1, 2], norms=True)
    with_rollout = ckpt.estimate_bytes(40, [0, 1, 2], rollout=True)
    assert with_norms["tables"] - plain["tables"] == 3 * 5 * 40 * 40 * 4  # (H + 1) x T x T float32 a kept layer
    assert with_norms["activations"] > plain["activations"] and with_rollout["activations"] - plain["activations"] == 3 * 8 * 40 * 40


# -- pictures and the heads census ------------------------------------------------


def test_heatmap_draws_the_rollout_and_the_norms(gpt2_folder: Path, tmp_path: Path) -> None:
    import numpy as np

    from attn_cli.render.picture.panels import HeatmapOptions
    from attn_cli.render.picture.heatmap import heatmap_figure
    from attn_cli.render.picture.kinds import What
    from attn_cli.render.picture.model_view import model_view_figure

    trace = checkpoint_trace(gpt2_folder, TEXT, rollout=True, norms=True)
    fig = heatmap_figure(trace, HeatmapOptions(what=What.rollout))
    (image,) = [im for ax in fig.axes for im in ax.images]
    assert np.allclose(np.ma.getdata(image.get_array()), trace.rollout.weights.numpy() * ~trace.rollout.mask.numpy())
    assert image.get_array().mask[0, 1] and "Attention rollout through layer 2" in fig._suptitle.get_text()
    last = dataclasses_replace(trace, layers=trace.layers[-1:])
    fig = heatmap_figure(last, HeatmapOptions(what=What.norms, heads=(0, 1)))
    drawn = [im for ax in fig.axes for im in ax.images]
    for h, image in enumerate(drawn):
        expected = np.where(trace.layers[-1].mask.numpy(), 0.0, trace.layers[-1].norms[h].numpy())
        assert np.allclose(np.ma.getdata(image.get_array()), expected)
    fig = model_view_figure(trace, HeatmapOptions(what=What.norms))
    labels = {im.get_label() for ax in fig.axes for im in ax.images}
    assert "norms layer 1 head 3" in labels and len(labels) == 12


def dataclasses_replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_heatmap_command_rollout_and_norms(gpt2_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.png"
    invoke("heatmap", TEXT, "--model", str(gpt2_folder), "--rollout", "--layer", "0-1", "-o", str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"
    invoke("heatmap", TEXT, "--model", str(gpt2_folder), "--what", "norms", "--layer", "all", "-o", str(tmp_path / "n.svg"))
    assert (tmp_path / "n.svg").stat().st_size > 1000
    for args, said in (
        (("--rollout", "--what", "scores"), "--rollout draws the rollout"),
        (("--rollout", "--split-heads"), "one matrix for every head"),
    ):
        result = invoke("heatmap", TEXT, "--model", str(gpt2_folder), *args, "-o", str(tmp_path / "x.png"), code=None)
        assert result.exit_code == 2 and said in result.stderr and not (tmp_path / "x.png").exists()


def test_heads_reports_the_norm_share_of_the_special_tokens(bert_folder: Path) -> None:
    import json

    data = json.loads(invoke("heads", TEXT, "--model", str(bert_folder), "-F", "json", "--no-probe").stdout)
    from attn_cli.sources.checkpoint import open_checkpoint

    tokens = open_checkpoint(str(bert_folder)).tokenizer.encode(TEXT)
    special = torch.tensor(tokens.special)
    expected = transformers_norms(bert_folder, TEXT)
    for entry in data["heads"]:
        norms = expected[entry["layer"]][0][entry["head"]].double()  # (T, T)
        share = (norms[:, special].sum(-1) / norms.sum(-1)).mean().item()
        assert entry["norm_special_mass"] == pytest.approx(share, rel=1e-5)
        weights = reference_attentions(bert_folder, TEXT)[entry["layer"]][entry["head"]].double()
        assert entry["special_mass"] == pytest.approx(weights[:, special].sum(-1).mean().item(), rel=1e-5)
    # the negative control: the two shares are different numbers
    assert any(abs(e["norm_special_mass"] - e["special_mass"]) > 0.01 for e in data["heads"])
    table = invoke("heads", TEXT, "--model", str(bert_folder), "-F", "table", "--no-probe").stdout
    assert "Special tokens: weight vs what moves" in table


def test_a_saved_run_redraws_its_rollout_and_norms(gpt2_folder: Path, bert_folder: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    invoke("run", TEXT, "--model", str(gpt2_folder), "--rollout", "--norms", "-o", str(saved))
    for args in (("--rollout",), ("--what", "norms"), ("--what", "norms", "--layer", "all")):
        direct, again = tmp_path / "direct.png", tmp_path / "again.png"
        invoke("heatmap", TEXT, "--model", str(gpt2_folder), *args, "-o", str(direct))
        invoke("heatmap", "--from", str(saved), *args, "-o", str(again))
        assert direct.read_bytes() == again.read_bytes(), args
    import json

    bert_saved = tmp_path / "bert.json"  # BERT: [CLS] and [SEP] are special, so the share is a number
    invoke("run", TEXT, "--model", str(bert_folder), "--norms", "-o", str(bert_saved))
    from_file = json.loads(invoke("heads", "--from", str(bert_saved), "-F", "json").stdout)["heads"]
    direct = json.loads(invoke("heads", TEXT, "--model", str(bert_folder), "--no-probe", "-F", "json").stdout)["heads"]
    assert [h["norm_special_mass"] for h in from_file] == [h["norm_special_mass"] for h in direct]
    assert all(isinstance(h["norm_special_mass"], float) for h in direct)
    # a file without norms says so; one with a few heads cannot roll out
    plain = tmp_path / "plain.json"
    invoke("run", TEXT, "--model", str(gpt2_folder), "--head", "0", "-F", "json", "-o", str(plain))
    for args, said in ((("--what", "norms"), "holds no value-weighted norms"), (("--rollout",), "averages every head")):
        result = invoke("heatmap", "--from", str(plain), *args, "-o", str(tmp_path / "x.png"), code=None)
        assert result.exit_code == 2 and said in result.stderr, result.stderr


def test_the_python_api_computes_and_draws_them(gpt2_folder: Path) -> None:
    import attn_cli
    from attn_cli import api

    t = api.trace(TEXT, model=gpt2_folder, rollout=True, norms=True)
    assert t.rollout.through_layer == 2 and t.layers[0].norms is not None
    assert t.to_dict()["rollout"]["through_layer"] == 2
    fig = t.heatmap(what="rollout")
    assert "Attention rollout through layer 2" in fig._suptitle.get_text()
    attentions = reference_attentions(gpt2_folder, TEXT)
    outside = attn_cli.from_attentions([a[None] for a in attentions], list(t.tokens.labels), rollout=True)
    torch.testing.assert_close(outside.rollout.weights, t.rollout.weights, atol=1e-5, rtol=0)


def test_the_html_page_carries_the_rollout_and_norms(gpt2_folder: Path, tmp_path: Path) -> None:
    import numpy as np

    from html_support import chunk, manifest

    out = tmp_path / "page.html"
    invoke("html", TEXT, "--model", str(gpt2_folder), "--rollout", "--norms", "--layer", "0-1", "-o", str(out))
    html = out.read_text(encoding="utf-8")
    (m,) = manifest(html)["traces"]
    trace = checkpoint_trace(gpt2_folder, TEXT, layers=(0, 1), rollout=True, norms=True)
    assert m["rollout"]["through"] == 1 and m["rollout"]["masked"]
    fixed = chunk(html, m["rollout"]["weights"])[0]  # (T, T) uint16: 4 decimals, 0xFFFF masked
    visible = ~trace.rollout.mask.numpy()
    assert np.array_equal(fixed[visible], np.round(trace.rollout.weights.double().numpy() * 1e4)[visible].astype(np.uint16))
    for layer, entry in zip(trace.layers, m["layers"]):
        assert np.array_equal(chunk(html, entry["norms"]), layer.norms.numpy())
    plain = tmp_path / "plain.html"
    invoke("html", TEXT, "--model", str(gpt2_folder), "-o", str(plain))
    (p,) = manifest(plain.read_text(encoding="utf-8"))["traces"]
    assert p["rollout"] is None and all(entry["norms"] is None for entry in p["layers"])
