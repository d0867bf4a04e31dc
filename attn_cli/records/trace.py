"""What every renderer reads: a source-independent trace of one text's attention.

A source (the seeded toy model, a trained checkpoint, a saved file: ``attn_cli.sources``)
turns ``Tokens`` into a ``Trace``: the tokens, what ran (``ModelInfo``, with the source's
own words for it: ``attn_cli.records.about``) and the kept layers: ``LayerAttention``
(every tensor), or the lighter ``LayerWeights`` when the selection keeps the weights only
(``attn_cli.records.layers``). Renderers (tables, heatmap, export) never look at what made
it; explain's walk-through of the toy reads the toy's settings (``ModelInfo.config``).

No torch at import time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from attn_cli.records.about import About
from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.records.results import Classification, Predictions
    from attn_cli.records.results import Rollout, Target
    from attn_cli.records.layers import LayerWeights
    from attn_cli.records.tokens import Tokens, Truncation

TOY = "toy"
EXTERNAL = "external"  # the family of attention computed outside attn-cli (attn_cli.from_attentions)
SHORT_NAME = 40  # characters of a source shown whole in titles


# An encoder-decoder's stacks (--stack): the source's self-attention, the decoder's causal
# self-attention, and cross-attention from the decoder's inputs (rows) to the source (columns)
STACKS = ("encoder", "decoder", "cross")
ONE_STACK = "self"  # the name of a model of one stack's only stack in ``Trace.stacks``
# what --generate did when an encoder-decoder's first greedy token was its end-of-sequence
ENDED_AT_ONCE = "the model ended the target at once (its first token was end-of-sequence), so the decoder reads only its start token"

LayerT = TypeVar("LayerT", bound="LayerWeights", covariant=True)


@dataclasses.dataclass(frozen=True)
class Anatomy:
    """How a checkpoint's family computes a layer, in words: what the walk-through
    (`explain --model`) says, declared by the family rather than guessed from its name."""

    first_hidden: str  # h_0, the first layer's input
    layer_input: str  # x, what a layer's projections read, from h_L
    out_proj: str  # the checkpoint's name for W_o
    weights_note: str = ""  # how the file stores W_q, W_k, W_v, when not as nn.Linear's (out, in)
    rotary: str | None = None  # what rotates queries and keys after the projection (RoPE); None: nothing


class Settings(Protocol):
    """A source's own settings (the toy's resolved ``Config``): opaque here and to every view
    but explain's walk-through of that source's steps; the JSON writes ``as_dict()``."""

    def as_dict(self) -> dict[str, object]: ...


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What produced the attention, and what its source says about it (``about``)."""

    source: str  # "toy", or the checkpoint's folder or ORG/NAME as given
    architecture: str  # config.json's architectures[0]; "toy" for the seeded model
    family: str  # the adapter that computed it: "toy", "gpt2", "bert", "llama", "gemma2", ... (registry.MODEL_TYPES)
    layers: int
    heads: int  # query heads per layer
    kv_heads: int  # key/value heads per layer (== heads without grouped-query attention)
    head_dim: int  # Dk
    d_model: int  # D
    d_v: int | None = None  # Dv when it differs from head_dim (the toy's --d-v)
    dtype: str = "float32"
    revision: str | None = None  # the snapshot a cache lookup found (its commit hash), or None
    path: str | None = None  # the folder the weights were read from
    max_positions: int | None = None  # longest text the model takes; None: no limit
    qkv_bias: bool = False
    out_proj: bool = False  # a W_o after the heads are concatenated
    projections: bool = True  # False: Q = K = V = X (the toy's --no-projections)
    dropout: float = 0.0  # dropout on the weights before they mix the values (the toy's --dropout)
    config: Settings | None = None  # the source's own settings, as the JSON's config (the toy's); None: none
    about: About = About()  # the source's words for every view (attn_cli.records.about); a trained model's by default
    input_text: str = "X"  # what each layer's projections read, in words (headers, explain)
    threads: int | None = None  # torch's intra-op threads the trace was computed with (set per trace)
    anatomy: Anatomy | None = None  # a checkpoint family's steps in words; None for the toy
    model_type: str | None = None  # config.json's model_type (its text model's, when nested); None for the toy
    decoder_layers: int | None = None  # an encoder-decoder's decoder (layers, heads: encoder's); None: one stack
    decoder_heads: int | None = None
    decoder_head_dim: int | None = None

    @property
    def name(self) -> str:
        """A short name for titles: the source as given, or the end of a long path."""
        if len(self.source) <= SHORT_NAME or self.path is None:
            return self.source
        parts = self.source.rstrip("/").split("/")
        return "…/" + "/".join(parts[-2:])

    @property
    def trained(self) -> bool:
        return self.family != TOY

    @property
    def value_dim(self) -> int:
        return self.d_v if self.d_v is not None else self.head_dim

    def as_decoder(self) -> ModelInfo:
        """An encoder-decoder's sizes as its decoder's (and cross-attention's)."""
        return dataclasses.replace(
            self, layers=self.decoder_layers or 0, heads=self.decoder_heads or 0, kv_heads=self.decoder_heads or 0,
            head_dim=self.decoder_head_dim or self.head_dim,
        )  # fmt: skip

    def kv_head(self, head: int) -> int:
        """The key/value head query head ``head`` shares (grouped-query attention)."""
        return head // (self.heads // self.kv_heads)

    def as_dict(self) -> dict[str, Any]:
        """The ``model`` object of JSON schema 2."""
        data: dict[str, Any] = {
            "source": self.source,
            "revision": self.revision,
            "architecture": self.architecture,
            "family": self.family,
            "model_type": self.model_type,
            "layers": self.layers,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "d_model": self.d_model,
            "dtype": self.dtype,
            "threads": self.threads,
        }
        if self.decoder_layers is not None:
            data["decoder_layers"], data["decoder_heads"] = self.decoder_layers, self.decoder_heads
        if self.config is not None:
            data["config"] = self.config.as_dict()
        return data


