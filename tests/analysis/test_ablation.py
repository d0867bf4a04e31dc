"""heads --ablate zero|mean: each head's change in mean next-token loss against transformers
with a forward pre-hook on GPT-2's attn.c_proj / Llama's self_attn.o_proj that replaces the
head's slice of its input, to 1e-4 of the loss; the outputs and the refusals."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.pipeline import open_source

TEXT = "the quick brown fox jumps over the lazy dog and the cat"


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # grouped-query (8 heads, 2 key/value heads), tied head
    return checkpoints.built(tmp_path_factory, "ablation-llama", checkpoints.build_llama, tie_word_embeddings=True)


def hooked_deltas(folder: Path, ids: list[int], method: str, shift: int = 0) -> tuple[float, dict[tuple[int, int], float]]:
    """transformers' clean loss and, per (layer, head), the loss change with a pre-hook on W_o
    that replaces head (h + shift) % H's slice of its input (shift 0: the head itself)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    blocks, path = (model.transformer.h, "attn.c_proj") if hasattr(model, "transformer") else (model.model.layers, "self_attn.o_proj")
    heads = model.config.num_attention_heads
    d_v = model.config.hidden_size // heads if not getattr(model.config, "head_dim", None) else model.config.head_dim
    batch = torch.tensor([ids])
    with torch.no_grad():
        clean = model(batch, labels=batch).loss.item()
    deltas = {}
    for layer, block in enumerate(blocks):
        for h in range(heads):
            cut = slice(((h + shift) % heads) * d_v, ((h + shift) % heads + 1) * d_v)

            def replace(module: Any, args: Any, cut: slice = cut) -> Any:
                x = args[0].clone()  # (1, T, H*Dv)
                x[..., cut] = 0.0 if method == "zero" else args[0][..., cut].mean(dim=1, keepdim=True)
                return (x,)

            handle = block.get_submodule(path).register_forward_pre_hook(replace)
            with torch.no_grad():
                deltas[(layer, h)] = model(batch, labels=batch).loss.item() - clean
            handle.remove()
    return clean, deltas


def ablation_json(folder: Path, method: str) -> dict[str, Any]:
    return json.loads(invoke("heads", TEXT, "--model", str(folder), "--ablate", method, "--no-probe", "-F", "json").stdout)


def assert_deltas(data: dict[str, Any], clean: float, expected: dict[tuple[int, int], float]) -> None:
    tolerance = 1e-4 * max(1.0, abs(clean))  # relative to the loss's size
    assert data["ablation"]["clean_loss"] == pytest.approx(clean, abs=tolerance)
    for entry in data["heads"]:
        assert entry["ablation_loss_delta"] == pytest.approx(expected[(entry["layer"], entry["head"])], abs=tolerance), entry


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("method", ["zero", "mean"])
def test_deltas_equal_transformers_with_a_hook(name: str, method: str, gpt2_folder: Path, llama_folder: Path) -> None:
    folder = gpt2_folder if name == "gpt2" else llama_folder
    data = ablation_json(folder, method)
    assert data["ablation"]["method"] == method
    ids = [t["id"] for t in data["tokens"]]
    clean, expected = hooked_deltas(folder, ids, method)
    assert max(abs(v) for v in expected.values()) > 0.05  # heads that matter: a wrong head would show
    assert_deltas(data, clean, expected)
    if name == "gpt2" and method == "zero":  # the negative control: the neighbouring head's slice
        _, shifted = hooked_deltas(folder, ids, method, shift=1)
        with pytest.raises(AssertionError):
            assert_deltas(data, clean, shifted)


