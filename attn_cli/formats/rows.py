"""The tidy long CSV of one text: one row per table cell (``CSV_COLUMNS``), made from the
same ``layer_dict`` as the JSON, a layer at a time (``csv_batches``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from attn_cli.records.results import LAYER_MAPS
from attn_cli.formats.document import COMBINED, combined_dict, hiding_of, kept_of, kept_rows_of, layer_dict, predictions_list
from attn_cli.formats.numbers import HEAD_STATS, MATRIX_TABLES, VECTOR_TABLES, StreamedTable, as_lists, check_export_size, decoder_stacks, token_dicts
from attn_cli.records.trace import Stack, Trace

if TYPE_CHECKING:
    pass


CSV_COLUMNS = ("text_index", "tokenizer", "table", "head", "layer", "row", "col", "row_token", "col_token", "value")


def csv_rows(run: Trace, index: int = 0) -> list[tuple[Any, ...]]:
    """Tidy rows (``CSV_COLUMNS``): one per head/query/key for matrices, per
    token/dimension for vectors, per query for the row statistics, one per head
    for the head statistics, and first one per token with its id (and, for a
    checkpoint's added tokens, ``special``; for a piece of a character, one per byte in
    ``token_bytes``). ``index`` is the text's place in a
    --lines batch; every row names the tokenizer actually used and the layer."""
    check_export_size(run)
    return [row for rows in csv_batches(run, index) for row in rows]


def csv_batches(run: Trace, index: int) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``csv_rows`` a few at a time (the token rows, then one row of a
    table at a time), each layer's tables made as the layer is reached."""
    rows = _Rows(run, index)
    yield from rows.token_rows()
    for layer in run.layers:  # each layer's dict (and its derived tables) goes before the next is made
        made = layer_dict(layer, run.shown_heads, kept_of(run.own_stack), table=StreamedTable, queries=run.queries, row_scores=run.row_scores)
        yield from rows.layer_rows(made)
    for key, stack in decoder_stacks(run):  # an encoder-decoder's decoder (T x T) and cross-attention (T x S)
        yield from rows.stack_rows(key, stack)
    predictions = predictions_list(run)
    if predictions is not None:  # row: the position; col: the rank; value: the probability; col_token: the prediction
        stacks = run.stacks
        positions = rows.labels if len(stacks) == 1 else [t["label"] for t in token_dicts(stacks["decoder"].tokens)]  # the decoder's
        for entry in [predictions] if isinstance(predictions, dict) else predictions:  # a classifier's: one object
            i = entry["position"]  # None: a classifier's mean of every position; its prob None: a regression's logit instead
            yield [(index, rows.tokenizer, "predictions", "", "", "" if i is None else i, r, "" if i is None else positions[i], top["label"],
                    top["logit"] if top["prob"] is None else top["prob"]) for r, top in enumerate(entry["top"])]  # fmt: skip
    for name in COMBINED:  # its layer: the last layer rolled out (or flowed) through
        combined = combined_dict(run, name, table=StreamedTable)
        if combined is not None:
            yield from rows.squares(name, "", combined["through_layer"], combined["weights"])
            if "weights_shown" in combined:
                yield from rows.squares(f"{name}_shown", "", combined["through_layer"], combined["weights_shown"])