@dataclasses.dataclass(frozen=True)
class Hiding:
    """What ``--hide-tokens`` took out of a trace's tables and pictures."""

    hidden: tuple[int, ...]  # positions in the full text
    kept: tuple[int, ...]  # the others, in order
    labels: tuple[str, ...]  # the hidden tokens' labels
    note: str | None = None  # for the user, once (``special`` on a text that has none)

    @property
    def active(self) -> bool:
        return bool(self.hidden)


@dataclasses.dataclass(frozen=True)
class Stack(Generic[LayerT]):
    """One stack of attention as plain data (``Trace.stacks``): its rows (the queries), its
    columns (the keys), its layers and what --hide-tokens hides in each. Self-attention's
    columns are its rows (``key_text``, ``key_tokens`` and ``key_hiding`` the rows' own);
    cross-attention's rows are the decoder's inputs and its columns the source's."""

    name: str  # "encoder", "decoder" or "cross"; ONE_STACK for a model of one stack
    text: str  # the rows' text
    tokens: Tokens  # the rows' tokens
    key_text: str  # the columns' text
    key_tokens: Tokens  # the columns' tokens
    layers: tuple[LayerT, ...]
    model: ModelInfo  # this stack's sizes: the decoder's layers and heads for the decoder and cross-attention
    chosen_heads: tuple[int, ...] | None = None  # the heads chosen to show (--head); None: every head
    hiding: Hiding | None = None  # the rows' hidden tokens
    key_hiding: Hiding | None = None  # the columns' hidden tokens
    rollout: Rollout | None = None  # attention rollout through this stack's layers, when it was asked of this stack
    texts: tuple[str, str] | None = None  # an encoder-decoder's (source, target); None: a model of one stack

    @property
    def cross(self) -> bool:
        """True where the rows and the columns are two texts (cross-attention)."""
        return self.name == "cross"

    @property
    def shown_heads(self) -> tuple[int, ...]:
        return self.chosen_heads if self.chosen_heads is not None else tuple(range(self.model.heads))


@dataclasses.dataclass(frozen=True)
class StackView:
    """Which of an encoder-decoder's stacks a trace of one stack is (``Trace.stack``): its name,
    the (source, target) texts it came from, and, for cross-attention, its columns (the
    source's tokens and what --hide-tokens hides in them; a self-attention's are its rows)."""

    name: str  # "encoder", "decoder" or "cross"
    texts: tuple[str, str]
    key_tokens: Tokens | None = None
    key_hiding: Hiding | None = None