def test_outputs_table_csv_and_picture(gpt2_folder: Path, tmp_path: Path) -> None:
    data = ablation_json(gpt2_folder, "zero")
    best = max(data["heads"], key=lambda h: h["ablation_loss_delta"])
    table = invoke("heads", TEXT, "--model", str(gpt2_folder), "--ablate", "zero", "--no-probe", "-F", "table").stdout
    assert "Heads that matter (zero ablation)" in table
    after = table.split("Heads that matter")[1]
    assert f"L{best['layer']}H{best['head']}" in after.splitlines()[4]  # the first row under the header
    rows = list(csv.DictReader(io.StringIO(invoke("heads", TEXT, "--model", str(gpt2_folder), "--ablate", "zero", "--no-probe", "-F", "csv").stdout)))
    assert float(rows[0]["ablation_loss_delta"]) == data["heads"][0]["ablation_loss_delta"]
    plain = invoke("heads", TEXT, "--model", str(gpt2_folder), "--no-probe", "-F", "csv").stdout
    assert "ablation_loss_delta" not in plain.splitlines()[0]
    picture = tmp_path / "ablation.png"
    assert invoke("heads", TEXT, "--model", str(gpt2_folder), "--ablate", "mean", "-o", str(picture)).stdout.strip() == str(picture)
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_ablation_figure_draws_the_deltas(gpt2_folder: Path) -> None:
    import numpy as np

    from attn_cli.analysis.effects import Ablation
    from attn_cli.analysis.headroles import HeadsReport
    from attn_cli.render.picture.heads import ablation_figure
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.sources.toy.config import Config

    trace = open_source(SourceSpec(Config(), model=str(gpt2_folder))).run(TEXT)
    deltas = ((0.5, -0.25, 0.0, 1.0), (0.1, 0.2, 0.3, 0.4), (-1.0, 0.0, 0.0, 0.0))
    fig = ablation_figure(HeadsReport(trace, (), None, ablation=Ablation("zero", 3.0, deltas)))
    (image,) = [im for ax in fig.axes for im in ax.images]
    assert np.array_equal(np.asarray(image.get_array()), np.array(deltas)) and image.norm.vmin == -1.0 and image.norm.vmax == 1.0


def test_refusals(gpt2_folder: Path, tmp_path: Path) -> None:
    assert "--ablate needs a trained model" in invoke("heads", TEXT, "-t", "words", "--ablate", "zero", code=2).stderr
    result = invoke("heads", TEXT, "--model", str(gpt2_folder), "-o", str(tmp_path / "x.png"), code=2)
    assert "add --ablate" in result.stderr and not (tmp_path / "x.png").exists()


def test_an_encoder_is_refused(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = checkpoints.built(tmp_path_factory, "ablation-bert-mlm", checkpoints.build_encoder, model_type="bert")
    result = invoke("heads", TEXT, "--model", str(folder), "--ablate", "zero", code=2)
    assert "is an encoder" in result.stderr and result.stderr.count("\n") == 1


TARGET = "the dog sat on the log"
PAIR_MODULES = {  # where each stack's W_o is, per family: (layers of the stack, W_o's path in a layer)
    "t5": {"encoder": ("encoder.block", "layer.0.SelfAttention.o"), "decoder": ("decoder.block", "layer.0.SelfAttention.o"),
           "cross": ("decoder.block", "layer.1.EncDecAttention.o")},
    "bart": {"encoder": ("model.encoder.layers", "self_attn.out_proj"), "decoder": ("model.decoder.layers", "self_attn.out_proj"),
             "cross": ("model.decoder.layers", "encoder_attn.out_proj")},
}  # fmt: skip


@pytest.fixture(scope="module")
def pair_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        "t5": checkpoints.built(tmp_path_factory, "ablation-t5", checkpoints.build_t5, feed_forward_proj="gated-gelu"),
        "bart": checkpoints.built(tmp_path_factory, "ablation-bart", checkpoints.build_bart),
    }


