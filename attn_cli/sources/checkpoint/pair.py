"""An encoder-decoder checkpoint as a source of attention: its info, its tokenizer,
the decoder's inputs for a target, a memory estimate and the three stacks' layers.

The source text goes through the encoder; the decoder reads the target teacher-forced: the
labels are the tokenizer's encoding of the target with its special tokens (as
``tokenizer(text_target=TARGET)`` gives for BART and T5, whose targets share the source's
tokenizer), and the decoder's inputs are the labels shifted right (``Seq2Seq.decoder_inputs``).

Shapes: S source tokens, T decoder tokens, D d_model, H heads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.records.selection import Keep
from attn_cli.records.trace import ModelInfo
from attn_cli.sources.checkpoint.files import ROOT, WeightReader
from attn_cli.sources.checkpoint.model import DTYPES
from attn_cli.sources.checkpoint.marian import MarianTokenizer
from attn_cli.sources.checkpoint.tokenizer import CheckpointTokenizer

if TYPE_CHECKING:
    from attn_cli.analysis.effects import Ablation
    from attn_cli.records.layers import LayerWeights
    from attn_cli.records.summary import LayerSummary
    from attn_cli.sources.blocks import BlockPlan
    import torch

    from attn_cli.records.results import Predictions, Target
    from attn_cli.records.tokens import Tokens
    from attn_cli.sources.checkpoint.model import Checkpoint
    from attn_cli.sources.checkpoint.families.base import Head
    from attn_cli.sources.checkpoint.families.seq2seq import EncoderDecoder

FLOAT32 = 4


@dataclasses.dataclass(frozen=True)
class PairLayers:
    """The kept layers of each stack, in layer order: encoder (H, S, S), decoder (H, T, T),
    cross (H, T, S), float32 on the CPU."""

    encoder: tuple[LayerWeights, ...] | tuple[LayerSummary, ...]  # summaries where the encoder ran in blocks
    decoder: tuple[LayerWeights, ...]
    cross: tuple[LayerWeights, ...]


class PairCheckpoint:
    """One opened encoder-decoder checkpoint; config.json, the tokenizer and the safetensors
    headers are read when it opens, the weights when ``trace`` runs."""

    encoder = False  # not an encoder-only model: --pair does not apply

    def __init__(
        self, info: ModelInfo, model: EncoderDecoder, weights: WeightReader, tokenizer: CheckpointTokenizer | MarianTokenizer,
        eos_ids: frozenset[int] = frozenset(),
    ) -> None:  # fmt: skip
        self.info = info
        self.tokenizer = tokenizer
        self.model = model
        self.eos_ids = eos_ids  # where greedy decoding stops (generation_config.json, else config.json)
        self._weights = weights

    def encoder_checkpoint(self) -> Checkpoint:
        """The encoder alone as a checkpoint of one stack (a census reads each text through it): the
        same info (its layers and heads are the encoder's), weights and tokenizer."""
        from attn_cli.sources.checkpoint.model import Checkpoint

        return Checkpoint(self.info, self.model.encoder, self._weights, self.tokenizer, self.eos_ids)  # type: ignore[arg-type]

    def encode_target(self, target: str) -> Tokens:
        """The labels: the target's tokens with the tokenizer's special tokens (Marian: its
        target SentencePiece model and vocabulary)."""
        return self.tokenizer.encode_target(target)

    def decoder_tokens(self, labels: Tokens) -> Tokens:
        """The decoder's inputs: ``decoder_start_token_id``, then every label but the last."""
        ids = tuple(self.model.decoder.decoder_inputs(list(labels.ids)))
        special = self.tokenizer.special_ids()
        return self.tokenizer.tokens_from_ids(ids, tuple(i in special for i in ids))

    def estimate_bytes(
        self, n_source: int, n_target: int, keep: Keep = "all", *, predict: bool = False, norms: bool = False,
        blocks: tuple[int, int] | None = None,
    ) -> dict[str, int]:  # fmt: skip
        """What a trace of every layer of the three stacks needs, by part: weights (every
        tensor of both stacks, and the token rows read), tables (the kept (H, S, S),
        (H, T, T) and (H, T, S) weights, twice at ``keep="all"``, where the raw scores are
        derived too) and activations (the kept vectors and one layer in flight). ``blocks``
        (block bytes, chosen rows): the encoder in blocks, its statistics and rows for its tables,
        a block and a position bias's in flight for its (H, S, S)."""
        if blocks is not None:
            return self._blocked_bytes(n_source, n_target, keep, predict, *blocks)
        encoder, decoder = self.model.encoder, self.model.decoder
        s, t, d = n_source, n_target, encoder.d_model
        weights = sum(self._weights.entry(ROOT + name).numel for name in self._weights.names()) * DTYPES[self.info.dtype]
        he, hd = encoder.heads, decoder.heads
        le, ld = encoder.layers, decoder.layers
        per_table = 2 if keep == "all" else 1
        tables = (per_table + norms) * FLOAT32 * (le * he * s * s + ld * hd * (t * t + t * s))  # with norms, one more per head
        if norms:  # and the layers' (T, T) norms
            tables += FLOAT32 * (le * s * s + ld * (t * t + t * s))
        vectors = 6 if keep == "all" else 0  # x, queries, keys, values, concat, output: (N, D)-sized
        width = max(d, he * encoder.head_dim, hd * decoder.head_dim)
        kept = vectors * FLOAT32 * width * (le * s + 2 * ld * t + ld * s)
        n = max(s, t)
        in_flight = FLOAT32 * (8 * n * width + 2 * n * 4 * d + 2 * max(he, hd) * n * n)
        if predict:  # a block of (positions, V) logits and their softmax (the head's matrix is among the weights)
            from attn_cli.analysis.effects import block_rows

            vocab = self.vocab_size(decoder.head(self._weights))
            in_flight += 2 * FLOAT32 * min(t, block_rows(vocab)) * vocab
        return {"weights": weights, "tables": tables, "activations": kept + in_flight}

    def _blocked_bytes(self, s: int, t: int, keep: Keep, predict: bool, block_bytes: int, rows: int) -> dict[str, int]:
        """``estimate_bytes`` with the encoder in blocks: the decoder's own over S source tokens
        (its tables, cross-attention's, one decoder layer in flight), and the encoder's in blocks."""
        from attn_cli.sources.checkpoint.model import STATS_BYTES_PER_ROW

        encoder = self.model.encoder
        whole = self.estimate_bytes(0, t, keep, predict=predict)  # the decoder's tables and layer over no source
        decoder = self.model.decoder
        cross = (2 if keep == "all" else 1) * FLOAT32 * decoder.layers * decoder.heads * t * s  # (H, T, S) per layer
        width = max(encoder.d_model, encoder.heads * encoder.head_dim)
        in_flight = FLOAT32 * (2 * decoder.heads * t * s + 8 * s * width + 2 * s * encoder.d_ffn)  # and the encoder's MLP
        in_flight += (6 if keep == "all" else 0) * FLOAT32 * width * decoder.layers * s  # cross-attention's kept keys and values
        summaries = encoder.layers * encoder.heads * s * (STATS_BYTES_PER_ROW + rows * FLOAT32)
        return {
            "weights": whole["weights"], "tables": whole["tables"] + cross + summaries,
            "activations": whole["activations"] + in_flight + 2 * block_bytes,  # a block, and a bias's (T5) beside it
        }  # fmt: skip

    def trace(
        self, source: Tokens, decoder: Tokens, keep: Keep = "all", *, predict: int = 0, norms: bool = False, blocks: BlockPlan | None = None
    ) -> tuple[PairLayers, Predictions | None]:
        """Every layer of the three stacks over the source and the decoder's inputs, through the
        one layer loop (``seq2seq.pair_forward``); with ``predict`` K, every decoder position's
        top K next tokens through the model's head, softmax in float32; with ``norms``, every
        layer's value-weighted norms (``analysis.norms``: cross-attention's keys send the
        encoder's output); with ``blocks``, the encoder's layers in blocks (summaries)."""
        import torch

        from attn_cli.analysis.effects import top_k
        from attn_cli.sources.checkpoint.families.seq2seq import pair_forward
        from attn_cli.sources.checkpoint.model import PREDICT_DEFAULT, predictions_of

        model, weights = self.model, self._weights
        predict = PREDICT_DEFAULT if predict < 0 else predict  # --predict with no count
        head = model.decoder.head(weights) if predict else None
        done = pair_forward(model, weights, source, decoder, weights.device, keep, norms=norms, whole=head is not None, blocks=blocks)
        predictions = None
        if head is not None:
            hidden = done.hidden
            assert hidden is not None
            with torch.inference_mode():
                ids, probs, logits = top_k(
                    lambda rows: model.decoder.logits(weights, head, hidden[rows]), len(decoder), predict, self.vocab_size(head)
                )  # (T, K) each
            predictions = predictions_of(self.tokenizer, ids, probs, logits)
        return PairLayers(tuple(done.encoder), tuple(done.decoder), tuple(done.cross)), predictions

    def attention_gradient(self, source: Tokens, decoder: Tokens, token: str | None = None) -> tuple[list[torch.Tensor], Target]:
        """Each encoder layer's attention x gradient map (S, S) and the target it explains: the decoder's next token
        after its inputs (``token``, else the predicted one; ``families.gradient.pair_attention_gradients``)."""
        from attn_cli.sources.checkpoint.families.gradient import pair_attention_gradients
        from attn_cli.sources.checkpoint.targets import TargetScore

        score = TargetScore((self.model.decoder, self._weights, self.tokenizer, None), decoder, None, token)  # type: ignore[arg-type]
        return pair_attention_gradients(self.model, self._weights, source, decoder, score, self._weights.device), score.target

    def generate(self, source: Tokens, n: int, blocks: BlockPlan | None = None) -> tuple[int, ...]:
        """Greedy decoding of up to ``n`` target tokens: from ``decoder_start_token_id``, each
        step the argmax of the last decoder position's logits (no logits processors, whatever
        generation_config.json says), stopping after an end-of-sequence id. The encoder runs
        once (``blocks``: in blocks); each step runs the whole decoder over the tokens so far (no cache)."""
        from attn_cli.sources.checkpoint.families.greedy import greedy
        from attn_cli.sources.checkpoint.families.seq2seq import encode

        decoder, weights = self.model.decoder, self._weights
        decoder.head(weights)  # ModelUnavailable, naming what is missing, before the encoder runs
        memory = encode(self.model, weights, source, (), weights.device, blocks=blocks).output  # (S, D)
        return greedy(decoder, weights, self.tokenizer, [decoder.decoder_start], n, self.eos_ids, memory, weights.device)

    def ablate(self, source: Tokens, decoder: Tokens, labels: Sequence[int], method: str, stack: str) -> Ablation:
        """Each head of ``stack``'s (encoder, decoder or cross) change in the target's mean loss
        (teacher-forced: decoder position i predicts ``labels[i]``, as transformers' seq2seq loss)
        when its slice of W_o's input is set to zero or to its mean
        (``families.ablation.ablated_pair_losses``). The memory is checked first."""
        from attn_cli.analysis.effects import Ablation, batch_losses, loss_rows
        from attn_cli.runtime import budget
        from attn_cli.sources.checkpoint.families.ablation import ablated_pair_losses, ablation_batch

        decoder_stack, weights = self.model.decoder, self._weights
        head = decoder_stack.head(weights)
        vocab = self.vocab_size(head)
        s, t = len(source), len(decoder)
        family = self.model.encoder if stack == "encoder" else decoder_stack
        parts = self.estimate_bytes(s, t, "weights", predict=True)
        batch, per_text = ablation_batch(family, max(s, t))
        width = family.d_model + family.heads * family.head_dim  # a kept attention's input and concat, per row
        parts["activations"] += FLOAT32 * width * (family.layers * (s if stack == "encoder" else t)) + batch * per_text
        parts["activations"] += min(batch * t, loss_rows(vocab)) * vocab * 2 * FLOAT32  # the loss's block of logits
        budget.check(
            parts,
            {"weights": "the weights of both stacks and the head", "tables": "the three stacks' tables",
             "activations": f"each layer's input and heads kept for {s} source and {t} target tokens, and the logits"},
            {"weights": "use a smaller model", "tables": "use shorter texts", "activations": "use shorter texts"},
            doing="this ablation",
        )  # fmt: skip
        losses = batch_losses(lambda hidden, out: decoder_stack.logits(weights, head, hidden, out), labels, vocab)
        clean, ablated = ablated_pair_losses(self.model, weights, source, decoder, stack, losses, method, weights.device)
        return Ablation(method, clean, tuple(tuple(value - clean for value in row) for row in ablated))

    def vocab_size(self, head: Head) -> int:
        return int(self._weights.entry(head.weight).shape[0])
