"""Tiny trained-looking checkpoints built with transformers (test-only), and
transformers' own eager attention over them as the reference.

The weights are re-drawn sharper than transformers' init (matrices std 0.25,
embeddings std 1): at std 0.02 every attention row is near uniform, and a wrong
transpose or a missing token type still matches to 1e-5.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

CORPUS = [
    "The cat sat on the mat, and the dog sat on the log.",
    "Attention is all you need; attention weights sum to one.",
    "Life is short, eat dessert first!",
    "Queries, keys and values: every head has its own.",
    "café naïve 日本語 emoji 🐈 and numbers 12345",
    "The quick brown fox jumps over the lazy dog.",
] * 4

GPT2_SIZES = dict(n_layer=3, n_head=4, n_embd=32, n_positions=64)
BERT_SIZES = dict(num_hidden_layers=3, num_attention_heads=4, hidden_size=32, intermediate_size=64, max_position_embeddings=64)
BERT_MAX_IN_FILE = 24  # tokenizer.json pads and truncates to this, as MiniLM's does at 128


def sharpen(model: torch.nn.Module, seed: int = 0) -> None:
    """Re-draw every parameter: embeddings std 1, matrices std 0.25, biases std 0.1,
    norm gains around 1."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "LayerNorm" in name or ".ln_" in name or name.startswith("ln_") or "norm.weight" in name:
                p.copy_(1 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
            elif any(key in name for key in ("wte", "wpe", "word_embeddings", "position_embeddings", "token_type", "embed_tokens")):
                p.copy_(noise)
            elif p.dim() >= 2:
                p.copy_(0.25 * noise)
            else:
                p.copy_(0.1 * noise)


def byte_level_bpe(vocab_size: int = 400) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def wordpiece(vocab_size: int = 300) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.train_from_iterator(CORPUS, trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tokenizer


LLAMA_SIZES = dict(
    num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, hidden_size=64, intermediate_size=96,
    max_position_embeddings=256,
)  # fmt: skip
LLAMA_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
BOS = {"byte_level": "<|begin_of_text|>", "metaspace": "<s>"}


def llama_tokenizer(style: str, vocab_size: int = 400) -> Any:
    """A BPE tokenizer.json with a BOS TemplateProcessing: Llama 3's byte-level kind, or
    Llama 2's Metaspace ('▁cat') with byte fallback (<0xE6>) for what it never saw."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    bos = BOS[style]
    if style == "byte_level":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        specials = [bos, "<|end_of_text|>"]
    else:
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tokenizer.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        # words split only while training, so no merge spans two words (as SentencePiece's)
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
        alphabet = []
        specials = ["<unk>", bos, "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size + len(specials), special_tokens=specials, initial_alphabet=alphabet)
    tokenizer.train_from_iterator(CORPUS, trainer)
    if style == "metaspace":
        tokenizer.pre_tokenizer = None  # Llama 2's tokenizer.json has none
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1", special_tokens=[(bos, tokenizer.token_to_id(bos))]
    )
    return tokenizer


def build_llama(folder: Path, *, model_type: str = "llama", style: str = "byte_level", seed: int = 2, **overrides: Any) -> Path:
    """A 3-layer Llama-style decoder (llama, mistral, qwen2) saved as *ForCausalLM
    (tensor names "model.*", and lm_head) with a BOS-first tokenizer.json."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = llama_tokenizer(style)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS[style], "model_max_length": 256})
    )
    config_class = getattr(transformers, LLAMA_CLASSES[model_type].replace("ForCausalLM", "Config"))
    config = config_class(
        vocab_size=tokenizer.get_vocab_size(), bos_token_id=tokenizer.token_to_id(BOS[style]), **{**LLAMA_SIZES, **overrides}
    )
    model = getattr(transformers, LLAMA_CLASSES[model_type])(config)
    sharpen(model, seed)
    model.save_pretrained(folder)
    return folder


def build_gpt2(folder: Path, *, lm_head: bool = True, seed: int = 0, **overrides: Any) -> Path:
    """A 3-layer GPT-2 saved as GPT2LMHeadModel (tensor names "transformer.*") with a
    byte-level BPE tokenizer.json, and its vocab.json + merges.txt."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_bpe()
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer.model.save(str(folder))  # vocab.json, merges.txt
    eot = tokenizer.token_to_id("<|endoftext|>")
    config = transformers.GPT2Config(
        vocab_size=tokenizer.get_vocab_size(), bos_token_id=eot, eos_token_id=eot, **{**GPT2_SIZES, **overrides}
    )
    model = (transformers.GPT2LMHeadModel if lm_head else transformers.GPT2Model)(config)
    sharpen(model, seed)
    model.save_pretrained(folder)
    return folder


def build_bert(folder: Path, *, seed: int = 1, **overrides: Any) -> Path:
    """A 3-layer BERT saved as BertModel with a WordPiece tokenizer.json that, like
    MiniLM's, pads and truncates to a fixed length; and its vocab.txt."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = wordpiece()
    tokenizer.model.save(str(folder))  # vocab.txt
    tokenizer.enable_padding(length=BERT_MAX_IN_FILE, pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
    tokenizer.enable_truncation(BERT_MAX_IN_FILE)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), **{**BERT_SIZES, **overrides})
    model = transformers.BertModel(config)
    sharpen(model, seed)
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 64}))
    return folder