def hooked_pair_deltas(
    folder: Path, name: str, stack: str, source: list[int], decoder: list[int], method: str, shift: int = 0
) -> tuple[float, dict[tuple[int, int], float]]:
    """transformers' target loss (its seq2seq loss: the labels, teacher-forced) and, per (layer,
    head) of ``stack``, its change with a pre-hook on that stack's W_o replacing head (h + shift) % H's slice."""
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    labels = tokenizer(text_target=TARGET)["input_ids"]
    assert labels[:-1] == decoder[1:]  # the decoder's inputs are the labels shifted right
    inputs = dict(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]), labels=torch.tensor([labels]))
    with torch.no_grad():
        clean = model(**inputs).loss.item()
    blocks, path = PAIR_MODULES[name][stack]
    deltas = {}
    for layer, block in enumerate(model.get_submodule(blocks)):
        out = block.get_submodule(path)
        heads = model.config.num_heads if name == "t5" else getattr(model.config, f"{'encoder' if stack == 'encoder' else 'decoder'}_attention_heads")
        d_v = out.in_features // heads
        for h in range(heads):
            cut = slice(((h + shift) % heads) * d_v, ((h + shift) % heads + 1) * d_v)

            def replace(module: Any, args: Any, cut: slice = cut) -> Any:
                x = args[0].clone()  # (1, N, H*Dv)
                x[..., cut] = 0.0 if method == "zero" else args[0][..., cut].mean(dim=1, keepdim=True)
                return (x,)

            handle = out.register_forward_pre_hook(replace)
            with torch.no_grad():
                deltas[(layer, h)] = model(**inputs).loss.item() - clean
            handle.remove()
    return clean, deltas


@pytest.mark.parametrize(
    ("name", "stack", "method"),
    [("t5", "encoder", "zero"), ("t5", "decoder", "mean"), ("t5", "cross", "zero"), ("bart", "encoder", "mean"),
     ("bart", "decoder", "zero"), ("bart", "cross", "mean")],
)  # fmt: skip
def test_an_encoder_decoders_heads_equal_transformers_with_a_hook(name: str, stack: str, method: str, pair_folders) -> None:
    """Each stack's heads of BART and T5, ablated through the one layer loop, against transformers'
    seq2seq loss with a hook on that stack's W_o (it was a traceback, then a refusal)."""
    folder = pair_folders[name]
    args = ("heads", TEXT, "--model", str(folder), "--target", TARGET, "--stack", stack, "--ablate", method, "--no-probe", "-F", "json")
    data = json.loads(invoke(*args).stdout)
    ran = json.loads(invoke("run", TEXT, "--model", str(folder), "--target", TARGET, "-F", "json").stdout)
    source, decoder = [t["id"] for t in ran["tokens"]], [t["id"] for t in ran["target_tokens"]]
    clean, expected = hooked_pair_deltas(folder, name, stack, source, decoder, method)
    assert max(abs(v) for v in expected.values()) > 0.01  # heads that matter: a wrong head would show
    assert len(data["heads"]) == len(expected)
    assert_deltas(data, clean, expected)
    if method == "zero":  # the negative control: the neighbouring head's slice
        _, shifted = hooked_pair_deltas(folder, name, stack, source, decoder, method, shift=1)
        with pytest.raises(AssertionError):
            assert_deltas(data, clean, shifted)


