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
            if "LayerNorm" in name or "layernorm" in name or ".ln_" in name or name.startswith("ln_") or "norm.weight" in name:
                p.copy_(1 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
            elif any(
                key in name
                for key in ("wte", "wpe", "word_embeddings", "position_embeddings", "token_type", "embed_tokens", "embed_in", "tok_embeddings",
                            "relative_attention_bias", "shared.weight", "embed_positions")
            ):  # fmt: skip
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


def wordpiece(vocab_size: int = 300, style: str = "bert") -> Any:
    """A WordPiece tokenizer.json: BERT's ([PAD] 0, [CLS] A [SEP]), or MPNet's kind
    (<s> 0, <pad> 1, </s> 2: <s> A </s>)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] if style == "bert" else ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]
    first, last = ("[CLS]", "[SEP]") if style == "bert" else ("<s>", "</s>")
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials)
    tokenizer.train_from_iterator(CORPUS, trainer)
    ids = [(first, tokenizer.token_to_id(first)), (last, tokenizer.token_to_id(last))]
    pair = f"{first} $A {last} $B:1 {last}:1" if style == "bert" else f"{first} $A {last} {last} $B {last}"
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{first} $A {last}", pair=pair, special_tokens=ids)
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


def build_llama(
    folder: Path, *, model_type: str = "llama", style: str = "byte_level", seed: int = 2, cls: str | None = None, **overrides: Any
) -> Path:
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
    model = getattr(transformers, cls or LLAMA_CLASSES[model_type])(config)
    sharpen(model, seed)
    model.save_pretrained(folder)
    return folder


def build_gpt2(folder: Path, *, lm_head: bool = True, seed: int = 0, cls: str | None = None, **overrides: Any) -> Path:
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
    model = (getattr(transformers, cls) if cls else transformers.GPT2LMHeadModel if lm_head else transformers.GPT2Model)(config)
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
    folder: Path,
    ids: tuple[int, ...],
    type_ids: tuple[int, ...] | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Reference:
    """transformers' eager run of ``folder`` over ``ids`` in ``dtype`` on ``device``: each
    layer's attention weights and what its projections read, its heads' concat and W_o's
    output, on the CPU in the run's dtype."""
    import transformers

    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=dtype).to(device).eval()
    if hasattr(model, "layers"):  # the rotary decoders
        blocks = model.layers
    elif isinstance(model, transformers.GPT2Model):
        blocks = model.h
    elif hasattr(model, "transformer"):  # DistilBERT
        blocks = model.transformer.layer
    else:  # BERT, RoBERTa, MPNet
        blocks = model.encoder.layer
    # what the projections read: a pre-norm's output (ln_1 of GPT-2: what c_attn reads), else the block's input
    norms = [next((getattr(b, n) for n in ("input_layernorm", "ln_1", "attn_norm") if hasattr(b, n)), None) for b in blocks]
    x_modules = None if norms[0] is None else norms
    # W_o: its input is the heads' concat, its output the attention block's output
    out_paths = (
        "self_attn.o_proj", "attention.dense", "attn.c_proj", "attention.output.dense", "attention.out_lin", "attention.attn.o",
        "attn.Wo",
    )  # fmt: skip
    out_modules = [next(b.get_submodule(p) for p in out_paths if _has(b, p)) for b in blocks]
    concat_at = out_modules
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
    kwargs: dict[str, Any] = {"input_ids": torch.tensor([ids], device=device)}
    if type_ids is not None:
        kwargs["token_type_ids"] = torch.tensor([type_ids], device=device)
    with torch.no_grad():
        result = model(**kwargs, output_attentions=True)
    for hook in hooks:
        hook.remove()
    cpu = [[t.cpu() for t in tensors] for tensors in ([a[0] for a in result.attentions], x, concat, output)]
    return Reference(*cpu)


