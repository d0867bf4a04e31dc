"""A trained checkpoint as a source of attention: its info, its tokenizer, a memory
estimate and the traced layers.

Shapes: T tokens, D d_model, H heads, F the MLP's inner size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

from attn_cli.analysis.norms import BLOCK_BYTES as NORMS_BLOCK_BYTES
from attn_cli.records.selection import Keep
from attn_cli.records.tokens import visible
from attn_cli.records.trace import ModelInfo
from attn_cli.runtime.errors import ModelUnavailable, UsageError
from attn_cli.sources.checkpoint.files import WeightReader
from attn_cli.sources.checkpoint.tokenizer import CheckpointTokenizer

if TYPE_CHECKING:
    import torch

    from attn_cli.analysis.effects import Ablation
    from attn_cli.analysis.rollout import RolloutAccumulator
    from attn_cli.records.band import Band
    from attn_cli.records.layers import LayerAttention, LayerWeights
    from attn_cli.records.results import Classification, Predictions, Rollout, Target
    from attn_cli.records.tokens import Tokens
    from attn_cli.sources.blocks import BlockPlan
    from attn_cli.sources.checkpoint.families import Family
    from attn_cli.sources.checkpoint.families.base import Head
    from attn_cli.sources.checkpoint.families.classifier import Classifier
    from attn_cli.sources.checkpoint.families.attribution import Attributions
    from attn_cli.sources.checkpoint.families.loop import Visit

FLOAT32 = 4  # bytes; what a kept layer's tensors are handed over as
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}  # --dtype: the names torch gives them, and bytes each
DEVICES = ("cpu", "cuda")
# What a kept layer holds, by keep level (trace.Keep). T x T tensors per head: the
# weights, and at "all" the scores renderers derive from the queries and keys.
# (T, D)-sized tensors: x, queries, keys, values, concat (the context views it) and
# output at "all"; none at "weights".
KEPT_TABLES = {"all": 2, "weights": 1}
KEPT_VECTORS = {"all": 6, "weights": 0}
STATS_BYTES_PER_ROW = 6 * 8 + 3 * 8  # a head's row in RowStats (six float64 or int64) and its three Python numbers


PREDICT_DEFAULT = 5  # --predict with no count on a language model: each position's five most likely tokens

class Checkpoint:
    """One opened checkpoint; nothing but config.json, the tokenizer and the
    safetensors headers is read until ``trace``."""

    def __init__(
        self, info: ModelInfo, family: Family, weights: WeightReader, tokenizer: CheckpointTokenizer, eos_ids: frozenset[int] = frozenset(),
        classifier: Classifier | None = None,
    ) -> None:
        self.info = info
        self.classifier = classifier  # a *ForSequenceClassification's head: --predict gives its labels
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids  # where greedy decoding stops (generation_config.json, else config.json)
        self.encoder = family.encoder
        self._family = family
        self._weights = weights

    def estimate_bytes(
        self, n_tokens: int, layers: Sequence[int], keep: Keep = "all", *, norms: bool = False, rollout: bool = False,
        predict: bool = False,
    ) -> dict[str, int]:
        """Bytes a trace of ``n_tokens`` tokens keeping ``layers`` at level ``keep``
        needs, by part: weights (copies in the run's dtype of every tensor of layers
        0 .. max(layers), and the embedding rows read), tables (the kept layers' T x T
        tensors) and activations (the kept layers' (T, D) tensors, and one layer in flight).
        From config.json and the weights' index or headers only: with an index,
        the tensors' sizes come from config.json, so absent shards cost nothing."""
        kept = self._check_layers(layers)
        family, t = self._family, n_tokens
        size = DTYPES[self.info.dtype]
        last = self.info.layers - 1 if predict else max(kept)  # predictions run every layer
        layer_weights = sum(self._layer_elements(layer) for layer in range(last + 1)) * size
        embedding_rows = len(family.embedding_tensors) * t * family.d_model * size  # at most T rows of each table
        width = max(family.d_model, family.heads * family.head_dim)  # a (T, D) or (T, H*Dk) tensor
        # the layer being computed: hidden, residual, normed and q/k/v/context (T, D)-sized;
        # the MLP's two (T, F); its (H, T, T) scores and float32 softmax block; the shared (T, T) bool mask
        in_flight = (7 * t * width + 2 * t * family.d_ffn + family.heads * t * t) * size + FLOAT32 * t * t + t * t
        if norms:  # analysis.norms: the Gram matrices and a block of rows (or keys), beside the layer
            in_flight += 8 * t * family.heads**2 + NORMS_BLOCK_BYTES * 3
        if rollout:  # analysis.rollout: the float64 product, the next layer's mixed weights and their product
            in_flight += 3 * 8 * t * t
        if predict:  # analysis.effects: one block of (positions, V) logits and their softmax, and the head's matrix
            in_flight += self._head_bytes(size, t)
        return {
            "weights": layer_weights + embedding_rows,
            # a kept layer's (H, T, T) tables, and with norms its (H, T, T) + (T, T) norms
            "tables": len(kept) * t * t * FLOAT32 * (family.heads * KEPT_TABLES[keep] + (family.heads + 1) * norms),
            "activations": len(kept) * KEPT_VECTORS[keep] * t * width * FLOAT32 + in_flight,
        }

    def estimate_blocked_bytes(
        self, n_tokens: int, layers: Sequence[int], *, block_bytes: int, rows: int, predict: bool = False
    ) -> dict[str, int]:
        """``estimate_bytes``'s parts for a run in blocks (``attn_cli.sources.blocks``): no tables but
        each kept layer's statistics (O(H x T)) and ``rows`` chosen rows of T weights per head;
        the activations with one block of ``block_bytes`` in flight instead of an (H, T, T) table,
        and every head's keys and values (a shared head repeated for its group)."""
        kept = self._check_layers(layers)
        family, t = self._family, n_tokens
        size = DTYPES[self.info.dtype]
        parts = self.estimate_bytes(n_tokens, layers, "weights", predict=predict)
        width = max(family.d_model, family.heads * family.head_dim)
        in_flight = (7 * t * width + 2 * t * family.d_ffn + 2 * family.heads * t * family.head_dim) * size + block_bytes
        if predict:
            in_flight += self._head_bytes(size, t)
        stats = family.heads * t * STATS_BYTES_PER_ROW  # RowStats: argmax, top weight, entropy, three masses
        return {"weights": parts["weights"], "tables": len(kept) * (stats + rows * family.heads * t * FLOAT32), "activations": in_flight}

    def band(self, layer: int) -> Band:
        """Which keys each query of layer ``layer`` sees (``Family.band``)."""
        return self._family.band(layer)

    def block_shape(self, n_tokens: int, block_bytes: int) -> tuple[int, int]:
        """(query rows, heads) a block of a run in blocks holds within ``block_bytes``."""
        from attn_cli.sources.blocks import block_rows_for, heads_at_once_for

        family = self._family
        group = heads_at_once_for(family.heads, n_tokens, 2 * family.head_dim)
        return block_rows_for(group, n_tokens, block_bytes), group

    def _head_bytes(self, size: int, n_tokens: int) -> int:
        """The head's (V, D) matrix, read whole for the logits (a tied one too: the embedding
        rows counted above are only the text's), and one block of (positions, V) float32
        logits with their softmax (``analysis.effects.block_rows``)."""
        from attn_cli.analysis.effects import block_rows

        try:
            head = self._family.head(self._weights)
        except ModelUnavailable:  # no head: predict() says so before anything runs
            return 0
        vocab, width = self._weights.entry(head.weight).shape
        return vocab * width * size + 2 * FLOAT32 * min(n_tokens, block_rows(vocab)) * vocab

    def _layer_elements(self, layer: int) -> int:
        """Elements of layer ``layer``'s tensors: from the safetensors headers, or from
        config.json's sizes when the index names a shard that is not on disk (an index
        says where a tensor is, not how big)."""
        names = self._family.layer_names(layer).values()
        from_config = self._family.layer_elements()
        if from_config is not None and not all(self._weights.present(name) for name in names):
            return from_config
        return sum(self._weights.entry(name).numel for name in names)

    @overload
    def trace(
        self, tokens: Tokens, layers: Sequence[int], keep: Literal["all"] = "all", *, norms: bool = ..., rollout: RolloutAccumulator | None = ...
    ) -> list[LayerAttention]: ...

    @overload
    def trace(
        self, tokens: Tokens, layers: Sequence[int], keep: Keep, *, norms: bool = ..., rollout: RolloutAccumulator | None = ...
    ) -> list[LayerWeights]: ...

    def trace(
        self, tokens: Tokens, layers: Sequence[int], keep: Keep = "all", *, norms: bool = False, rollout: RolloutAccumulator | None = None,
        blocks: BlockPlan | None = None, visit: Visit | None = None,
    ) -> list[LayerWeights]:
        """One record per requested layer, in order: a LayerAttention (every tensor) at
        ``keep="all"``, a LayerWeights (the weights, mask and divisor) at "weights", a
        LayerSummary with ``blocks`` (no tables: ``attn_cli.sources.blocks.BlockPlan``).
        Runs layers 0 .. max(layers) only, and never reads a later layer's weights.
        ``norms``, ``rollout``, ``visit``: as ``families.forward`` takes them."""
        from attn_cli.sources.checkpoint.families import forward

        self._check_layers(layers)
        self._check_length(tokens)
        return forward(
            self._family, self._weights, tokens, layers, self._weights.device, keep, norms=norms, rollout=rollout, blocks=blocks,
            visit=visit,
        ).layers

    def attention_gradient(self, tokens: Tokens, label: str | None = None, token: str | None = None) -> tuple[list[torch.Tensor], Target]:
        """Each layer's attention x gradient map (T, T) and the target whose logit it explains
        (``families.gradient``, ``targets.TargetScore``: a classifier's label, a decoder's next token, a masked LM's filler)."""
        from attn_cli.sources.checkpoint.families.gradient import attention_gradients
        from attn_cli.sources.checkpoint.targets import TargetScore

        self._check_length(tokens)
        score = TargetScore((self._family, self._weights, self.tokenizer, self.classifier), tokens, label, token)
        return attention_gradients(self._family, self._weights, tokens, score, self._weights.device), score.target

    def attributions(self, maps: Sequence[str], layers: Sequence[int]) -> Attributions:
        """The ``forward`` visitor that computes ``maps`` (``Selection.maps``) over ``layers`` (``families.attribution``)."""
        from attn_cli.sources.checkpoint.families.attribution import attributions_for

        return attributions_for(self._family, maps, layers)

    def attributions_bytes(self, maps: Sequence[str], n_tokens: int, layers: int) -> int:
        from attn_cli.sources.checkpoint.families.attribution import attributions_bytes

        return attributions_bytes(self._family, maps, n_tokens, layers)

    @staticmethod
    def attached(visitor: Attributions, layers: list[LayerWeights], maps: Sequence[str], last: int) -> tuple[list[LayerWeights], dict[str, Rollout]]:
        """The kept layers with their maps, and the maps through layer ``last`` (``families.attribution.attach``)."""
        from attn_cli.sources.checkpoint.families.attribution import attach

        return attach(visitor, layers, maps, last)

    def trace_batch(self, texts: Sequence[Tokens], layers: Sequence[int], visit: Visit | None = None) -> list[LayerWeights]:
        """``trace`` at "weights" over a batch of texts run together, padded on the right to the
        longest (``families.loop.padded_inputs``): one record per requested layer, its weights
        (B, H, T, T), text b's own weights in [b, :, :T_b, :T_b] (every other weight of its rows 0).
        ``visit``: called with every layer's attention as it passes (``families.forward``)."""
        import torch

        from attn_cli.sources.checkpoint.families import forward
        from attn_cli.sources.checkpoint.families.loop import padded_inputs

        self._check_layers(layers)
        for tokens in texts:
            self._check_length(tokens)
        if len({self._family.length_class(len(tokens)) for tokens in texts}) > 1:
            raise ValueError("a batch's texts must share a length class (Family.length_class): their positions would differ")
        longest = max(texts, key=len)
        with torch.inference_mode():
            hidden, padding = padded_inputs(self._family, self._weights, texts)  # (B, T, D), (B, T)
        device = self._weights.device
        return forward(
            self._family, self._weights, longest, layers, device, "weights", start=(0, hidden.to(device)), padding=padding, visit=visit
        ).layers

    def length_class(self, n_tokens: int) -> int:
        """Texts of one class may share a batch (``trace_batch``; ``Family.length_class``)."""
        return self._family.length_class(n_tokens)

    def _no_classifier(self, what: str) -> None:
        """ModelUnavailable (exit 3) for a classifier asked for its language-model head: it has none (a tied copy
        of its embeddings is not one)."""
        if self.classifier is not None:
            raise ModelUnavailable(f"{what}: {self.info.name} is a sequence classifier ({self.info.architecture}): it has no "
                                   "language-model head; --predict gives its labels")  # fmt: skip

    def _check_length(self, tokens: Tokens) -> None:
        if self.info.max_positions is not None and len(tokens) > self.info.max_positions:
            raise UsageError(
                f"{len(tokens)} tokens, but {self.info.source} takes at most {self.info.max_positions}; "
                f"encode the text with its tokenizer (which truncates or refuses)"
            )

    def predict(
        self, tokens: Tokens, layers: Sequence[int], k: int, keep: Keep = "all", *, norms: bool = False,
        rollout: RolloutAccumulator | None = None, blocks: BlockPlan | None = None, visit: Visit | None = None,
    ) -> tuple[list[LayerWeights], Predictions | Classification]:
        """``trace``'s layers, and every position's top ``k`` predictions: every layer runs,
        then the family's final norm and its language-model head (ModelUnavailable, exit 3,
        naming what is missing when the checkpoint has none; checked before anything runs).
        A classifier's (``classifier``): its ``k`` most likely labels at the position its head reads."""
        import torch

        from attn_cli.analysis.effects import top_k
        from attn_cli.sources.checkpoint.families import forward

        self._check_layers(layers)
        if k < 0:  # --predict with no count: a classifier's every label, a language model's PREDICT_DEFAULT
            k = len(self.classifier.labels) if self.classifier is not None else PREDICT_DEFAULT
        head = None if self.classifier is not None else self._family.head(self._weights)  # no head: refused before the run
        done = forward(
            self._family, self._weights, tokens, layers, self._weights.device, keep, norms=norms, rollout=rollout, whole=True,
            blocks=blocks, visit=visit,
        )  # fmt: skip
        assert done.hidden is not None
        if head is None:
            return done.layers, self._classification(tokens, done.hidden, k)
        family, weights = self._family, self._weights
        with torch.inference_mode():
            normed = family.final_norm(weights, done.hidden)  # (T, D)
            ids, probs, logits = top_k(
                lambda rows: family.logits(weights, head, normed[rows]), len(tokens), k, self.vocab_size(head)
            )  # (T, K) each
        return done.layers, predictions_of(self.tokenizer, ids, probs, logits)

    def _classification(self, tokens: Tokens, hidden: torch.Tensor, k: int) -> Classification:
        """A classifier's ``k`` most likely labels from the last layer's output ``hidden`` (T, D) (``families.classifier``)."""
        import torch

        from attn_cli.records.results import Classification
        from attn_cli.sources.checkpoint.families.classifier import classifier_logits, label_scores, pooled_position

        c = self.classifier
        assert c is not None
        with torch.inference_mode():
            logits = classifier_logits(self._family, self._weights, c, hidden, tokens.ids).cpu()  # (N,)
        scores = label_scores(c, logits)
        order = (scores if scores is not None else logits).argsort(descending=True, stable=True)[: max(1, k)].tolist()
        return Classification(
            pooled_position(c, tokens.ids), tuple(order), tuple(c.labels[i] for i in order),
            None if scores is None else tuple(float(scores[i]) for i in order), tuple(float(logits[i]) for i in order),
        )  # fmt: skip

    def generate(self, tokens: Tokens, n: int) -> tuple[int, ...]:
        """Greedy decoding: up to ``n`` new token ids after ``tokens``, each the argmax of the
        last position's logits (no logits processors, whatever generation_config.json
        says), stopping after an end-of-sequence id. Every step runs the whole forward
        over the sequence so far (no cache: the attention shown afterwards is the full
        sequence's, computed once more by ``trace``)."""
        from attn_cli.sources.checkpoint.families.greedy import greedy

        self._no_classifier("--generate")
        return greedy(self._family, self._weights, self.tokenizer, tokens.ids, n, self.eos_ids, device=self._weights.device)

    def ablate(self, tokens: Tokens, method: str) -> Ablation:
        """Every head's change in mean next-token loss when its slice of W_o's input is set to
        zero or to its mean over the text (``families.ablation.ablated_losses``); decoders with a
        language-model head only (UsageError for an encoder, ModelUnavailable without a head)."""
        from attn_cli.analysis.effects import Ablation, batch_losses, loss_rows
        from attn_cli.runtime import budget
        from attn_cli.sources.checkpoint.families.ablation import ablated_losses, ablation_batch

        if self.encoder:
            raise UsageError(f"--ablate: {self.info.name} is an encoder; the loss it changes is a decoder's next-token loss")
        self._no_classifier("--ablate")
        family, weights = self._family, self._weights
        head = family.head(weights)
        vocab = self.vocab_size(head)
        # the whole forward's needs, and each layer's input and concat kept from the clean run
        parts = self.estimate_bytes(len(tokens), [self.info.layers - 1], "weights", predict=True)
        parts["activations"] += self.info.layers * len(tokens) * (family.d_model + family.heads * family.head_dim) * FLOAT32
        batch, per_text = ablation_batch(family, len(tokens))
        parts["activations"] += batch * per_text  # a layer's ablations in flight together
        # the loss's block of logits, in the run's dtype, and its float32 copy when that is another
        size = DTYPES[self.info.dtype]
        rows = min(batch * (len(tokens) - 1), loss_rows(vocab))
        parts["activations"] += rows * vocab * (size + (FLOAT32 if size != FLOAT32 else 0))
        budget.check(
            parts,
            {"weights": "the weights of every layer and the head", "tables": "a layer's T x T tables",
             "activations": f"each layer's input and heads kept for {len(tokens)} tokens, and the logits"},
            {"weights": "use a smaller model", "tables": "use a shorter text", "activations": "use a shorter text"},
            doing="this ablation",
        )  # fmt: skip

        losses = batch_losses(lambda hidden, out: family.logits(weights, head, hidden, out), tokens.ids[1:], vocab)  # next tokens
        clean, ablated = ablated_losses(family, weights, tokens, losses, method, weights.device)
        return Ablation(method, clean, tuple(tuple(value - clean for value in row) for row in ablated))

    def vocab_size(self, head: Head) -> int:
        """V: the rows of the head's matrix (from the safetensors header)."""
        return int(self._weights.entry(head.weight).shape[0])

    def _check_layers(self, layers: Sequence[int]) -> list[int]:
        kept = list(layers)
        if not kept:
            raise UsageError("no layers chosen; give --layer an index (0, -1 for the last), a list or all")
        for layer in kept:
            if not 0 <= layer < self.info.layers:
                raise UsageError(f"layer {layer} is out of range: {self.info.source} has layers 0 to {self.info.layers - 1}")
        return kept


def predictions_of(tokenizer: CheckpointTokenizer, ids: torch.Tensor, probs: torch.Tensor, logits: torch.Tensor) -> Predictions:
    """Each position's top K (``analysis.effects.top_k``'s (T, K) tensors) with the tokenizer's
    text of every predicted id, and its printable label."""
    from attn_cli.records.results import Predictions

    decoded = tokenizer.id_texts([int(i) for i in ids.reshape(-1)])
    width = ids.shape[-1]
    texts = tuple(tuple(decoded[r * width : (r + 1) * width]) for r in range(ids.shape[0]))
    labels = tuple(tuple(visible(text) for text in row) for row in texts)
    return Predictions(ids.cpu(), probs.cpu(), logits.float().cpu(), texts, labels)
