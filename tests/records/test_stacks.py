"""``Trace.stacks``: every stack a trace carries as a plain ``Stack`` (rows, columns, layers,
sizes, heads, hiding, rollout), read the same from an encoder-decoder's whole trace and from
the view of one stack (``Trace.stack``) that the renderers draw."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from html_support import hand_trace

from attn_cli.records.results import Rollout
from attn_cli.records.trace import ONE_STACK, STACKS, Hiding, Stack, Trace, encoder_decoder_trace
from attn_cli.runtime.errors import UsageError


SOURCE_HIDING, TARGET_HIDING = Hiding((0,), (1, 2, 3, 4, 5), ("[CLS]",)), Hiding((4,), (0, 1, 2, 3), ("[SEP]",))


@functools.cache
def parts() -> tuple[Trace, Trace, Trace]:
    """The hand-built traces ``pair_trace`` is made of: the source's, the target's, cross-attention's."""
    return hand_trace(6, layers=2, heads=4), hand_trace(5, layers=3, heads=2, seed=1), hand_trace(5, layers=3, heads=2, seed=2)


def pair_trace(rollout_stack: str = "decoder") -> Trace:
    """A hand-built encoder-decoder: a source of 6 tokens (2 layers of 4 heads), a target of 5
    (3 decoder layers of 2 heads, and cross-attention's), each text with a token hidden."""
    source, target, cross = parts()
    model = dataclasses.replace(source.model, decoder_layers=3, decoder_heads=2, decoder_head_dim=8)
    rollout = Rollout(2, torch.eye(5), None)
    encoder = dataclasses.replace(
        source, model=model, text="a source", chosen_heads=(1, 3), rollout=rollout if rollout_stack == "encoder" else None
    )  # fmt: skip
    decoder_rollout = rollout if rollout_stack == "decoder" else None
    whole = encoder_decoder_trace(encoder, "a target", target.tokens, target.layers, cross.layers, None, decoder_rollout)
    source_hiding, target_hiding = SOURCE_HIDING, TARGET_HIDING
    decoder, cross = (
        dataclasses.replace(stack, hiding=target_hiding, key_hiding=source_hiding if stack.cross else target_hiding)
        for stack in whole.others
    )  # fmt: skip
    return dataclasses.replace(whole, hiding=source_hiding, others=(decoder, cross))


def test_a_model_of_one_stack_has_one_named_self() -> None:
    trace = hand_trace(6, layers=2, heads=4)
    (name, stack), *others = trace.stacks.items()
    assert (name, others) == (ONE_STACK, [])
    assert stack == trace.own_stack
    assert (stack.tokens, stack.key_tokens, stack.layers, stack.model) == (trace.tokens, trace.tokens, trace.layers, trace.model)
    assert (stack.text, stack.key_text, stack.texts, stack.cross) == (trace.text, trace.text, None, False)
    assert stack.shown_heads == trace.shown_heads == (0, 1, 2, 3)


def test_an_encoder_decoder_has_its_three_stacks_in_order() -> None:
    trace = pair_trace()
    stacks = trace.stacks
    assert tuple(stacks) == STACKS
    encoder, decoder, cross = stacks.values()
    assert trace.own_stack == encoder
    assert (encoder.tokens, encoder.key_tokens, encoder.layers) == (trace.tokens, trace.tokens, trace.layers)
    _, target, crossing = parts()
    assert (decoder.tokens, decoder.key_tokens, decoder.layers) == (target.tokens, target.tokens, target.layers)
    assert (cross.tokens, cross.key_tokens, cross.layers) == (target.tokens, trace.tokens, crossing.layers)
    assert (cross.text, cross.key_text, cross.texts) == ("a target", "a source", ("a source", "a target"))
    # the rows' and the columns' hiding: cross-attention's columns are the source's
    source_hiding, target_hiding = SOURCE_HIDING, TARGET_HIDING
    assert (encoder.hiding, encoder.key_hiding) == (source_hiding, source_hiding)
    assert (decoder.hiding, decoder.key_hiding) == (target_hiding, target_hiding)
    assert (cross.hiding, cross.key_hiding) == (target_hiding, source_hiding)
    # sizes and heads: the decoder's for the decoder and cross-attention
    assert (encoder.model.heads, decoder.model.heads, cross.model.layers) == (4, 2, 3)
    assert (encoder.shown_heads, decoder.shown_heads, cross.shown_heads) == ((1, 3), (0, 1), (0, 1))
    assert [s.rollout is not None for s in stacks.values()] == [False, True, False]
    assert [s.cross for s in stacks.values()] == [False, False, True]


@pytest.mark.parametrize("name", STACKS)
def test_a_view_of_one_stack_carries_that_stack_alone(name: str) -> None:
    trace = pair_trace(rollout_stack=name)
    view = trace.stack(name)
    assert view.stacks == {name: trace.stacks[name]}
    assert view.own_stack == trace.stacks[name]


def test_control_the_stacks_differ_where_the_trace_does() -> None:
    """The comparisons above can fail: a stack read from another trace, or another stack, is not equal."""
    trace = pair_trace()
    stacks = trace.stacks
    assert stacks["decoder"] != stacks["cross"]
    assert trace.stack("decoder").own_stack != stacks["cross"]
    other = dataclasses.replace(trace, others=tuple(dataclasses.replace(s, hiding=None) for s in trace.others))
    assert other.stacks["cross"] != stacks["cross"] and other.stacks["cross"].key_hiding == stacks["cross"].key_hiding
    with pytest.raises(UsageError, match="one stack"):
        hand_trace(6, layers=1, heads=2).stack("cross")
    assert isinstance(stacks["cross"], Stack)


@pytest.mark.parametrize("name", STACKS)
def test_view_stack_is_a_views_own_and_none_otherwise(name: str) -> None:
    trace = pair_trace()
    assert trace.stack(name).view_stack == trace.stacks[name]
    assert trace.view_stack is None  # the whole trace: three stacks, none drawn alone
    assert hand_trace(6, layers=1, heads=2).view_stack is None  # a model of one stack
