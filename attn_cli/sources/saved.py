"""A saved schema-2 JSON (``--from FILE``, ``attn_cli.load``) as a source: the ``Trace`` of
weights it holds, which every weights-based view draws (heatmaps and the model view, the
page, the heads census without its probe).

Shapes: L layers, H heads, T tokens; weights (H, T, T), rows summing to 1.

What is known is kept: the tokens' labels (and ids, special flags when given), the layer
and head numbers, the mask (the cells ``scaled_scores`` leaves null), the raw and scaled
scores, the rollout, the toy's config. What is not (the vectors) is not made up: such a
trace holds ``LayerWeights`` or ``SavedScores``, and the views that need more say so.
Attention computed by another tool comes in through ``attn_cli.sources.outside``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.records.results import COMBINED, LAYER_MAPS
from attn_cli.records.selection import Selection
from attn_cli.records.tokens import Tokens, Truncation
from attn_cli.records.trace import EXTERNAL, TOY, ModelInfo, Trace
from attn_cli.runtime.errors import AttnCliError, UsageError
from attn_cli.sources.outside import check_layers, dims_text, model_info, numbers_of, placed, tokens_of, weights_trace, whole_number

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerWeights

MAX_FILE_BYTES = 4 * 2**30  # a saved trace is read whole; beyond this, say so rather than try


def load_json(path: str | os.PathLike[str]) -> Trace:
    """The trace a schema-2 JSON holds (``run -F json``, ``Trace.to_json()``, or anyone's
    file with ``tokens[]`` and ``layers[].heads[].weights``). The first of several
    traces (``-F json`` of --lines writes one per line: JSON Lines) unless the file
    holds one. Raises UsageError naming the file and the first problem. The file is
    read once while it is unchanged (a command asks for its text, then its trace)."""
    where = str(path)
    try:
        stat = Path(path).stat()
    except FileNotFoundError:
        raise UsageError(f"--from {where}: no such file") from None
    except OSError as err:
        raise UsageError(f"--from {where}: cannot read it ({err.strerror or err})") from None
    return _load(where, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1)
def _load(where: str, mtime: int, size: int) -> Trace:
    file = Path(where)
    try:
        if size > MAX_FILE_BYTES:
            raise UsageError(f"--from {where}: {size / 2**30:.1f} GiB is more than the {MAX_FILE_BYTES // 2**30} GiB a saved trace may be")
        raw = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--from {where}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--from {where}: is a folder; give the JSON file written by run -F json") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--from {where}: cannot read it ({getattr(err, 'strerror', None) or err})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        try:  # JSON Lines: the first line's trace
            data = json.loads(raw.splitlines()[0]) if raw.strip() else None
        except (json.JSONDecodeError, IndexError):
            data = None
        if data is None:
            raise UsageError(f"--from {where}: not JSON ({err.msg} at line {err.lineno})") from None
    return from_dict(data, where)


def from_dict(data: Any, where: str = "the trace") -> Trace:
    """The trace a parsed schema-2 document describes (see ``load_json``)."""
    tokens, layers = _document(data, where)
    toks = _with_truncation(tokens_of(tokens, data, where), data.get("truncated"), where)
    n = len(toks)
    weights, masks, numbers, head_numbers = [], [], [], None
    saved_scores: list[tuple[torch.Tensor, torch.Tensor] | None] = []
    saved_norms: list[tuple[torch.Tensor, torch.Tensor] | None] = []  # (H, T, T), (T, T) when the file has them (run --norms)
    saved_maps: list[dict[str, torch.Tensor]] = []  # each layer's attribution maps the file has (run --what value-zeroing, alti)
    for i, layer in enumerate(layers):
        number, found, stacked, mask, scores, norms = _read_layer(layer, i, n, where, head_numbers)
        if head_numbers is None:
            head_numbers = found
        numbers.append(number)
        weights.append(stacked)
        masks.append(mask)
        saved_scores.append(scores)
        saved_norms.append(norms)
        saved_maps.append({k: _table(layer[k], f"layers[{i}].{k}", where, n) for k in LAYER_MAPS if layer.get(k) is not None})
    if len(set(numbers)) != len(numbers):
        raise UsageError(f"{where}: layers {numbers} repeat a layer number")
    assert head_numbers is not None
    if len(set(head_numbers)) != len(head_numbers) or min(head_numbers) < 0:
        raise UsageError(f"{where}: heads {head_numbers} repeat a head or count below 0")
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    n_heads = max(int(model.get("heads") or 0), max(head_numbers) + 1)
    full = [placed(w, head_numbers, n_heads) for w in weights]  # (H, T, T), heads at their numbers
    check_layers([w[head_numbers] for w in full], n, where)
    text = data.get("text") if isinstance(data.get("text"), str) else "".join(toks.texts)
    pair = data.get("pair") if isinstance(data.get("pair"), str) else None
    made = weights_trace(text, toks, _saved_info(model, data, where, numbers, n_heads, toks.vocab_size), full, numbers, masks, heads=tuple(head_numbers), pair=pair)
    if all(s is not None for s in saved_scores):
        layers = tuple(
            _with_scores(layer, *[placed(t, head_numbers, n_heads) for t in scores], model)  # type: ignore[misc]
            for layer, scores in zip(made.layers, saved_scores)
        )
        made = dataclasses.replace(made, layers=layers)
    if all(pair is not None for pair in saved_norms):
        layers = tuple(
            dataclasses.replace(layer, norms=placed(head, head_numbers, n_heads, fill=0.0), layer_norms=summed)
            for layer, (head, summed) in zip(made.layers, saved_norms)  # type: ignore[misc]
        )
        made = dataclasses.replace(made, layers=layers)
    made = dataclasses.replace(made, layers=tuple(dataclasses.replace(layer, maps=m) for layer, m in zip(made.layers, saved_maps)))
    return _with_rollout_and_prompt(made, data, tokens, where, n)


def _with_truncation(tokens: Tokens, saved: Any, where: str) -> Tokens:
    """The tokens with what --truncate cut, as the file's ``truncated`` says (absent or null: nothing)."""
    if saved is None:
        return tokens
    numbers = saved if isinstance(saved, dict) else {}
    original, kept = numbers.get("from"), numbers.get("to")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (original, kept)) or not original > kept == len(tokens):
        raise UsageError(f'{where}: truncated is {saved!r}; it is {{"from": N, "to": {len(tokens)}}}, N the tokens before the cut, or null')
    return dataclasses.replace(tokens, truncated=Truncation(original, kept))