class _Rows:
    """One text's CSV rows, table by table. An encoder-decoder's decoder and cross-attention
    tables are named "decoder.weights", "cross.weights", ...: ``p`` the prefix, ``rl`` and
    ``cl`` the row and column labels, ``rh`` and ``ch`` the hidden rows and columns."""

    def __init__(self, run: Trace, index: int) -> None:
        hiding = hiding_of(run)
        self.run, self.index, self.tokenizer = run, index, run.tokens.tokenizer
        self.tokens = token_dicts(run.tokens, hiding.hidden if hiding else (), run.prompt_length)
        self.labels = [t["label"] for t in self.tokens]
        self.hidden = {i for i, t in enumerate(self.tokens) if t["hidden"]}

    def token_rows(self) -> Iterator[list[tuple[Any, ...]]]:
        index, tokenizer, labels, tokens = self.index, self.tokenizer, self.labels, self.tokens
        yield [(index, tokenizer, "token_id", "", "", i, "", labels[i], "", t["id"]) for i, t in enumerate(tokens)]
        yield [(index, tokenizer, "special", "", "", i, "", labels[i], "", 1) for i, t in enumerate(tokens) if t["special"]]
        yield [(index, tokenizer, "hidden", "", "", i, "", labels[i], "", 1) for i, t in enumerate(tokens) if t["hidden"]]
        yield [
            (index, tokenizer, "token_bytes", "", "", i, b, labels[i], "", byte)
            for i, t in enumerate(tokens) if t["partial"]
            for b, byte in enumerate(bytes.fromhex(t["bytes"]))
        ]

    def vectors(self, table: str, head: Any, layer: int, values: StreamedTable, rl: Sequence[str] | None = None, p: str = "") -> Iterator[list[tuple[Any, ...]]]:
        rl = self.labels if rl is None else rl
        for i, vec in enumerate(values.row_lists()):
            yield [(self.index, self.tokenizer, p + table, head, layer, i, d, rl[i], "", v) for d, v in enumerate(vec)]

    def squares(
        self, table: str, head: Any, layer: int, values: StreamedTable, rl: Sequence[str] | None = None, cl: Sequence[str] | None = None,
        p: str = "", rh: set[int] | None = None, ch: set[int] | None = None,
    ) -> Iterator[list[tuple[Any, ...]]]:  # fmt: skip
        index, tokenizer = self.index, self.tokenizer
        rl, cl = (self.labels if rl is None else rl), (self.labels if cl is None else cl)
        rh, ch = (self.hidden if rh is None else rh), (self.hidden if ch is None else ch)
        if table == "weights_shown" or table.endswith("_shown"):  # the shown tokens' cells only; "" in a row with no weight left
            for i, vec in enumerate(values.row_lists()):
                if i not in rh:
                    yield [
                        (index, tokenizer, p + table, head, layer, i, j, rl[i], cl[j], "" if v is None else v)
                        for j, v in enumerate(vec) if j not in ch
                    ]
            return
        for i, vec in enumerate(values.row_lists()):
            yield [(index, tokenizer, p + table, head, layer, i, j, rl[i], cl[j], "-inf" if v is None else v) for j, v in enumerate(vec)]

    def layer_rows(
        self, layer: dict[str, Any], rl: Sequence[str] | None = None, cl: Sequence[str] | None = None, p: str = "",
        out_proj: bool | None = None, rh: set[int] | None = None, ch: set[int] | None = None,
    ) -> Iterator[list[tuple[Any, ...]]]:  # fmt: skip
        rl, cl = (self.labels if rl is None else rl), (self.labels if cl is None else cl)
        out_proj = self.run.model.out_proj if out_proj is None else out_proj
        n = layer["layer"]
        if layer["input"] is not None:
            yield from self.vectors("input", "", n, layer["input"], rl, p)
        for head in layer["heads"]:
            yield from self.head_rows(head, n, rl, cl, p, rh, ch)
        if "norms" in layer:
            yield from self.squares("layer_norms", "", n, layer["norms"], rl, cl, p)
        for name in LAYER_MAPS:  # value zeroing's and ALTI's (T, T) maps of the layer, when asked for
            if name in layer:
                yield from self.squares(name, "", n, layer[name], rl, cl, p)
        if out_proj and "concat" in layer:  # otherwise concat is the output itself
            yield from self.vectors("concat", "", n, layer["concat"], rl, p)
        if "output" in layer:
            yield from self.vectors("output", "", n, layer["output"], rl, p)

    def head_rows(
        self, head: dict[str, Any], n: int, rl: Sequence[str], cl: Sequence[str], p: str, rh: set[int] | None, ch: set[int] | None
    ) -> Iterator[list[tuple[Any, ...]]]:  # fmt: skip
        index, tokenizer, h = self.index, self.tokenizer, head["head"]
        for table in VECTOR_TABLES:
            if table in head:  # a layer of weights alone has no vectors; cross-attention's keys and values are the source's
                yield from self.vectors(table, h, n, head[table], cl if table in ("keys", "values") else rl, p)
        for table in MATRIX_TABLES:
            if table in head:
                yield from self.squares(table, h, n, head[table], rl, cl, p, rh, ch)
        stats = head["stats"]
        yield [
            (index, tokenizer, p + "most_attended", h, n, i, j, rl[i], cl[j], w)
            for i, (j, w) in enumerate(zip(stats["most_attended"], _listed(stats["top_weight"])))
        ]
        for table in ("entropy_bits", "effective_tokens"):
            yield [(index, tokenizer, p + table, h, n, i, "", rl[i], "", v) for i, v in enumerate(stats[table])]
        yield [(index, tokenizer, p + table, h, n, "", "", "", "", stats[table]) for table in HEAD_STATS if stats.get(table) is not None]
        if stats.get("distance_mass") is not None:  # col: the bin's index in distance_bins
            yield [(index, tokenizer, p + "distance_mass", h, n, "", b, "", "", v) for b, v in enumerate(stats["distance_mass"])]
        for row in head.get("rows", ()):  # --query: each chosen row's weights, every key (and --show scores: its raw scores)
            i = row["query"]
            for table, name in (("weights", "rows"), ("scores", "row_scores")):
                if table in row:
                    values = _listed(row[table])
                    yield [(index, tokenizer, p + name, h, n, i, j, rl[i], cl[j], v) for j, v in enumerate(values)]

    def stack_rows(self, key: str, stack: Stack) -> Iterator[list[tuple[Any, ...]]]:
        target = [t["label"] for t in token_dicts(stack.tokens)]
        prefix = "decoder." if key == "decoder_layers" else "cross."
        if prefix == "decoder.":  # the decoder's inputs, one per decoder row
            yield [(self.index, self.tokenizer, "decoder.token_id", "", "", i, "", target[i], "", tid) for i, tid in enumerate(stack.tokens.ids)]
        columns = target if prefix == "decoder." else self.labels
        row_hidden = set(stack.hiding.hidden) if stack.hiding is not None else set()
        column_hidden = row_hidden if prefix == "decoder." else self.hidden
        for layer in stack.layers:
            made = layer_dict(layer, stack.shown_heads, kept_of(stack), table=StreamedTable, kept_rows=kept_rows_of(stack))
            yield from self.layer_rows(made, target, columns, prefix, True, row_hidden, column_hidden)


def _listed(values: StreamedTable | list[Any]) -> list[Any]:
    """A (S,) row of ``layer_dict(table=StreamedTable)`` as its list of numbers (a streamed row read back as JSON writes it)."""
    return as_lists(values.source[None])[0] if isinstance(values, StreamedTable) else values
