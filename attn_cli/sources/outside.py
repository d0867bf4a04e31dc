"""Attention another tool computed (``from_attentions``: transformers' ``attentions``, a list
of (H, T, T) arrays...) as a ``Trace`` of weights, checked (shapes, rows summing to 1), and
the pieces a saved trace is rebuilt with too (tokens, model info, layers placed by number).
A causal mask is recognised when every cell above the diagonal is exactly 0 in every head.

Shapes: L layers, H heads, T tokens; weights (H, T, T).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.records.about import About
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import EXTERNAL, ModelInfo, Trace
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    import torch


ROW_SUM_TOLERANCE = 1e-3
# Weights alone: the page says they were computed elsewhere, and no architecture or dtype; no
# command makes them again, so the page says how to draw them again instead
OUTSIDE = About(
    page=(
        ("model", None), ("computed", "outside attn-cli (weights given to attn_cli.from_attentions)"), ("layers", None),
        ("heads", None), ("head size", None), ("d_model", None),
    ),
    reproduce="attention computed outside attn-cli: trace.to_json() saves it, attn-cli html --from FILE.json draws it",
)  # fmt: skip


def from_attentions(
    attentions: Any,
    tokens: Sequence[str],
    *,
    model_name: str | None = None,
    special: Sequence[bool] | None = None,
    text: str | None = None,
) -> Trace:
    """A Trace of the ``attentions`` another tool computed: one (1, H, T, T) or (H, T, T)
    tensor or array per layer (what transformers returns with ``output_attentions=True``),
    over ``tokens`` (their strings, in order). ``special``: which tokens the tokenizer
    added ([CLS], BOS), for --hide-tokens special and the special_mass score.
    Raises UsageError naming the first problem: a wrong rank, layers of different
    sizes, a token count that does not match, rows that do not sum to 1."""
    import torch

    if isinstance(attentions, torch.Tensor) or is_array(attentions):  # one tensor: stacked layers, or one layer
        attentions = [attentions[i] for i in range(attentions.shape[0])] if len(attentions.shape) >= 4 else [attentions]
    layers = list(attentions)
    if not layers:
        raise UsageError("attentions is empty: give one (H, T, T) or (1, H, T, T) tensor per layer")
    tensors = []
    for i, item in enumerate(layers):
        tensor = numbers_of(item, f"attentions[{i}]")
        if tensor.dim() == 4:
            if tensor.shape[0] != 1:
                raise UsageError(f"attentions[{i}] has a batch of {tensor.shape[0]}; give one text's attentions (batch 1)")
            tensor = tensor[0]  # (1, H, T, T) -> (H, T, T)
        if tensor.dim() != 3:
            raise UsageError(f"attentions[{i}] has {tensor.dim()} dimensions {tuple(tensor.shape)}; each layer is (H, T, T) or (1, H, T, T)")
        tensors.append(tensor)
    labels = [str(t) for t in tokens]
    weights = check_layers(tensors, len(labels), "attentions")
    names = special if special is not None else [False] * len(labels)
    if len(names) != len(labels):
        raise UsageError(f"special has {len(names)} flags for {len(labels)} tokens")
    toks = Tokens(tuple(range(len(labels))), tuple(labels), len(labels), model_name or EXTERNAL, tuple(bool(s) for s in names))
    info = model_info(model_name or "attentions", model_name or EXTERNAL, EXTERNAL, len(weights), weights[0].shape[0])
    return weights_trace(text if text is not None else " ".join(labels), toks, info, weights, list(range(len(weights))), None)


def is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (list, tuple))


def numbers_of(value: Any, what: str, where: str | None = None) -> torch.Tensor:
    """``value`` (a tensor, an array or nested lists of numbers) as a float32 tensor on the
    CPU, converted once; anything else is a UsageError."""
    import torch

    try:
        if isinstance(value, torch.Tensor):
            return value.detach().to("cpu", torch.float32)
        return torch.as_tensor(value, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        prefix = f"{where}: " if where else ""
        raise UsageError(f"{prefix}{what} is not a table of numbers (rows of equal length)") from None


def dims_text(shape: Sequence[int]) -> str:
    return " x ".join(str(s) for s in shape)


def whole_number(value: Any, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where}: {what} is {value!r}, not an index")
    return value


def check_layers(layers: Sequence[torch.Tensor], n_tokens: int, where: str) -> list[torch.Tensor]:
    """Each (H, T, T), the same H in every layer, T the tokens', rows summing to 1."""
    first = layers[0].shape
    for i, w in enumerate(layers):
        if w.shape[0] < 1:
            raise UsageError(f"{where}: layer {i} has no heads")
        if w.shape != first:
            raise UsageError(f"{where}: layer {i} is {dims_text(w.shape)} but layer 0 is {dims_text(first)}; every layer must be the same size")
        if w.shape[1] != w.shape[2]:
            raise UsageError(f"{where}: layer {i}'s weights are {dims_text(w.shape[1:])}, not square (T x T)")
        if w.shape[-1] != n_tokens:
            raise UsageError(f"{where}: the weights are {w.shape[-1]} x {w.shape[-1]} but there are {n_tokens} tokens")
        if not bool(w.isfinite().all()) or bool((w < 0).any()):
            raise UsageError(f"{where}: layer {i} has a negative, NaN or infinite weight; attention weights are a softmax's")
        sums = w.sum(-1)  # (H, T)
        worst = float((sums - 1).abs().max())
        if worst > ROW_SUM_TOLERANCE:
            h, q = divmod(int((sums - 1).abs().argmax()), w.shape[1])
            raise UsageError(
                f"{where}: layer {i}, head {h}, row {q} sums to {float(sums[h, q]):.6g}, not 1 (within {ROW_SUM_TOLERANCE:g}); "
                f"give the softmax weights, not the scores"
            )
    return list(layers)