def _has(module: Any, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def with_reference(folder: Path, text: str, pair: str | None = None) -> tuple[Any, Any, Reference]:
    """attn-cli's checkpoint opened on ``folder``, its tokens for ``text`` (and ``pair``),
    and transformers' reference run over those tokens."""
    from attn_cli.sources.checkpoint import open_checkpoint

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


def folder_maker(factory: Any, prefix: str, builder: Any, table: dict[str, Any], aliases: dict[str, str] | None = None) -> Any:
    """name -> the checkpoint ``builder`` makes from ``table[name][0]``'s keyword
    arguments, once per session (``aliases``: names that share another's checkpoint)."""

    def folder(name: str) -> Path:
        name = (aliases or {}).get(name, name)
        return built(factory, f"{prefix}-{name}", builder, **table[name][0])

    return folder


def builds_maker(factory: Any, prefix: str, builds: dict[str, tuple[Any, dict[str, Any]]]) -> Any:
    """name -> the checkpoint ``builds[name]`` = (builder, its keyword arguments) makes, once per session."""

    def folder(name: str) -> Path:
        builder, options = builds[name]
        return built(factory, f"{prefix}-{name}", builder, **options)

    return folder


# -- bugs for the negative controls: each changes one thing the comparison must catch


def patch_layers(monkeypatch: Any, change: Any) -> None:
    """Every layer the engine computes is replaced by ``change(layer)``'s fields, before
    its output feeds the next layer (as a bug in the layer step itself would)."""
    from attn_cli.sources.checkpoint.families import loop

    original = loop.multi_head

    def patched(*args: Any, **kwargs: Any) -> Any:
        layer = original(*args, **kwargs)
        return dataclasses.replace(layer, **change(layer))

    monkeypatch.setattr(loop, "multi_head", patched)


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


# -- every other family: the rotary decoders and the BERT-style encoders ----------------------

CAUSAL_CLASSES = {
    "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM", "gpt_neox": "GPTNeoXForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}  # fmt: skip
DECODER_SIZES = dict(
    num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, hidden_size=64, intermediate_size=96,
    max_position_embeddings=256, head_dim=16,
)  # fmt: skip
NEOX_SIZES = dict(num_hidden_layers=3, num_attention_heads=4, hidden_size=64, intermediate_size=96, max_position_embeddings=256)
PHI3_SIZES = dict(
    num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, hidden_size=64, intermediate_size=96,
    max_position_embeddings=256,
)  # fmt: skip


def build_decoder(folder: Path, *, model_type: str, seed: int = 3, old_keys: Any = None, cls: str | None = None, **overrides: Any) -> Path:
    """A 3-layer decoder of ``model_type`` saved as its *ForCausalLM (transformers 5's
    config.json), with Llama 3's kind of tokenizer.json; ``old_keys(config)`` then
    rewrites config.json the way older files on the Hub spell it."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = llama_tokenizer("byte_level")
    tokenizer.save(str(folder / "tokenizer.json"))
    bos = BOS["byte_level"]
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "model_max_length": 256})
    )
    sizes = {"gpt_neox": NEOX_SIZES, "phi3": PHI3_SIZES}.get(model_type, DECODER_SIZES)
    config = transformers.AutoConfig.for_model(
        model_type, vocab_size=tokenizer.get_vocab_size(), bos_token_id=tokenizer.token_to_id(bos), pad_token_id=0,
        **{**sizes, **overrides},
    )  # fmt: skip
    model = getattr(transformers, cls or CAUSAL_CLASSES[model_type])(config)
    sharpen(model, seed)
    model.save_pretrained(folder)
    if old_keys is not None:
        path = folder / "config.json"
        path.write_text(json.dumps(old_keys(json.loads(path.read_text()))))
    return folder


def t5_unigram(vocab_size: int = 300) -> Any:
    """T5's kind of tokenizer.json: a SentencePiece-style Unigram model with Metaspace pieces,
    <pad> 0, </s> 1, <unk> 2, and </s> after every text (TemplateProcessing)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    return tokenizer


def roberta_bpe(vocab_size: int = 400) -> Any:
    """RoBERTa's kind of tokenizer.json: byte-level BPE, <s> 0, <pad> 1, </s> 2, and
    RobertaProcessing (<s> A </s></s> B </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=False)
    return tokenizer


ENCODER_CLASSES = {
    "bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM", "distilbert": "DistilBertForMaskedLM",
    "mpnet": "MPNetForMaskedLM", "modernbert": "ModernBertForMaskedLM",
}  # fmt: skip
MODERNBERT_SIZES = dict(
    num_hidden_layers=3, num_attention_heads=4, hidden_size=32, intermediate_size=48, max_position_embeddings=128,
    global_attn_every_n_layers=2, local_attention=8, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
    sep_token_id=2,
)  # fmt: skip


def build_encoder(folder: Path, *, model_type: str, seed: int = 4, cls: str | None = None, **overrides: Any) -> Path:
    """A 3-layer encoder of ``model_type`` saved as its *ForMaskedLM with the tokenizer.json its kind ships."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    if model_type == "modernbert":
        tokenizer = roberta_bpe()
        sizes: dict[str, Any] = dict(MODERNBERT_SIZES)
    elif model_type == "bert":
        tokenizer = wordpiece()
        sizes = dict(BERT_SIZES)
    elif model_type == "distilbert":
        tokenizer = wordpiece()
        sizes = dict(n_layers=3, n_heads=4, dim=32, hidden_dim=64, max_position_embeddings=64, pad_token_id=0)
    else:
        tokenizer = wordpiece(style="mpnet") if model_type == "mpnet" else roberta_bpe()
        sizes = dict(BERT_SIZES, max_position_embeddings=130, pad_token_id=1, bos_token_id=0, eos_token_id=2)
        if model_type != "mpnet":
            sizes["type_vocab_size"] = 1
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    config = transformers.AutoConfig.for_model(model_type, vocab_size=tokenizer.get_vocab_size(), **{**sizes, **overrides})
    model = getattr(transformers, cls or ENCODER_CLASSES[model_type])(config)
    sharpen(model, seed)
    model.save_pretrained(folder)
    return folder


def assert_matches(layers: Any, ref: Reference, tol: float = 1e-5) -> None:
    """Weights to ``tol``; the (T, D) tensors, which reach 15 in these sharpened models,
    to ``tol`` of their largest value (float32 keeps about 7 digits, whatever the size).
    A reference in another dtype is widened to float32 exactly, as the engine's tensors
    are. A failure names the layer and the field ("layer 0 concat: ...")."""
    for layer in layers:
        i = layer.layer
        for name in ("weights", "x", "concat", "output"):
            expected = getattr(ref, name)[i].float()
            scale = 1.0 if name == "weights" else max(1.0, float(expected.abs().max()))
            torch.testing.assert_close(
                getattr(layer, name), expected, atol=tol * scale, rtol=0, msg=lambda m, name=name: f"layer {i} {name}: {m}"
            )


def traced(folder: Path, text: str, **kwargs: Any) -> tuple[Any, Any, Any]:
    """attn-cli's checkpoint on ``folder``, its tokens for ``text`` and every layer traced."""
    from attn_cli.sources.checkpoint import open_checkpoint

    ckpt = open_checkpoint(str(folder), **kwargs)
    tokens = ckpt.tokenizer.encode(text)
    return ckpt, tokens, ckpt.trace(tokens, range(ckpt.info.layers))


def assert_family_matches(folder: Path, text: str) -> tuple[Any, Any, Any]:
    """Every layer and head of ``folder`` on ``text`` equal to transformers' (``assert_matches``),
    rows summing to 1, masked keys at exactly 0, rows far from uniform (so a bug cannot
    hide in them), and the softmax input renderers derive giving the weights back."""
    ckpt, tokens, layers = traced(folder, text)
    assert_matches(layers, reference(folder, tokens.ids))
    for layer in layers:
        torch.testing.assert_close(layer.weights.sum(-1), torch.ones(layer.weights.shape[:2]), atol=1e-5, rtol=0)
        if layer.mask is not None:
            assert bool((layer.weights[:, layer.mask] == 0).all())
        assert sharpness(layer) > 1.5
        torch.testing.assert_close(layer.scaled_scores.softmax(-1), layer.weights, atol=1e-5, rtol=0)
    return ckpt, tokens, layers


def assert_bug_caught(folder: Path, text: str, bug: Any, monkeypatch: Any, flagged: str) -> None:
    """A negative control: with ``bug(monkeypatch)`` in place, comparing ``folder`` on
    ``text`` with transformers fails, and first at ``flagged`` ("layer 1 weights")."""
    import pytest

    from attn_cli.sources.checkpoint import open_checkpoint

    ckpt, tokens, ref = with_reference(folder, text)
    bug(monkeypatch)
    with pytest.raises(AssertionError, match=flagged):
        assert_matches(open_checkpoint(str(folder)).trace(tokens, range(ckpt.info.layers)), ref)


def sharpness(layer: Any) -> float:
    """The mean over queries of (largest weight x keys visible): 1 for uniform rows."""
    visible = torch.tensor(layer.visible_keys(), dtype=torch.float32)  # (T,)
    return float((layer.weights.max(-1).values * visible).mean())


# Encoder-decoders (tests/sources/checkpoint/test_seq2seq*.py, tools/make_pictures.py): *ForConditionalGeneration / MarianMTModel


def build_bart(folder: Path) -> Path:
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = roberta_bpe()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.BartConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
        decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=40, max_position_embeddings=64, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2, scale_embedding=True,
    )  # fmt: skip
    model = transformers.BartForConditionalGeneration(config)
    sharpen(model, 6)
    with torch.no_grad():  # a buffer, not a parameter: drawn here so that a head without it would show
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=torch.Generator().manual_seed(6)))
    model.save_pretrained(folder)
    return folder