def _document(data: Any, where: str) -> tuple[list[Any], list[Any]]:
    """(tokens[], layers[]) of a schema-2 document, or the UsageError that says what is missing."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a schema-2 trace (a JSON object with tokens and layers)")
    if isinstance(data.get("schema"), str):  # another command's document (compare's): a trace has no "schema" key
        raise UsageError(f"{where}: a {data['schema']!r} document, not a trace; --from reads what run -F json writes")
    version = data.get("schema_version", 2)
    if version != 2:
        raise UsageError(f"{where}: schema_version {version!r}; attn-cli reads schema 2 (run -F json writes it)")
    tokens, layers = data.get("tokens"), data.get("layers")
    if "cross_layers" in data or "decoder_layers" in data:
        raise UsageError(f"{where}: an encoder-decoder's trace (run --target); --from does not re-draw its three stacks yet")
    if not isinstance(tokens, list) or not tokens:
        raise UsageError(f"{where}: no tokens[]; a schema-2 trace lists its tokens")
    if not isinstance(layers, list) or not layers:
        raise UsageError(f"{where}: no layers[]; a schema-2 trace has layers[].heads[].weights")
    return tokens, layers


def _read_layer(layer: Any, i: int, n: int, where: str, head_numbers: list[int] | None) -> tuple[int, list[int], Any, Any, Any, Any]:
    """layers[i] of the file: (its number, its heads' numbers, its (H, T, T) weights, its mask
    when every head's scaled scores give the same one, (raw, scaled) scores when every head has
    both, (head, layer) norms when the file has them)."""
    import torch

    heads = layer.get("heads") if isinstance(layer, dict) else None
    if not isinstance(heads, list) or not heads:
        raise UsageError(f"{where}: layers[{i}] has no heads[]")
    number = whole_number(layer.get("layer", i), f"layers[{i}].layer", where)
    found = [whole_number(h.get("head", j), f"layers[{i}].heads[{j}].head", where) if isinstance(h, dict) else j for j, h in enumerate(heads)]
    if head_numbers is not None and found != head_numbers:
        raise UsageError(f"{where}: layers[{i}] has heads {found}, layers[0] {head_numbers}; every layer must list the same heads")
    per_head, per_mask, per_scores = [], [], []
    for j, head in enumerate(heads):
        table = head.get("weights") if isinstance(head, dict) else None
        if table is None:
            raise UsageError(f"{where}: layers[{i}].heads[{j}] has no weights")
        per_head.append(_table(table, f"layers[{i}].heads[{j}].weights", where, n))
        scaled = head.get("scaled_scores")
        if isinstance(scaled, list) and len(scaled) == n:
            per_mask.append(torch.tensor([[v is None for v in row] for row in scaled], dtype=torch.bool))
            raw = head.get("scores")
            if isinstance(raw, list):
                given = _table(raw, f"layers[{i}].heads[{j}].scores", where, n)
                shown = _table([[float("-inf") if v is None else v for v in row] for row in scaled], f"layers[{i}].heads[{j}].scaled_scores", where, n)
                per_scores.append((given, shown))
    norms = None
    if all(isinstance(h, dict) and h.get("norms") is not None for h in heads) and layer.get("norms") is not None:
        norms = (
            torch.stack([_table(h["norms"], f"layers[{i}].heads[{j}].norms", where, n) for j, h in enumerate(heads)]),
            _table(layer["norms"], f"layers[{i}].norms", where, n),
        )
    mask = per_mask[0] if per_mask and all(torch.equal(m, per_mask[0]) for m in per_mask) else None
    scores = (torch.stack([g for g, _ in per_scores]), torch.stack([z for _, z in per_scores])) if len(per_scores) == len(heads) else None
    return number, found, torch.stack(per_head), mask, scores, norms  # (H, T, T) weights


def _saved_info(model: Mapping[str, Any], data: Mapping[str, Any], where: str, numbers: list[int], n_heads: int, vocab_size: int) -> ModelInfo:
    """What ran, as the file says: the toy's own info when it holds the toy's config (``vocab_size``:
    the tokens', the rows of its seeded embedding table)."""
    info = model_info(
        str(model.get("source") or where), str(model.get("architecture") or EXTERNAL), str(model.get("family") or EXTERNAL),
        max(int(model.get("layers") or 0), max(numbers) + 1), n_heads,
        kv_heads=model.get("kv_heads"), head_dim=model.get("head_dim"), d_model=model.get("d_model"),
        dtype=model.get("dtype"), revision=model.get("revision"), model_type=model.get("model_type"),
    )  # fmt: skip
    config = _toy_config(model, data)
    if config is not None:  # the toy's trace says how it was made: titles and headers say it again
        from attn_cli.sources.toy.source import toy_info

        threads = model.get("threads")
        info = dataclasses.replace(toy_info(config, vocab_size), threads=threads if isinstance(threads, int) else None)
    elif info.family == TOY:  # the toy's, without settings this version can rebuild: still named as the toy
        from attn_cli.sources.toy.about import TOY_WORDS

        info = dataclasses.replace(info, about=TOY_WORDS)
    return info


def _with_rollout_and_prompt(made: Trace, data: Mapping[str, Any], tokens: list[Any], where: str, n: int) -> Trace:
    """The file's maps through the layers (rollout, flow, ALTI's ...), and where --generate's prompt ended, drawn again."""
    found = {name: data.get(name) for name in COMBINED}
    found = {name: _rollout(saved, where, n, name) for name, saved in found.items() if isinstance(saved, dict) and saved.get("weights") is not None}
    maps = {name: m for name, m in found.items() if name not in ("rollout", "flow")}
    made = dataclasses.replace(made, rollout=found.get("rollout"), flow=found.get("flow"), maps=maps)
    generated = [bool(entry.get("generated")) for entry in tokens if isinstance(entry, dict)]
    if any(generated) and len(generated) == n:
        text_after = data.get("generated_text")
        made = dataclasses.replace(
            made, prompt_length=generated.index(True), generated_text=text_after if isinstance(text_after, str) else None
        )
    return made


def _rollout(saved: Mapping[str, Any], where: str, n: int, name: str = "rollout") -> Any:
    """The file's ``rollout`` (or ``flow``) object as a Rollout; its mask: the future, when nothing reaches it."""
    import torch

    from attn_cli.records.results import Rollout

    weights = _table(saved["weights"], f"{name}.weights", where, n)
    through = whole_number(saved.get("through_layer", 0), f"{name}.through_layer", where)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (T, T)
    causal = n > 1 and bool((weights[future] == 0).all())
    return Rollout(through, weights, future if causal else None)


def _toy_config(model: Mapping[str, Any], data: Mapping[str, Any]) -> Any:
    """The toy's Config from a saved toy trace's ``model.config``, or None (not the toy, or
    a config this version cannot rebuild)."""
    from attn_cli.sources.toy.config import Config, Init, Positional

    given = model.get("config")
    if model.get("family") != "toy" or not isinstance(given, dict):
        return None
    try:
        return Config(
            tokenizer=data.get("tokenizer") if isinstance(data.get("tokenizer"), str) else None,
            seed=int(given["seed"]), d_model=given.get("d_model"), d_k=given.get("d_k"), d_v=given.get("d_v"),
            heads=int(given["heads"]), causal=bool(given.get("causal")), scale=bool(given.get("scale", True)),
            temperature=float(given.get("temperature", 1.0)), dropout=float(given.get("dropout", 0.0)),
            qkv_bias=bool(given.get("qkv_bias")), out_proj=bool(given.get("out_proj")),
            init=Init(given.get("init", "linear")), projections=bool(given.get("projections", True)),
            positional=Positional(given.get("positional", "none")),
            embeddings=None if given.get("embeddings") is None else Path(given["embeddings"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttnCliError):  # a config this version cannot rebuild: drawn as a plain trace
        return None


def _with_scores(layer: LayerWeights, scores: torch.Tensor, scaled: torch.Tensor, model: Mapping[str, Any]) -> LayerWeights:
    """The layer with the file's raw and scaled scores, and the divisor that gives the one
    from the other when one of the usual ones does (sqrt(head_dim); the toy's sqrt(d_k) *
    temperature), so a page drawn from the file is the page drawn from the text."""
    import torch

    from attn_cli.records.layers import SavedScores

    divisor, text = 1.0, ""
    config = model.get("config") if isinstance(model.get("config"), dict) else {}
    candidates = []
    if isinstance(model.get("head_dim"), int) and model["head_dim"] > 0:
        candidates.append((math.sqrt(model["head_dim"]), f"sqrt({model['head_dim']})"))
    if config:
        d_k, temperature = config.get("d_k"), float(config.get("temperature", 1.0) or 1.0)
        if isinstance(d_k, int) and d_k > 0:
            base = (math.sqrt(d_k), f"sqrt({d_k})") if config.get("scale", True) else (1.0, "")
            value = base[0] * temperature
            formula = base[1] if temperature == 1.0 else f"({base[1]} * {temperature:g})" if base[1] else f"{temperature:g}"
            candidates.insert(0, (value, formula))
    finite = scaled.isfinite()
    for value, formula in candidates:
        derived = scores / torch.tensor(value, dtype=torch.float32)
        if torch.equal(derived[finite], scaled[finite]):
            divisor, text = value, formula
            break
    return SavedScores(
        weights=layer.weights, mask=layer.mask, divisor=divisor, layer=layer.layer, divisor_text=text,
        threads=int(model.get("threads") or 0), scores=scores, scaled_scores=scaled,
    )  # fmt: skip


def _table(value: Any, what: str, where: str, n: int) -> torch.Tensor:
    """(T, T) float32: one of a saved head's tables, its size checked against the tokens."""
    table = numbers_of(value, what, where)
    if table.shape != (n, n):
        raise UsageError(f"{where}: {what} is {dims_text(table.shape)}, but there are {n} tokens ({n} x {n})")
    return table


class SavedSource:
    """A source that re-draws a saved trace (``--from FILE``): the commands' Source, with
    no model to run (no probe; the text is the file's)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.trace = load_json(path)
        self.notes: list[str] = []
        self.n_layers = self.trace.model.layers
        self.n_heads = self.trace.model.heads
        self.trained = self.trace.model.trained
        self.kept_layers = tuple(layer.layer for layer in self.trace.layers)
        self.kept_heads = self.trace.shown_heads

    @property
    def info(self) -> ModelInfo:
        return self.trace.model

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        trace = self.trace
        if selection is None:
            return trace
        have = [layer.layer for layer in trace.layers]
        missing = [i for i in selection.layers if i not in have]
        if missing:
            raise UsageError(f"--layer: {self.path} holds layer{'s' if len(have) > 1 else ''} {', '.join(map(str, have))}, not {', '.join(map(str, missing))}")
        kept_heads = trace.shown_heads
        absent = [h for h in selection.heads if h not in kept_heads]
        if absent:
            raise UsageError(f"--head: {self.path} holds head{'s' if len(kept_heads) > 1 else ''} {', '.join(map(str, kept_heads))}, not {', '.join(map(str, absent))}")
        if selection.norms and any(trace.layer(i).norms is None for i in selection.layers):
            raise UsageError(f"{self.path} holds no value-weighted norms; write it with run --norms -F json")
        rollout = self._rollout(selection.last_layer) if selection.rollout else None
        flow = self._flow(selection.last_layer) if selection.flow else None
        layers = tuple(trace.layer(i) for i in selection.layers)
        for name in selection.maps:  # an attribution map needs the model: the file's own, or none
            held = name in trace.maps and trace.maps[name].through_layer == selection.last_layer if name != "value_zeroing" else True
            if not held or (name in LAYER_MAPS and any(name not in layer.maps for layer in layers)):
                raise UsageError(f"--what {name.replace('_', '-')}: {self.path} holds none for layer {selection.last_layer}, and it "
                                 f"needs the model's layers: write the file with run --what {name.replace('_', '-')} -F json")  # fmt: skip
        maps = {name: m for name, m in trace.maps.items() if name in selection.maps}
        return dataclasses.replace(trace, layers=layers, chosen_heads=tuple(selection.heads), rollout=rollout, flow=flow, maps=maps)

    def _rollout(self, through: int) -> Any:
        """The file's rollout through ``through``: the one it holds, else rolled out from its
        layers when it has every head of layers 0 .. through."""
        from attn_cli.analysis.rollout import rollout_of

        trace = self.trace
        if trace.rollout is not None and trace.rollout.through_layer == through:
            return trace.rollout
        if len(trace.shown_heads) != trace.model.heads:
            held = f" (its rollout is through layer {trace.rollout.through_layer})" if trace.rollout is not None else ""
            raise UsageError(
                f"--rollout: {self.path} holds heads {', '.join(map(str, trace.shown_heads))} of {trace.model.heads}, and the "
                f"rollout averages every head{held}; write the file with every head, or with run --rollout"
            )
        return rollout_of(trace.layers, through)

    def _flow(self, through: int) -> Any:
        """Attention flow through ``through``: the file's own, else from its layers (every head of layers 0 .. through)."""
        from attn_cli.analysis.flow import flow_of

        trace = self.trace
        if trace.flow is not None and trace.flow.through_layer == through:
            return trace.flow
        if len(trace.shown_heads) != trace.model.heads:
            raise UsageError(f"--what flow: {self.path} holds heads {', '.join(map(str, trace.shown_heads))} of {trace.model.heads}, "
                             "and the flow averages every head; write the file with every head")  # fmt: skip
        return flow_of(trace.layers, through)

    def run_each(self, texts: Sequence[str], selection: Selection | None = None) -> Iterator[Trace]:
        for text in texts:
            yield self.run(text, selection)

    def probe_pool(self) -> str:
        return f"the attention comes from {self.path}, with no model to run the probe on"

    def trace_ids(self, ids: Sequence[int], selection: Selection | None = None) -> Trace:
        raise UsageError(f"{self.path} is a saved trace: there is no model to run other tokens through")