@dataclasses.dataclass
class Reference:
    """transformers' eager run over one input: per layer, the attention weights
    (H, T, T), what the projections read (T, D), the heads' concat (T, D) and the
    attention block's output after W_o (T, D)."""

    weights: list[torch.Tensor]
    x: list[torch.Tensor]
    concat: list[torch.Tensor]
    output: list[torch.Tensor]


def reference(
    folder: Path, ids: tuple[int, ...], type_ids: tuple[int, ...] | None = None, dtype: torch.dtype = torch.float32
) -> Reference:
    import transformers

    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=dtype).eval()
    if hasattr(model, "layers"):  # Llama, Mistral, Qwen2
        blocks = model.layers
        x_modules = [b.input_layernorm for b in blocks]
        concat_at = [b.self_attn.o_proj for b in blocks]
        out_modules = [b.self_attn.o_proj for b in blocks]
    elif isinstance(model, transformers.GPT2Model):
        blocks = model.h
        x_modules = [b.ln_1 for b in blocks]  # output = what c_attn reads
        concat_at = [b.attn.c_proj for b in blocks]  # input = the heads' concat
        out_modules = [b.attn.c_proj for b in blocks]
    else:
        blocks = model.encoder.layer
        x_modules = None
        concat_at = [b.attention.output.dense for b in blocks]
        out_modules = [b.attention.output.dense for b in blocks]
    n = len(blocks)
    x: list[Any] = [None] * n
    concat: list[Any] = [None] * n
    output: list[Any] = [None] * n
    hooks = []
    for i in range(n):
        hooks.append(concat_at[i].register_forward_hook(lambda m, a, o, i=i: concat.__setitem__(i, a[0][0].detach())))
        hooks.append(out_modules[i].register_forward_hook(lambda m, a, o, i=i: output.__setitem__(i, o[0].detach())))
        if x_modules is not None:
            hooks.append(x_modules[i].register_forward_hook(lambda m, a, o, i=i: x.__setitem__(i, o[0].detach())))
        else:
            hooks.append(
                blocks[i].register_forward_pre_hook(
                    lambda m, a, kw, i=i: x.__setitem__(i, (a[0] if a else kw["hidden_states"])[0].detach()),
                    with_kwargs=True,
                )
            )
    kwargs: dict[str, Any] = {"input_ids": torch.tensor([ids])}
    if type_ids is not None:
        kwargs["token_type_ids"] = torch.tensor([type_ids])
    with torch.no_grad():
        result = model(**kwargs, output_attentions=True)
    for hook in hooks:
        hook.remove()
    return Reference([a[0] for a in result.attentions], x, concat, output)


def with_reference(folder: Path, text: str, pair: str | None = None) -> tuple[Any, Any, Reference]:
    """attn-cli's checkpoint opened on ``folder``, its tokens for ``text`` (and ``pair``),
    and transformers' reference run over those tokens."""
    from attn_cli.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(text, pair)
    return ckpt, tokens, reference(folder, tokens.ids, tokens.type_ids if pair is not None else None)