def marian_spm(folder: Path, side: str, seed_text: list[str]) -> dict[str, int]:
    """A SentencePiece model ``{side}.spm`` trained on ``seed_text`` and its vocabulary as Marian
    lays one out: </s> 0, <unk> 1, the pieces, <pad> last."""
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(seed_text), model_writer=model, vocab_size=90, hard_vocab_limit=False, model_type="unigram",
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2,
    )  # fmt: skip
    (folder / f"{side}.spm").write_bytes(model.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size()) if processor.id_to_piece(i) != "<unk>"]
    return {piece: i for i, piece in enumerate(["</s>", "<unk>", *pieces, "<pad>"])}


def build_marian(folder: Path, *, shared: bool = True) -> Path:
    """As opus-mt checkpoints are configured: scaled embeddings, swish, the pad id starting the
    decoder, source.spm / target.spm and vocab.json; ``shared`` false: a table per stack, the
    decoder's with its own vocabulary (target_vocab.json, tokenizer_config.json's separate_vocabs)."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    source_vocab = marian_spm(folder, "source", CORPUS)
    target_vocab = marian_spm(folder, "target", [line.lower() for line in CORPUS[::-1]])
    if shared:  # one vocabulary: the source's pieces, then the target's others
        merged = dict(source_vocab)
        merged.pop("<pad>")
        for piece in target_vocab:
            if piece not in merged and piece != "<pad>":
                merged[piece] = len(merged)
        merged["<pad>"] = len(merged)
        source_vocab = target_vocab = merged
        (folder / "vocab.json").write_text(json.dumps(merged, ensure_ascii=False))
    else:
        (folder / "vocab.json").write_text(json.dumps(source_vocab, ensure_ascii=False))
        (folder / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False))
        (folder / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}))
    pad = target_vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(source_vocab), decoder_vocab_size=None if shared else len(target_vocab), d_model=32, encoder_layers=2,
        decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=40,
        max_position_embeddings=64, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        share_encoder_decoder_embeddings=shared, scale_embedding=True, activation_function="swish",
    )  # fmt: skip
    model = transformers.MarianMTModel(config)
    sharpen(model, 8)
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=torch.Generator().manual_seed(8)))
    with torch.no_grad():  # sqrt(32)-scaled embeddings of std 1 would drown the positions
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight") or name.endswith("shared.weight"):
                p.mul_(0.2)
    model.save_pretrained(folder)
    return folder


def build_t5(folder: Path, feed_forward_proj: str) -> Path:
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    config = transformers.T5Config(
        vocab_size=300, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
        feed_forward_proj=feed_forward_proj, relative_attention_num_buckets=8, relative_attention_max_distance=20,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
    )  # fmt: skip
    t5_unigram(config.vocab_size).save(str(folder / "tokenizer.json"))
    model = transformers.T5ForConditionalGeneration(config)
    sharpen(model, 7)
    with torch.no_grad():  # T5 does not scale its scores: std-0.25 queries make every row one-hot
        for name, p in model.named_parameters():
            if name.endswith((".q.weight", ".k.weight")):
                p.mul_(0.3)
    model.save_pretrained(folder)
    return folder


# the decoders' test texts and settings, shared by their tests, the precision and CUDA tests
TEXT = "The cat sat on the mat, and the dog sat on the log."
LONG = " ".join(CORPUS[:6]) * 2  # past every window and original_max_position_embeddings below
WINDOW = 8
LOCAL_GLOBAL = ["sliding_attention", "full_attention", "sliding_attention"]
GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [3.0, 7.0], "rope_theta": 10000.0}
LLAMA3 = {
    "rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}  # fmt: skip

# -- one checkpoint per model_type the registry knows, each with its family's own steps in play
# (grouped keys and values, windows, soft-capping, partial and scaled rotary, local and global
# layers): model_type -> (builder, its keyword arguments, text). The precision and CUDA tests
# go through all of them.
ONE_PER_MODEL_TYPE: dict[str, tuple[Any, dict[str, Any], str]] = {
    "gpt2": (build_gpt2, {}, TEXT),
    "bert": (build_bert, {}, TEXT),
    "llama": (build_llama, dict(rope_parameters=LLAMA3), LONG),
    "mistral": (build_llama, dict(model_type="mistral", sliding_window=WINDOW, num_key_value_heads=4), LONG),
    "qwen2": (build_llama, dict(model_type="qwen2", num_key_value_heads=8), TEXT),
    "qwen3": (build_decoder, dict(model_type="qwen3", attention_bias=True), TEXT),
    "gemma": (build_decoder, dict(model_type="gemma", num_key_value_heads=1), TEXT),
    "gemma2": (
        build_decoder,
        dict(model_type="gemma2", sliding_window=WINDOW, query_pre_attn_scalar=32, attn_logit_softcapping=5.0),
        LONG,
    ),
    "gemma3_text": (
        build_decoder,
        dict(model_type="gemma3_text", sliding_window=WINDOW, query_pre_attn_scalar=32, layer_types=LOCAL_GLOBAL,
             rope_parameters=GEMMA3_ROPE),
        LONG,
    ),  # fmt: skip
    "phi3": (
        build_decoder,
        dict(model_type="phi3", rope_parameters={**LONGROPE, "partial_rotary_factor": 0.5},
             original_max_position_embeddings=32, sliding_window=12),
        LONG,
    ),  # fmt: skip
    "gpt_neox": (build_decoder, dict(model_type="gpt_neox"), TEXT),
    "olmo2": (build_decoder, dict(model_type="olmo2"), TEXT),
    "roberta": (build_encoder, dict(model_type="roberta"), TEXT),
    "xlm-roberta": (build_encoder, dict(model_type="xlm-roberta", seed=5), TEXT),
    "distilbert": (build_encoder, dict(model_type="distilbert"), TEXT),
    "mpnet": (build_encoder, dict(model_type="mpnet"), TEXT),
    "modernbert": (build_encoder, dict(model_type="modernbert", attention_bias=True, seed=7), TEXT),
}
ONE_PER_PAIR_TYPE: dict[str, tuple[Any, dict[str, Any]]] = {
    "bart": (build_bart, {}), "t5": (build_t5, dict(feed_forward_proj="gated-gelu")), "marian": (build_marian, {}),
}  # fmt: skip


def one_per_type(factory: Any) -> Any:
    """name (a key of ONE_PER_MODEL_TYPE or ONE_PER_PAIR_TYPE) -> its checkpoint, once per session."""

    def folder(name: str) -> Path:
        builder, options = ONE_PER_MODEL_TYPE[name][:2] if name in ONE_PER_MODEL_TYPE else ONE_PER_PAIR_TYPE[name]
        return built(factory, f"type-{name}", builder, **options)

    return folder

