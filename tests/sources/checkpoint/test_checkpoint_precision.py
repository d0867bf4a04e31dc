"""--dtype bfloat16 and float16 for every model_type the registry knows (one checkpoint each,
``checkpoints.ONE_PER_MODEL_TYPE``): each layer's weights, x, concat and output equal to
transformers' eager run in that dtype bit for bit, on the CPU (tests/runtime/test_cuda.py does
the same on a GPU). Half precision rounds where each family's code rounds: scores multiplied
by its scaling or divided, the softmax in float32 or in the scores' dtype, the rotation in
float32 or in the heads' dtype; a negative control for each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

from attn_cli.sources.checkpoint.families import base, decoder, modernbert, olmo2

FAMILIES, PAIRS = checkpoints.ONE_PER_MODEL_TYPE, checkpoints.ONE_PER_PAIR_TYPE


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """Both sides on one thread: a CPU's half-precision sums can change with the thread count
    (MKL may take fewer threads on a busy machine), and the comparisons are to the bit. The
    CLI's runs of these tiny models take one thread anyway (``runtime.threads.threads_for``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.one_per_type(tmp_path_factory)


def test_the_tables_name_every_model_type_the_registry_knows() -> None:
    from attn_cli.sources.checkpoint import registry

    assert (set(FAMILIES), set(PAIRS)) == (set(registry.MODEL_TYPES), set(registry.SEQ2SEQ_TYPES))


def assert_bits(folders: Any, name: str, dtype: str) -> None:
    folder, text = folders(name), FAMILIES[name][2]
    _, tokens, layers = checkpoints.traced(folder, text, dtype=dtype)
    checkpoints.assert_matches(layers, checkpoints.reference(folder, tokens.ids, dtype=getattr(torch, dtype)), tol=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_half_precision_equals_transformers_bit_for_bit(name: str, dtype: str, folders: Any) -> None:
    assert_bits(folders, name, dtype)


def pair_json(folders: Any, name: str, dtype: str) -> dict[str, Any]:
    args = ("run", "The cat sat on the mat.", "--model", str(folders(name)), "--target", "the dog sat on the log")
    return dict(json.loads(invoke(*args, "--dtype", dtype, "-F", "json").stdout))


def assert_pair_bits(folders: Any, name: str, dtype: str) -> None:
    import transformers

    data = pair_json(folders, name, dtype)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folders(name), attn_implementation="eager", dtype=getattr(torch, dtype))
    source, target = [[t["id"] for t in data[key]] for key in ("tokens", "target_tokens")]
    with torch.inference_mode():
        out = model.eval()(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]), output_attentions=True)
    for key, stack in (("layers", out.encoder_attentions), ("decoder_layers", out.decoder_attentions), ("cross_layers", out.cross_attentions)):
        for layer, expected in zip(data[key], stack, strict=True):
            got = torch.tensor([head["weights"] for head in layer["heads"]])  # (H, T, S)
            assert torch.equal(got, expected[0].float()), (key, layer["layer"])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_an_encoder_decoders_json_in_half_precision_is_transformers(name: str, dtype: str, folders: Any) -> None:
    """`run --target --dtype D -F json`: the three stacks' weights as transformers' in D, to the
    bit (JSON writes each float32 exactly)."""
    assert_pair_bits(folders, name, dtype)


# -- negative controls: each rounding in the other place fails the comparison ---------------


def test_dividing_where_transformers_multiplies_fails_in_float16(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama multiplies its scores by head_dim ** -0.5 (8 ** -0.5 here, not a power of two)."""
    monkeypatch.setattr(decoder.Decoder, "score_scale", base.Family.score_scale)
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_bits(folders, "llama", "float16")


@pytest.mark.parametrize(("name", "family"), [("olmo2", olmo2.Olmo2), ("modernbert", modernbert.ModernBert)])
def test_a_rotation_rounded_as_llamas_fails(name: str, family: type, folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """OLMo 2 turns in float32 with float32 cos and sin; ModernBERT with cos and sin rounded
    first; Llama rounds cos and sin and turns in the heads' dtype."""
    monkeypatch.setattr(family, "rotary_precision", "dtype")
    with pytest.raises(AssertionError, match="layer 0 weights"):
        assert_bits(folders, name, "bfloat16")


def test_a_float32_softmax_where_transformers_takes_it_in_float16_fails(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Marian (as BART, GPT-2 and BERT) calls softmax on the float16 scores themselves. Whether
    that rounds apart from float32's softmax rounded back depends on the processor's kernel and
    the scores (one cell of Marian's here; none on some processors): where the two softmaxes
    give these scores the same bits, there is nothing for the comparison to see."""
    from attn_cli.sources.checkpoint.families import bart

    in_dtype = pair_json(folders, "marian", "float16")
    monkeypatch.setattr(bart.Bart, "softmax_upcast", True)
    if pair_json(folders, "marian", "float16") == in_dtype:
        pytest.skip("this processor's float16 softmax rounds Marian's scores as float32's softmax rounded back")
    with pytest.raises(AssertionError, match="layers"):
        assert_pair_bits(folders, "marian", "float16")


def test_the_precision_table_builds_what_it_names(folders: Any) -> None:
    """Each checkpoint of the table is the model_type it is listed under."""
    for name in (*FAMILIES, *PAIRS):
        config = json.loads((Path(folders(name)) / "config.json").read_text())
        assert config["model_type"] == name