def shard(folder: Path, target: Path, groups: list[list[str]]) -> Path:
    """Copy ``folder`` to ``target`` with its model.safetensors split into shards: one
    per group of name fragments (a tensor goes to the first group with a fragment in
    its name; the rest to the last shard), and a model.safetensors.index.json."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, target)
    tensors = load_file(str(target / "model.safetensors"))
    (target / "model.safetensors").unlink()
    parts: list[dict[str, torch.Tensor]] = [{} for _ in range(len(groups) + 1)]
    for name, tensor in tensors.items():
        index = next((g for g, group in enumerate(groups) if any(f in name for f in group)), len(groups))
        parts[index][name] = tensor
    weight_map = {}
    total = len(parts)
    for number, part in enumerate(parts, start=1):
        file = f"model-{number:05d}-of-{total:05d}.safetensors"
        save_file(part, str(target / file), metadata={"format": "pt"})
        weight_map.update({name: file for name in part})
    (target / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return target


def built(factory: Any, name: str, builder: Any, **kwargs: Any) -> Path:
    """``builder(folder, **kwargs)`` once per test session, shared by every module
    (tests that change a checkpoint copy it first)."""
    folder = factory.getbasetemp() / f"checkpoint-{name}"
    if not (folder / "config.json").is_file():
        builder(folder, **kwargs)
    return folder


# -- bugs for the negative controls: each changes one thing the comparison must catch


def patch_layers(monkeypatch: Any, change: Any) -> None:
    """Every layer the engine computes is replaced by ``change(layer)``'s fields, before
    its output feeds the next layer (as a bug in the layer step itself would)."""
    from attn_cli.checkpoint.families import base

    original = base.multi_head

    def patched(*args: Any, **kwargs: Any) -> Any:
        layer = original(*args, **kwargs)
        return dataclasses.replace(layer, **change(layer))

    monkeypatch.setattr(base, "multi_head", patched)


def x_of_the_layer_before(monkeypatch: Any) -> None:
    """x recorded from the block before (a hook on the wrong block); the weights stay right."""
    before: list[torch.Tensor] = []

    def change(layer: Any) -> dict[str, Any]:
        shown = before[-1] if before else layer.x
        before.append(layer.x)
        return {"x": shown}

    patch_layers(monkeypatch, change)


def heads_joined_without_the_transpose(monkeypatch: Any) -> None:
    """(H, T, Dv) flattened straight to (T, H*Dv): every row mixes tokens; W_o reads that."""

    def change(layer: Any) -> dict[str, Any]:
        concat = layer.context.reshape(layer.x.shape[0], -1)  # (H, T, Dv) -> (T, H*Dv), tokens mixed
        return {"concat": concat, "output": layer.projections.out(concat)}

    patch_layers(monkeypatch, change)


def w_o_untransposed(monkeypatch: Any) -> None:
    """W_o (D, H*Dv) applied as if stored (in, out): concat @ W_o instead of concat @ W_o^T."""

    def change(layer: Any) -> dict[str, Any]:
        out = layer.projections.out
        output = layer.concat @ out.weight  # (T, H*Dv) @ (D, H*Dv), square here
        return {"output": output + out.bias if out.bias is not None else output}

    patch_layers(monkeypatch, change)


def without_bias(monkeypatch: Any, family: type, role: str) -> None:
    """``family``'s projections lose one bias (role: query, key, value or out)."""
    original = family.projections

    def projections(self: Any, t: Any) -> Any:
        made = original(self, t)
        linear = getattr(made, role)
        return dataclasses.replace(made, **{role: type(linear)(linear.weight, None)})

    monkeypatch.setattr(family, "projections", projections)


LAYER_BUGS = {
    # name: (the bug, the first field and layer the comparison must flag)
    "x-of-the-layer-before": (x_of_the_layer_before, "layer 1 x"),
    "heads-joined-without-transpose": (heads_joined_without_the_transpose, "layer 0 concat"),
    "w_o-untransposed": (w_o_untransposed, "layer 0 output"),
}
