"""One name, one meaning (issue 34): the API names what it keeps as the command line does.
``head=`` keeps heads as --head, ``heads=`` is the toy's number of heads as --heads, ``layer=``
keeps layers as --layer. The first release's names still work: ``layers=`` and ``num_heads=``
quietly (they meant what they mean), ``heads=`` as the heads to keep wherever it cannot be a
number of heads, with one DeprecationWarning that points at the caller's line."""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path
from typing import Any

import invoking
import pytest
import torch

import attn_cli
from attn_cli.runtime.errors import UsageError

invoke = functools.partial(invoking.invoke, code=0)
SAW = "I saw a saw"
OLD_HEADS = "keeps heads: write head="


def quietly(make: Any) -> Any:
    """``make()``, failing on any warning: the new names warn about nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return make()


def test_heads_is_the_toys_number_and_head_keeps_heads_as_on_the_command_line() -> None:
    t = quietly(lambda: attn_cli.trace(SAW, tokenizer="words", heads=4, head=[1, 3], layer=0))
    assert t.model.heads == 4 and t.shown_heads == (1, 3)
    cli = invoke("run", SAW, "-t", "words", "--heads", "4", "--head", "1,3", "--layer", "0", "-F", "json").stdout
    assert t.to_dict() == json.loads(cli)
    # the control: the command line without --head keeps every head, and the bytes differ
    assert json.loads(invoke("run", SAW, "-t", "words", "--heads", "4", "-F", "json").stdout) != t.to_dict()


@pytest.mark.parametrize(
    "keywords, heads, shown",
    [
        ({"num_heads": 4, "heads": [1, 3]}, 4, (1, 3)),  # the first release's docs: num_heads= beside heads=
        ({"num_heads": 2, "heads": 1}, 2, (1,)),
        ({"heads": 0}, 1, (0,)),  # the toy's one head, by the first release's default
        ({"heads": "all"}, 1, (0,)),
    ],
    ids=["num_heads= and a list", "num_heads= and an index", "index 0", "'all'"],
)
def test_the_old_heads_still_keeps_heads_with_a_warning(keywords: dict, heads: int, shown: tuple[int, ...]) -> None:
    with pytest.warns(DeprecationWarning, match=OLD_HEADS) as caught:
        t = attn_cli.trace(SAW, tokenizer="words", **keywords)
    assert t.model.heads == heads and t.shown_heads == shown
    assert len(caught) == 1 and caught[0].filename == __file__ and "\n" not in str(caught[0].message)


def test_the_old_heads_with_a_checkpoint_keeps_heads(gpt2_folder: Path) -> None:
    """A checkpoint has its own number of heads: heads= there is the first release's, always."""
    with pytest.warns(DeprecationWarning, match=OLD_HEADS):
        old = attn_cli.trace("the cat sat", model=gpt2_folder, heads=1, layers=0)
    new = quietly(lambda: attn_cli.trace("the cat sat", model=gpt2_folder, head=1, layer=0))
    assert old.shown_heads == new.shown_heads == (1,) and old.to_json() == new.to_json()


def test_a_number_of_heads_warns_about_nothing() -> None:
    """The control of the warning: heads=2 alone is the toy's two heads, as --heads 2."""
    t = quietly(lambda: attn_cli.trace(SAW, tokenizer="words", heads=2))
    assert t.model.heads == 2 and t.shown_heads == (0, 1)
    assert t.to_json() == invoke("run", SAW, "-t", "words", "--heads", "2", "-F", "json").stdout.rstrip("\n")


def test_the_old_layers_and_num_heads_are_quiet_aliases() -> None:
    old = quietly(lambda: attn_cli.trace(SAW, tokenizer="words", num_heads=2, layers=-1))
    new = attn_cli.trace(SAW, tokenizer="words", heads=2, layer=-1)
    assert old.to_json() == new.to_json()


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"num_heads": 2, "heads": [0], "head": 1}, "heads= and head= both choose the heads to keep: give head= alone"),
        ({"layers": 0, "layer": 0}, "layers= and layer= both choose the layers to keep: give layer= alone"),
    ],
)
def test_both_names_at_once_is_a_usage_error(keywords: dict, message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(UsageError, match=message):
            attn_cli.trace(SAW, tokenizer="words", **keywords)


def test_heatmap_draws_the_heads_head_names_and_the_old_heads_with_a_warning() -> None:
    t = attn_cli.trace(SAW, tokenizer="words", heads=4)

    def drawn(fig: Any) -> list[Any]:
        return [torch.tensor(ax.images[0].get_array()) for ax in fig.axes if ax.images]

    new = drawn(quietly(lambda: t.heatmap(head=[1, 3])))
    with pytest.warns(DeprecationWarning, match=r"Trace.heatmap\(heads=\[1, 3\]\): write head=\[1, 3\], as --head") as caught:
        old = drawn(t.heatmap(heads=[1, 3]))
    assert caught[0].filename == __file__
    assert len(new) == len(old) == 2 and all(torch.equal(a, b) for a, b in zip(new, old))
    torch.testing.assert_close(new[1], t.weights(head=3), atol=1e-7, rtol=0)
    assert len(drawn(t.heatmap(head=2))) == 1 and len(drawn(t.heatmap())) == 4  # an index; the control: every head
    with pytest.raises(UsageError, match="heads= and head= both choose the heads to draw"):
        t.heatmap(head=1, heads=[1])