def test_an_ablation_that_cannot_fit_is_refused_first(gpt2_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.sources.checkpoint import open_checkpoint
    from attn_cli.sources.checkpoint.families import ablation

    checkpoint = open_checkpoint(str(gpt2_folder))
    tokens = checkpoint.tokenizer.encode(TEXT)
    need = sum(checkpoint.estimate_bytes(len(tokens), [2], "weights", predict=True).values())
    real = ablation.ablated_losses
    ran: list[bool] = []
    monkeypatch.setattr(ablation, "ablated_losses", lambda *a, **k: ran.append(True) or real(*a, **k))
    monkeypatch.setattr(budget, "available_bytes", lambda: int(need / budget.SHARE) - 1)  # just short of the forward's needs
    with pytest.raises(TooLargeError, match="^this ablation needs about"):
        checkpoint.ablate(tokens, "zero")
    assert not ran
    monkeypatch.setattr(budget, "available_bytes", lambda: 100 * need)  # the negative control: room enough, it runs
    checkpoint.ablate(tokens, "zero")
    assert ran


def test_an_encoder_decoders_ablation_picture_names_the_stack_and_the_target(pair_folders, tmp_path: Path) -> None:
    """The picture says whose heads and whose loss: the stack and the target (a decoder's says its
    text's next-token loss: the control)."""
    import dataclasses

    from PIL import Image

    from attn_cli.analysis.effects import Ablation
    from attn_cli.analysis.headroles import HeadsReport
    from attn_cli.render.picture.heads import ablation_figure
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.sources.toy.config import Config

    trace = open_source(SourceSpec(Config(), model=str(pair_folders["t5"]), target=TARGET)).run(TEXT).in_stack("encoder")
    deltas = tuple((0.1,) * trace.model.heads for _ in range(trace.model.layers))
    title = ablation_figure(HeadsReport(trace, (), None, ablation=Ablation("zero", 3.0, deltas)))._suptitle.get_text()
    assert "of encoder self-attention" in title and f"target loss change on “{TARGET}”" in title and "next-token" not in title
    out = tmp_path / "t5.png"
    invoke("heads", TEXT, "--model", str(pair_folders["t5"]), "--target", TARGET, "--ablate", "zero", "-o", str(out))
    assert Image.open(out).size[0] > 100  # the command writes it
    one_stack = dataclasses.replace(trace, view=None)  # as a model of one stack's trace
    decoder_only = ablation_figure(HeadsReport(one_stack, (), None, ablation=Ablation("zero", 3.0, deltas)))._suptitle.get_text()
    assert "next-token loss change" in decoder_only


def test_an_encoder_decoder_ablation_that_cannot_fit_is_refused_first(pair_folders, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.sources.checkpoint.families import ablation
    from attn_cli.sources.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(str(pair_folders["t5"]), pairs=True)
    source, labels = checkpoint.tokenizer.encode(TEXT), checkpoint.encode_target(TARGET)
    decoder = checkpoint.decoder_tokens(labels)
    need = sum(checkpoint.estimate_bytes(len(source), len(decoder), "weights", predict=True).values())
    real = ablation.ablated_pair_losses
    ran: list[bool] = []
    monkeypatch.setattr(ablation, "ablated_pair_losses", lambda *a, **k: ran.append(True) or real(*a, **k))
    monkeypatch.setattr(budget, "available_bytes", lambda: int(need / budget.SHARE) - 1)  # just short of the forwards' needs
    with pytest.raises(TooLargeError, match="^this ablation needs about"):
        checkpoint.ablate(source, decoder, labels.ids, "zero", "encoder")
    assert not ran
    monkeypatch.setattr(budget, "available_bytes", lambda: 100 * need)  # the negative control: room enough, it runs
    assert len(checkpoint.ablate(source, decoder, labels.ids, "zero", "encoder").deltas) == checkpoint.info.layers
    assert ran


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_blocked_losses_equal_cross_entropy(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """next_token_losses works each block of logits in place, in a buffer kept between calls:
    with blocks of 7 rows over 3 texts of 10 tokens (27 rows: blocks of 7, 7, 7, 6) and a second
    call reusing the first's buffer, each text's loss is F.cross_entropy's."""
    from attn_cli.analysis import effects

    vocab, n, texts = 50, 10, 3
    monkeypatch.setattr(effects, "LOSS_BLOCK_BYTES", 7 * 4 * vocab)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (n,), generator=generator).tolist()
    weight = (torch.randn(vocab, 16, generator=generator) * 3).to(dtype)  # sharp: large logits, where a missing max would overflow

    def expected(hidden: torch.Tensor) -> list[float]:
        logits = (hidden.reshape(-1, 16) @ weight.t()).float().reshape(texts, n, vocab)
        return [torch.nn.functional.cross_entropy(logits[b, :-1], torch.tensor(ids[1:])).item() for b in range(texts)]

    scratch: list[torch.Tensor] = []
    made: list[torch.Tensor] = []
    for _ in range(2):
        hidden = (torch.randn(texts, n, 16, generator=generator) * 3).to(dtype)
        flat = hidden.reshape(-1, 16)

        def logits_of(rows: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
            result = flat[rows] @ weight.t() if out is None else torch.mm(flat[rows], weight.t(), out=out)
            made.append(result)
            return result

        got = effects.next_token_losses(logits_of, ids, texts, vocab, scratch)
        assert got == pytest.approx(expected(hidden), rel=1e-5 if dtype == torch.float32 else 1e-3)
    assert [len(block) for block in made] == [7, 7, 7, 6] * 2
    assert all(block.data_ptr() == made[0].data_ptr() for block in made)  # one buffer, every block, both calls
