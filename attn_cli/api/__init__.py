"""The Python API: attn-cli's traces and views from a notebook or a script.

A front end like the command line (it reaches both the sources and the renderers),
with the same errors: ``attn_cli.runtime.errors``' typed exceptions, whose messages are
the command line's. The traces it gives are ``attn_cli.api.Trace``: the record
(``attn_cli.records.trace.Trace``) with its notebook conveniences (``heatmap``, ``page``,
``to_json``...; ``attn_cli.api.views``), so the record itself stays data.

    import attn_cli
    t = attn_cli.trace("The cat sat on the mat", model=path)   # every layer and head
    t.weights(layer=-1, head=0)                                  # (T, T) tensor
    t.heatmap(layer=2)                                           # a matplotlib Figure
    attn_cli.head_view(attentions, tokens)                       # bertviz's call, drawn offline
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.api import views
from attn_cli.api.views import head_view, model_view
from attn_cli.pipeline import open_source, with_queries
from attn_cli.records.trace import Trace as Record
from attn_cli.runtime.errors import UsageError
from attn_cli.sources.toy.config import SHARED_FIELDS, config_fields

if TYPE_CHECKING:
    import torch
    from matplotlib.figure import Figure

__all__ = ["Trace", "from_attentions", "head_view", "load", "model_view", "trace"]


class Trace(Record):
    """A trace (``attn_cli.records.trace.Trace``: the tokens, what ran, the kept layers) that
    draws itself in a notebook: the command line's outputs as methods."""

    def _repr_html_(self) -> str:
        """Jupyter shows a trace as the `attn-cli html` page, in a sandboxed iframe."""
        return views.notebook(self)

    def weights(self, layer: int = -1, head: int | None = None) -> torch.Tensor:
        """(H, T, T) torch tensor of layer ``layer``'s weights (a model index; -1: the last
        kept layer), or (T, T) for ``head``."""
        return views.weights(self, layer, head)

    def to_json(self) -> str:
        """Schema 2, the bytes `attn-cli run -F json` writes (docs/json.md)."""
        return views.to_json(self)

    def to_dict(self) -> dict[str, Any]:
        """``to_json()`` parsed: plain lists and numbers."""
        import json

        return json.loads(self.to_json())

    def to_csv(self) -> str:
        """The long-format CSV `attn-cli run -F csv` writes."""
        return views.to_csv(self)

    def heatmap(self, **options: Any) -> Figure:
        """The `attn-cli heatmap` picture as a matplotlib Figure (layer=, head=, what=,
        and the picture options; layer="all" draws the model view)."""
        return views.heatmap(self, **options)

    def page(self, **options: Any) -> str:
        """The `attn-cli html` page as a string (view="head"|"matrix"|"model", max_size= in MB)."""
        return views.page(self, **options)

    def heads(self) -> list[dict[str, Any]]:
        """The heads census (masses, entropy, role) per kept layer and shown head."""
        return views.heads(self)

    def stats(self, layer: int = -1) -> list[dict[str, Any]]:
        """Each shown head's statistics in layer ``layer`` (-1: the last kept), as the JSON's
        ``stats``: from the tables, or gathered from blocks where they were not kept."""
        return views.stats(self, layer)

    def rows(self, layer: int = -1, head: int | None = None) -> Any:
        """The ``query=`` rows' weights in layer ``layer``: (Q, H, S) for the shown heads, or (Q, S)
        for ``head``; ``queries`` says which rows, in order."""
        return views.rows(self, layer, head)

    # The first release's names (attn_cli.compat lists them): the toy's one layer, config, input.
    @property
    def result(self) -> Any:
        return self.layers[0]

    @property
    def config(self) -> Any:
        if self.model.config is None:
            raise AttributeError("a checkpoint trace has no toy config; read trace.model")
        return self.model.config

    @property
    def x(self) -> Any:
        return self.layers[0].x  # the toy's trace, whose layer is a LayerAttention


def notebook_trace(record: Record) -> Trace:
    """The record as a notebook trace: the same fields, the same tensors."""
    import dataclasses

    return Trace(**{f.name: getattr(record, f.name) for f in dataclasses.fields(record)})

# The toy model's keyword arguments: the command line's options, as Config names them
# (heads= is --heads; num_heads=, the first release's name for it, still works).
TOY_OPTIONS = {f: f for f in config_fields()} | {"num_heads": "heads"}
MODEL_OPTIONS = ("pair", "revision", "dtype", "device", "truncate", "target")


