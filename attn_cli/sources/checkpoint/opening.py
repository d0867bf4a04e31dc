"""Opening a trained checkpoint (``--model``): the folder found, config.json read once, the
weights' headers checked against each stack's config, the tokenizer loaded and what the model
is (``ModelInfo``) written down, for a model of one stack (``Checkpoint``) and an
encoder-decoder (``PairCheckpoint``) alike. Nothing but headers is read until a trace runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from attn_cli.records.about import About
from attn_cli.records.trace import ModelInfo
from attn_cli.runtime.errors import ModelUnavailable, UsageError
from attn_cli.sources.checkpoint.files import Found, WeightReader, find
from attn_cli.sources.checkpoint.model import DEVICES, DTYPES, Checkpoint
from attn_cli.sources.checkpoint.pair import PairCheckpoint
from attn_cli.sources.checkpoint.marian import MarianTokenizer
from attn_cli.sources.checkpoint.tokenizer import CheckpointTokenizer, load_tokenizer

if TYPE_CHECKING:
    from attn_cli.sources.checkpoint.families import Family


@overload
def open_checkpoint(
    spec: str, *, revision: str | None = ..., dtype: str = ..., device: str = ..., found: Found | None = ..., pairs: Literal[False] = False
) -> Checkpoint: ...


@overload
def open_checkpoint(
    spec: str, *, revision: str | None = ..., dtype: str = ..., device: str = ..., found: Found | None = ..., pairs: bool
) -> Checkpoint | PairCheckpoint: ...


def open_checkpoint(
    spec: str, *, revision: str | None = None, dtype: str = "float32", device: str = "cpu", found: Found | None = None,
    pairs: bool = False,
) -> Checkpoint | PairCheckpoint:
    """Open the checkpoint ``spec`` names (a folder, or ORG/NAME in the Hugging Face
    cache) without loading its weights: a model of one stack as a ``Checkpoint``, and with
    ``pairs`` an encoder-decoder as a ``PairCheckpoint`` (the same families, files and
    layer loop, with two inputs and three stacks). ``dtype`` (float32, bfloat16, float16)
    is what the weights and activations are computed in, as transformers' eager attention
    does for that dtype; ``device`` is cpu or cuda. Raises ModelUnavailable (exit 3) when
    its files are missing, unsupported, pickled or damaged, UsageError for a dtype or
    device that is not there."""
    from attn_cli.sources.checkpoint.families import family_for
    from attn_cli.sources.checkpoint.families.classifier import classifier_for
    from attn_cli.sources.checkpoint.registry import is_seq2seq, text_config

    check_dtype_device(dtype, device)
    found = found or find(spec, revision)  # ``found``: what opening the source found already
    located, config = found.located, found.config
    folder = located.folder
    if pairs and is_seq2seq(config):
        return open_pair_checkpoint(spec, found, dtype, device)
    family = family_for(config, str(folder / "config.json"))
    weights = open_weights(found, (family,), dtype, device)
    tokenizer = load_tokenizer(
        folder, located.name, family=family.family, max_positions=family.max_positions, pairs=family.encoder
    )
    info = model_info(spec, found, family, dtype)
    classifier = classifier_for(family, config, weights)
    return Checkpoint(info, family, weights, tokenizer, eos_ids(folder, text_config(config)), classifier)


def open_weights(found: Found, stacks: Sequence[Family], dtype: str, device: str) -> WeightReader:
    """The weights of ``found``'s folder, read in ``dtype`` onto ``device``, their prefix found
    from the first stack's anchor and every stack's tensor shapes checked against its config
    from the headers (a config that disagrees with its tensors stops here)."""
    import torch

    weights = WeightReader(found.located.folder, dtype=getattr(torch, dtype), device=device)
    weights.find_prefix(stacks[0].anchor, stacks[0].family)
    for stack in stacks:
        stack.check_shapes(weights)
    return weights


def model_info(spec: str, found: Found, family: Family, dtype: str, **more: Any) -> ModelInfo:
    """What a trained model is, for every view: ``family``'s sizes (an encoder-decoder's
    encoder's; ``more`` adds its decoder's), the files it came from and config.json's names."""
    from attn_cli.sources.checkpoint.registry import text_config

    config, located = found.config, found.located
    architectures = config.get("architectures") or text_config(config).get("architectures") or []
    return ModelInfo(
        source=spec,
        architecture=str(architectures[0] if architectures else config.get("model_type")),
        family=family.family,
        model_type=str(text_config(config).get("model_type")),
        layers=family.layers,
        heads=family.heads,
        kv_heads=family.kv_heads,
        head_dim=family.head_dim,
        d_model=family.d_model,
        dtype=dtype,
        revision=located.revision,
        path=str(located.folder),
        max_positions=family.max_positions,
        qkv_bias=getattr(family, "qkv_bias", True),
        out_proj=True,
        input_text=family.input_text,
        anatomy=family.anatomy(),
        about=About(),  # a trained model's: every row says what the fields above hold
        **more,
    )  # fmt: skip


def check_dtype_device(dtype: str, device: str) -> None:
    """UsageError for a ``dtype`` or ``device`` attn-cli does not compute in, or a device that is not there."""
    import torch

    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype}: choose one of {', '.join(DTYPES)}")
    if device not in DEVICES:
        raise UsageError(f"--device {device}: choose one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here (or was built without CUDA); use --device cpu")


def eos_ids(folder: Path, config: dict[str, Any]) -> frozenset[int]:
    """The end-of-sequence ids: generation_config.json's eos_token_id, else config.json's
    (an id or a list of them); none when neither says."""
    import json

    found: Any = None
    generation = folder / "generation_config.json"
    if generation.is_file():
        try:
            found = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            found = None
    if found is None:
        found = config.get("eos_token_id")
    values = found if isinstance(found, list) else [found]
    return frozenset(int(v) for v in values if isinstance(v, int) and not isinstance(v, bool))


def open_pair_checkpoint(spec: str, found: Found, dtype: str, device: str) -> PairCheckpoint:
    """The encoder-decoder ``found`` holds (``open_checkpoint`` with ``pairs``): both stacks'
    families, their weights and shapes, the tokenizer (Marian's two SentencePiece models)."""
    from attn_cli.sources.checkpoint.families import encoder_decoder

    located, config = found.located, found.config
    folder = located.folder
    model = encoder_decoder(config)
    encoder, decoder = model.encoder, model.decoder
    weights = open_weights(found, (encoder, decoder), dtype, device)
    tokenizer: CheckpointTokenizer | MarianTokenizer
    if encoder.family == "marian":  # source.spm and target.spm through vocab.json, as MarianTokenizer
        tokenizer = MarianTokenizer(folder, located.name, separate_vocabs=_separate_vocabs(folder), max_positions=encoder.max_positions)
    else:
        tokenizer = load_tokenizer(folder, located.name, family=encoder.family, max_positions=encoder.max_positions, pairs=False)
    info = model_info(
        spec, found, encoder, dtype, decoder_layers=decoder.layers, decoder_heads=decoder.heads, decoder_head_dim=decoder.head_dim
    )  # fmt: skip
    return PairCheckpoint(info, model, weights, tokenizer, eos_ids(folder, config))


def _separate_vocabs(folder: Path) -> bool:
    """tokenizer_config.json's ``separate_vocabs`` (Marian: the target has its own target_vocab.json)."""
    import json

    path = folder / "tokenizer_config.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError):
        raise ModelUnavailable(f"{path} is not readable JSON; fetch the model's files again") from None
    return bool(isinstance(settings, dict) and settings.get("separate_vocabs"))