def placed(weights: torch.Tensor, numbers: Sequence[int], n_heads: int, fill: float | None = None) -> torch.Tensor:
    """(H_file, T, T) -> (H, T, T) with head numbers[j] at index numbers[j]; a head the
    file lacks is uniform, or ``fill`` (never shown: the trace's heads are the file's)."""
    import torch

    if list(numbers) == list(range(n_heads)):
        return weights
    n = weights.shape[-1]
    full = torch.full((n_heads, n, n), 1.0 / n if fill is None else fill)  # (H, T, T)
    full[list(numbers)] = weights
    return full


def tokens_of(entries: list[Any], data: Mapping[str, Any], where: str) -> Tokens:
    texts, ids, special, unknown = [], [], [], []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"text": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("text", entry.get("label")), str):
            raise UsageError(f"{where}: tokens[{i}] has no text; each token is an object with its text")
        texts.append(entry.get("text", entry.get("label")))
        ids.append(entry["id"] if isinstance(entry.get("id"), int) else i)
        special.append(bool(entry.get("special", False)))
        unknown.append(entry["unknown"] if isinstance(entry.get("unknown"), str) else "")  # its label names it again
    vocab = data.get("vocab_size") if isinstance(data.get("vocab_size"), int) else max(ids) + 1
    tokenizer = data.get("tokenizer") if isinstance(data.get("tokenizer"), str) else EXTERNAL
    return Tokens(
        tuple(ids), tuple(texts), max(vocab, max(ids) + 1), tokenizer, tuple(special), unknown=tuple(unknown) if any(unknown) else ()
    )  # fmt: skip


def model_info(source: str, architecture: str, family: str, layers: int, heads: int, **known: Any) -> ModelInfo:
    def number(key: str) -> int:
        value = known.get(key)
        return int(value) if isinstance(value, int) and value > 0 else 0

    return ModelInfo(
        source=source,
        architecture=architecture,
        family=family,
        layers=layers,
        heads=heads,
        kv_heads=number("kv_heads") or heads,
        head_dim=number("head_dim"),
        d_model=number("d_model"),
        dtype=str(known.get("dtype") or "float32"),
        revision=known.get("revision") if isinstance(known.get("revision"), str) else None,
        model_type=known.get("model_type") if isinstance(known.get("model_type"), str) else None,
        path=source if "/" in source else None,  # titles shorten a long folder as they do for the run that saved it
        input_text="(not saved)",
        about=OUTSIDE if family == EXTERNAL else About(),
    )


def weights_trace(
    text: str,
    tokens: Tokens,
    info: ModelInfo,
    weights: Sequence[torch.Tensor],
    numbers: Sequence[int],
    masks: Sequence[torch.Tensor | None] | None,
    *,
    heads: tuple[int, ...] | None = None,
    pair: str | None = None,
) -> Trace:
    from attn_cli.records.layers import LayerWeights
    from attn_cli.sources.attend import causal_mask

    made: list[LayerWeights] = []
    for i, (w, number) in enumerate(zip(weights, numbers)):
        mask = masks[i] if masks is not None else None
        if mask is None:
            n = w.shape[-1]
            causal = causal_mask(n)
            mask = causal if n > 1 and bool((w[:, causal] == 0).all()) else None
        elif not bool(mask.any()):
            mask = None
        made.append(LayerWeights(w.contiguous(), mask, 1.0, number, "", 0))
    return Trace(text, tokens, info, tuple(made), chosen_heads=heads, pair=pair)