def trace(
    text: str,
    *,
    model: str | os.PathLike[str] | None = None,
    layer: Any = None,
    head: Any = None,
    heads: Any = None,
    hide_tokens: str | Sequence[Any] | None = None,
    rollout: bool = False,
    norms: bool = False,
    flow: bool = False,
    layers: Any = None,
    query: str | int | Sequence[str | int] | None = None,
    what: str | Sequence[str] | None = None,
    target_label: str | None = None,
    target_token: str | None = None,
    **options: Any,
) -> Trace:
    """``text`` through the seeded toy model (its options as keywords, named as the command
    line's: ``heads=4, causal=True, tokenizer="words"``...) or through the checkpoint ``model``
    (a folder, str or any os.PathLike, or ORG/NAME in the Hugging Face cache; ``pair``,
    ``revision``, ``dtype``, ``device``, ``truncate`` as keywords; ``target``, an
    encoder-decoder's decoder text, gives a trace of three stacks: ``Trace.stack("cross")``,
    ``"decoder"`` or ``"encoder"`` is each as a trace of its own). ``layer`` and
    ``head``: what to keep, as --layer and --head take them (an index, a list, a
    range, "0-3", "all"); every layer and head by default. ``hide_tokens``: as
    --hide-tokens ("special", positions, labels). ``rollout``, ``norms``: as --rollout and
    --norms (``Trace.rollout``, each kept layer's ``norms`` and ``layer_norms``); ``flow``: as
    --what flow (``Trace.flow``). ``what``: the maps, as --what names them ("rollout,alti", or a list:
    value zeroing's and ALTI's per kept layer in ``layer.maps``, those through the layers in ``Trace.maps``
    and ``Trace.combined(name)``; attention x gradient's target: ``target_label``, ``target_token``, as
    --target-label and --target-token, ``Trace.explained``). ``query``: the
    query rows to keep whole, as --query ("last:16", "100:200", a position, a token, or a list
    of them: ``Trace.rows``). Where a checkpoint's tables do not fit the memory at hand, the
    trace keeps each head's statistics and those rows, computed in blocks, and says why in
    ``tables_omitted`` (``Trace.stats``, ``Trace.rows``; what needs tables says so). Raises the
    command line's errors. The first release's names still work: ``layers=`` and
    ``num_heads=``, and ``heads=`` for the heads to keep where it cannot be a number of heads
    (``_old_heads``)."""
    from attn_cli.records.hiding import hide
    from attn_cli.analysis.pooling import POOL_CELLS

    if not isinstance(text, str):
        raise UsageError(f"text is a {type(text).__name__}; give a str")
    kept_heads = _old_heads(heads, model, options)
    layer = _one_of(layer, "layer", layers, "layers")
    head = _one_of(head, "head", kept_heads, "heads")
    if heads is not None and kept_heads is None:
        options["heads"] = heads  # the toy's number of heads
    spec = _spec(options, model, layer, head, hide_tokens)
    source = open_source(spec)
    queries = () if query is None else tuple(str(q) for q in ([query] if isinstance(query, (str, int)) else query))
    rollout, flow, norms, maps = _analyses(what, rollout, flow, norms)
    selection = spec.select(
        source, everything=True, rollout=rollout, flow=flow, norms=norms, queries=queries, tables="keep" if maps else "fit",
        pool=(POOL_CELLS, "max"), maps=maps, target_label=target_label, target_token=target_token,
    )  # fmt: skip
    made = with_queries(source.run(text, selection), selection)
    return notebook_trace(hide(made, spec.hide))


def _spec(options: dict[str, Any], model: Any, layer: Any, head: Any, hide_tokens: Any) -> Any:
    """The ``SourceSpec`` of ``trace``'s keywords (the toy's options, or a checkpoint's)."""
    from attn_cli.records.hiding import HideSpec
    from attn_cli.records.selection import IndexSpec
    from attn_cli.sources.spec import SourceSpec

    config, trained = _source_options(options, model)
    return SourceSpec(
        config=config,
        model=None if model is None else os.fspath(model),
        layers=IndexSpec.parse(_index_text(layer, "layer"), "layer"),
        heads=IndexSpec.parse(_index_text(head, "head"), "head"),
        hide=HideSpec.parse(_index_text(hide_tokens, "hide_tokens")),
        max_tokens_given="max_tokens" in options,
        **trained,
    )


def _analyses(what: str | Sequence[str] | None, rollout: bool, flow: bool, norms: bool) -> tuple[bool, bool, bool, tuple[str, ...]]:
    """(rollout, flow, norms, the attribution maps) that ``what`` (as --what) and the flags ask for."""
    from attn_cli.records.results import attribution_maps, what_names

    try:
        names = what_names(what)
    except ValueError as e:
        raise UsageError(f"what={what!r}: {e}") from None
    return rollout or "rollout" in names, flow or "flow" in names, norms or "norms" in names, attribution_maps(names)