@dataclasses.dataclass(frozen=True)
class Trace(Generic[LayerT]):
    """One text through one source: its tokens and the kept layers, in order.
    ``Trace[LayerAttention]`` holds every tensor; ``Trace[LayerWeights]`` (a
    ``keep="weights"`` selection) the weights only."""

    text: str
    tokens: Tokens
    model: ModelInfo
    layers: tuple[LayerT, ...]
    chosen_heads: tuple[int, ...] | None = None  # the heads chosen to show (--head); None: every head
    pair: str | None = None  # the second segment (--pair), when there is one
    hiding: Hiding | None = None  # the tokens --hide-tokens takes out of tables and pictures
    renormalized: bool = False  # True: this is ``shown()``, hidden tokens left out and rows renormalized
    rollout: Rollout | None = None  # attention rollout through the last kept layer (--rollout; attn_cli.analysis.rollout)
    flow: Rollout | None = None  # attention flow through the last kept layer (--what flow; attn_cli.analysis.flow), a model of one stack
    maps: Mapping[str, Rollout] = dataclasses.field(default_factory=dict)  # the attribution maps through the last kept layer, by JSON name
    explained: Target | None = None  # the output attention x gradient explains (maps["attention_gradient"])
    predictions: Predictions | Classification | None = None  # every position's top-K next tokens or fillers, or a classifier's labels (--predict)
    prompt_length: int | None = None  # --generate: the tokens from here on are the model's; None: no generation
    generated_text: str | None = None  # --generate: the new tokens decoded, as they continue the text
    ended_at_once: bool = False  # --generate on an encoder-decoder: its first token was end-of-sequence (ENDED_AT_ONCE)
    # An encoder-decoder (--target): ``tokens`` and ``layers`` are its encoder's, ``others`` its
    # decoder's and cross-attention's stacks; a view of one of its stacks (``stack``) says which in ``view``
    others: tuple[Stack[LayerT], ...] = ()
    view: StackView | None = None
    queries: tuple[int, ...] = ()  # --query: the query rows kept whole, in order
    row_scores: bool = False  # --show scores with --query: those rows' raw scores Q K^T beside their weights
    # Why the kept layers are ``LayerSummary`` records (statistics and chosen rows) and not their
    # tables, in a sentence for the user (the size they would take, how to get them); None: tables
    tables_omitted: str | None = None

    def combined(self, name: str) -> Rollout | None:
        """The map through the layers named ``name`` (``records.results.COMBINED``), None where the run has none."""
        return self.rollout if name == "rollout" else self.flow if name == "flow" else self.maps.get(name)

    @property
    def truncated(self) -> Truncation | None:
        """What --truncate (``truncate=True``) cut from the text, which ``tokens`` begin; None: nothing."""
        return self.tokens.truncated

    @property
    def generated(self) -> tuple[int, ...]:
        """The positions --generate added (none without it)."""
        return tuple(range(self.prompt_length, len(self.tokens))) if self.prompt_length is not None else ()

    def generation(self, quoted: Callable[[str], str] = repr) -> str | None:
        """What --generate wrote, as a header's "generated" row says it: a decoder's new tokens
        after the prompt, or an encoder-decoder's target (``quoted``: how a view quotes text).
        None without --generate."""
        if self.prompt_length is not None:
            added = len(self.tokens) - self.prompt_length
            return f"{added} token{'s' if added != 1 else ''} from position {self.prompt_length} (greedy): {quoted(self.generated_text or '')}"
        if self.generated_text is None:
            return None
        return "nothing: the first token was end-of-sequence" if self.ended_at_once else f"the target (greedy): {quoted(self.generated_text)}"

    @property
    def stacks(self) -> dict[str, Stack[LayerT]]:
        """The stacks this trace carries, by name, each a ``Stack``: an encoder-decoder's
        "encoder", "decoder" and "cross" (in that order); a view of one of them (``stack``):
        that one alone; a model of one stack: its one, named ONE_STACK. More than one entry:
        an encoder-decoder's whole trace. The first is ``own_stack``."""
        own = self.own_stack
        return {own.name: own, **{stack.name: stack for stack in self.others}}

    @property
    def own_stack(self) -> Stack[LayerT]:
        """The stack this trace's own ``tokens`` and ``layers`` are: a model of one stack's, a
        view's, or an encoder-decoder's encoder (its whole trace's)."""
        view = StackView("encoder", (self.text, self.others[0].text)) if self.others else self.view
        if view is None:
            return Stack(ONE_STACK, self.text, self.tokens, self.text, self.tokens, self.layers, self.model,
                         self.chosen_heads, self.hiding, self.hiding, self.rollout)  # fmt: skip
        cross = view.key_tokens is not None
        return Stack(
            name=view.name, text=self.text, tokens=self.tokens, key_text=view.texts[0] if cross else self.text,
            key_tokens=view.key_tokens if cross else self.tokens, layers=self.layers, model=self.model, chosen_heads=self.chosen_heads,
            hiding=self.hiding, key_hiding=view.key_hiding if cross else self.hiding, rollout=self.rollout, texts=view.texts,
        )  # fmt: skip

    @property
    def rolled_out(self) -> Stack[LayerT] | None:
        """The stack whose layers --rollout multiplied (its ``rollout``): this trace's own, or an
        encoder-decoder's decoder; None without a rollout."""
        return next((stack for stack in self.stacks.values() if stack.rollout is not None), None)

    @property
    def view_stack(self) -> Stack[LayerT] | None:
        """The stack a view of one stack (``stack``) draws, one of an encoder-decoder's; None for
        a model of one stack and for an encoder-decoder's whole trace."""
        return self.own_stack if self.view is not None else None

    def in_stack(self, name: str | None) -> Trace:
        """What one-stack views (tables, pictures, explain, heads) draw: an encoder-decoder's stack
        ``name`` (cross-attention by default; the encoder where the trace has its attribution maps), a
        model of one stack's trace as it is (naming a stack for it is a UsageError)."""
        return self.stack(name or ("encoder" if self.maps else "cross")) if self.others or name is not None else self

    def stack(self, name: str) -> Trace:
        """An encoder-decoder's stack ``name`` as a trace of its own, which every renderer draws:
        "encoder" (the source), "decoder" (the decoder's inputs, causal) or "cross" (rows: the
        decoder's inputs, columns: the source). Raises UsageError for a trace of one stack."""
        if not self.others:
            raise UsageError(f"--stack {name}: this model has one stack; --stack is for encoder-decoder models (with --target)")
        stacks = self.stacks
        if name not in stacks:
            raise UsageError(f"--stack {name}: choose {', '.join(STACKS)}")
        texts = (self.text, stacks["decoder"].text)
        if name == "encoder":
            return dataclasses.replace(
                self, others=(), view=StackView(name, texts), predictions=None, generated_text=None, ended_at_once=False
            )  # fmt: skip
        chosen = stacks[name]
        view = StackView(name, texts, self.tokens, self.hiding) if chosen.cross else StackView(name, texts)
        return dataclasses.replace(  # the --query rows and the tables a run in blocks left out are the encoder's
            self, text=chosen.text, tokens=chosen.tokens, model=chosen.model, layers=chosen.layers, pair=None,
            chosen_heads=chosen.chosen_heads, hiding=chosen.hiding, rollout=chosen.rollout, others=(), view=view, maps={},
            queries=(), row_scores=False, tables_omitted=None,
        )  # fmt: skip

    @property
    def shown_heads(self) -> tuple[int, ...]:
        return self.chosen_heads if self.chosen_heads is not None else tuple(range(self.model.heads))

    def layer(self, index: int) -> LayerT:
        """The kept layer with model index ``index``."""
        for layer in self.layers:
            if layer.layer == index:
                return layer
        raise KeyError(index)


def encoder_decoder_trace(
    encoder: Trace[LayerT],
    target: str,
    target_tokens: Tokens,
    decoder_layers: tuple[LayerT, ...],
    cross_layers: tuple[LayerT, ...],
    decoder_heads: tuple[int, ...] | None = None,
    decoder_rollout: Rollout | None = None,
) -> Trace[LayerT]:
    """An encoder-decoder's whole trace: ``encoder`` (the source's tokens and the encoder's
    layers, heads and rollout; its ``model`` the whole model's) with the decoder's
    self-attention over ``target_tokens`` and cross-attention from them to the source as its
    ``others``, with the decoder's heads and the decoder's rollout, if any."""
    texts = (encoder.text, target)
    model = encoder.model.as_decoder()
    decoder = Stack("decoder", target, target_tokens, target, target_tokens, decoder_layers, model, decoder_heads,
                    rollout=decoder_rollout, texts=texts)  # fmt: skip
    cross = Stack("cross", target, target_tokens, encoder.text, encoder.tokens, cross_layers, model, decoder_heads, texts=texts)
    return dataclasses.replace(encoder, others=(decoder, cross))