def _old_heads(heads: Any, model: Any, options: dict[str, Any]) -> Any:
    """``heads=`` as the first release meant it, the heads to keep (now ``head=``), or None
    where it is the toy's number of heads, as --heads. It is a number of heads only as a
    whole number above 0, without ``model=`` (a checkpoint has its own) and without
    ``num_heads=``: there the first release could only fail (its toy had one head, 0 or -1),
    so no call that worked changes meaning. Elsewhere it still keeps heads, with a warning."""
    if heads is None:
        return None
    count = isinstance(heads, numbers.Integral) and not isinstance(heads, bool) and heads > 0
    if count and model is None and "num_heads" not in options:
        return None
    warnings.warn(
        f"attn_cli.trace(heads={heads!r}) keeps heads: write head={heads!r}; heads= is now the toy model's number of heads, as --heads",
        DeprecationWarning,
        stacklevel=3,
    )
    return heads


def _one_of(value: Any, name: str, old: Any, old_name: str) -> Any:
    """A keyword given by its name or by its first release's name, not both."""
    if value is not None and old is not None:
        raise UsageError(f"{old_name}= and {name}= both choose the {name}s to keep: give {name}= alone")
    return old if value is None else value


def _source_options(options: dict[str, Any], model: Any) -> tuple[Any, dict[str, Any]]:
    """(the toy's Config, a checkpoint's options) from ``trace()``'s keywords, each checked
    as the command line checks its options."""
    from attn_cli.sources.spec import check_source_options
    from attn_cli.sources.toy.config import Config, Init, Positional

    unknown = sorted(set(options) - set(TOY_OPTIONS) - set(MODEL_OPTIONS))
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)}: not an option of attn_cli.trace(); the toy model takes {', '.join(config_fields())}, "
            f"a checkpoint {', '.join(MODEL_OPTIONS)}"
        )
    toy = {TOY_OPTIONS[k]: v for k, v in options.items() if k in TOY_OPTIONS}
    trained = {k: v for k, v in options.items() if k in MODEL_OPTIONS}
    toy_given = sorted(set(options) & (set(TOY_OPTIONS) - set(SHARED_FIELDS)))
    named = f"model={os.fspath(model)!s}" if model is not None else ""
    check_source_options(toy_given, sorted(trained), None if model is None else os.fspath(model), model_named=named, trained_fix="model=")
    if isinstance(toy.get("init"), str):
        toy["init"] = Init(toy["init"])
    if isinstance(toy.get("positional"), str):
        toy["positional"] = Positional(toy["positional"])
    if toy.get("embeddings") is not None:
        toy["embeddings"] = Path(os.fspath(toy["embeddings"]))
    try:
        config = Config(**toy)
    except ValueError as err:  # an Init or Positional name that is not one
        raise UsageError(str(err)) from None
    return config, trained


def _index_text(value: Any, name: str) -> str | None:
    """An index, a list or range of them, or a string, as the command line writes it."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise UsageError(f"{name}={value!r}: give an index, a list of indexes, a range or 'all'")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (range, Sequence)):
        items = list(value)
        if not items or not all(isinstance(i, (int, str)) and not isinstance(i, bool) for i in items):
            raise UsageError(f"{name}={value!r}: give an index, a list of indexes, a range or 'all'")
        return ",".join(str(i) for i in items)
    raise UsageError(f"{name}={value!r}: give an index, a list of indexes, a range or 'all'")


def from_attentions(
    attentions: Any,
    tokens: Sequence[str],
    *,
    model_name: str | None = None,
    special: Sequence[bool] | None = None,
    rollout: bool = False,
    flow: bool = False,
) -> Trace:
    """A Trace of attention computed elsewhere (see ``attn_cli.sources.outside.from_attentions``);
    ``rollout``, ``flow``: with the rollout, the attention flow, through its last layer (every layer
    from 0 must be given)."""
    import dataclasses

    from attn_cli.analysis.flow import flow_of
    from attn_cli.analysis.rollout import rollout_of
    from attn_cli.sources.outside import from_attentions as made

    trace = made(attentions, tokens, model_name=model_name, special=special)
    return notebook_trace(dataclasses.replace(
        trace, rollout=rollout_of(trace.layers) if rollout else None, flow=flow_of(trace.layers) if flow else None
    ))  # fmt: skip


def load(path: str | os.PathLike[str]) -> Trace:
    """The trace a schema-2 JSON holds (``run -F json``, ``Trace.to_json()``), to re-draw."""
    from attn_cli.sources.saved import load_json

    return notebook_trace(load_json(path))
