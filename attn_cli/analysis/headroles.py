"""What each head does: per-head scores on a text and on a repeated probe, and a role.

Pure: tensors in, numbers out; no printing, no files. Shapes: H heads, T tokens,
R the probe's repeat length; ``weights`` is (H, T, T), rows sum to 1.

On the user's text (the definitions ``attn_cli.analysis.stats`` gives ``run``):
  - ``self_mass``: mean over every row i of w[i, i];
  - ``previous_mass``: mean of w[i, i-1] over rows 1 .. T-1;
  - ``first_mass``: mean of w[i, 0] over rows 1 .. T-1;
  - ``mean_entropy_bits``: mean over the rows of -sum_j w[i, j] log2 w[i, j];
  - ``special_mass``: mean over every row of the weight on the special tokens
    (BOS, [CLS], [SEP]); None when the text has none;
  - ``norm_special_mass``: the same share of the value-weighted norms
    (``attn_cli.analysis.norms``): mean over the rows of (norm on the special tokens /
    the row's norm), what the weight on them moves; None without special tokens or norms.
On the probe (leading special tokens, then R random ordinary ids, then the same
R ids again; ``start`` is the position of the first copy's first token), over
the positions p of the second copy, start + R .. start + 2R - 1:
  - ``induction_score``: mean of w[p, p - R + 1], the token after the previous
    occurrence of p's token (what an induction head copies from);
  - ``duplicate_score``: mean of w[p, p - R], the previous occurrence itself.

``role`` is decided by ``THRESHOLDS``: the roles whose score reaches its threshold
compete and the largest score wins; otherwise ``broad`` when the rows spread
their weight (entropy at least ``BROAD`` of the most their visible keys allow),
else ``mixed``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from attn_cli.analysis.stats import attention_stats

if TYPE_CHECKING:
    from attn_cli.analysis.effects import Ablation
    from attn_cli.records.summary import HeadStats, LayerSummary
    from attn_cli.records.trace import Trace

ROLES = ("previous", "first", "self", "duplicate", "induction", "broad", "mixed")
# A focused role needs this share of the attention on average (the probe's two as well).
THRESHOLDS = {"previous": 0.4, "first": 0.5, "self": 0.4, "duplicate": 0.3, "induction": 0.3}
BROAD = 0.75  # mean entropy / mean log2(visible keys) at or above this: broad
PROBE_LENGTH = 50  # R, the default repeat length


@dataclasses.dataclass(frozen=True)
class Probe:
    """The probe's token ids: ``start`` leading special tokens, then R ids twice."""

    ids: tuple[int, ...]
    start: int  # position of the first token of the first copy
    repeat_length: int  # R

    def as_dict(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "start": self.start, "repeat_length": self.repeat_length}


@dataclasses.dataclass(frozen=True)
class HeadScores:
    layer: int
    head: int
    self_mass: float | None  # None with the other masses: cross-attention (queries and keys of two texts)
    previous_mass: float | None
    first_mass: float | None
    mean_entropy_bits: float
    special_mass: float | None
    spread: float  # mean entropy / mean log2(visible keys): 1 = even over every visible key
    induction_score: float | None = None  # None: no probe
    duplicate_score: float | None = None
    norm_special_mass: float | None = None  # None: no special tokens, or no norms (weights from elsewhere)
    alignment: tuple[int, ...] | None = None  # cross-attention: each query's most attended key (a source token)
    sink_score: float | None = None  # ``attn_cli.analysis.stats``' first-token score; None for cross-attention
    distance_mass: tuple[float, ...] | None = None  # the distance profile over ``distance_bins``; None for cross-attention

    @property
    def role(self) -> str:
        return role_of(self)

    def as_dict(self) -> dict[str, Any]:
        """One object of ``heads[]`` in `attn-cli heads --format json`."""
        return {
            "layer": self.layer,
            "head": self.head,
            "self_mass": self.self_mass,
            "previous_mass": self.previous_mass,
            "first_mass": self.first_mass,
            "mean_entropy_bits": self.mean_entropy_bits,
            "special_mass": self.special_mass,
            "norm_special_mass": self.norm_special_mass,
            "induction_score": self.induction_score,
            "duplicate_score": self.duplicate_score,
            "role": self.role,
            **({"alignment": list(self.alignment)} if self.alignment is not None else {}),
            **({"sink_score": self.sink_score, "distance_mass": list(self.distance_mass)} if self.distance_mass is not None else {}),
        }


def role_scores(scores: HeadScores) -> dict[str, float]:
    """Each focused role's score (those that are known)."""
    values = {
        "previous": scores.previous_mass,
        "first": scores.first_mass,
        "self": scores.self_mass,
        "duplicate": scores.duplicate_score,
        "induction": scores.induction_score,
    }
    return {name: value for name, value in values.items() if value is not None}


def role_of(scores: HeadScores) -> str:
    reached = {name: value for name, value in role_scores(scores).items() if value >= THRESHOLDS[name]}
    if reached:
        return max(reached, key=reached.__getitem__)
    return "broad" if scores.spread >= BROAD else "mixed"


def text_scores(
    weights: torch.Tensor,
    *,
    layer: int,
    special: Sequence[bool] = (),
    mask: torch.Tensor | None = None,
    norms: torch.Tensor | None = None,
    cross: bool = False,
) -> list[HeadScores]:
    """(H, T, T) weights of one layer over a text -> one HeadScores per head.
    ``special`` (T,) flags the special tokens (the keys'); ``mask`` (T, T) True = hidden key;
    ``norms`` (H, T, T) the value-weighted norms, for ``norm_special_mass``; ``cross``:
    cross-attention's (H, T, S), without masses, with each query's alignment."""
    stats = attention_stats(weights, mask=mask, cross=cross)  # run's own numbers, head by head
    flags = torch.tensor(list(special), dtype=torch.bool) if any(special) else None  # (T,)
    special_mass: list[float | None] = [None] * len(stats)
    norm_special_mass: list[float | None] = [None] * len(stats)
    if flags is not None:
        special_mass = [weights[h][:, flags].double().sum(dim=-1).mean().item() for h in range(len(stats))]  # (T, S) -> (T,) -> ()
        if norms is not None:
            norm_special_mass = [_share(norms[h].double(), flags) for h in range(len(stats))]
    return scores_of(stats, layer=layer, special_mass=special_mass, norm_special_mass=norm_special_mass, cross=cross)


def summary_scores(summary: LayerSummary) -> list[HeadScores]:
    """``text_scores`` of a layer whose tables were not kept: from the statistics and the special
    tokens' mass its blocks left (no norms: ``norm_special_mass`` is None)."""
    special = list(summary.special_mass) if summary.special_mass is not None else [None] * len(summary.stats)
    return scores_of(summary.stats, layer=summary.layer, special_mass=special, norm_special_mass=[None] * len(special), cross=summary.cross)


def scores_of(
    stats: Sequence[HeadStats], *, layer: int, special_mass: Sequence[float | None], norm_special_mass: Sequence[float | None],
    cross: bool,
) -> list[HeadScores]:  # fmt: skip
    """One HeadScores per head from its statistics and its special tokens' masses."""
    # the most entropy a row can have: log2 of its visible keys, averaged over the rows
    most = math.fsum(math.log2(n) for n in stats[0].visible_keys) / len(stats[0].visible_keys) if stats else 0.0
    return [
        HeadScores(
            layer=layer, head=h, self_mass=st.self_mass, previous_mass=st.previous_mass, first_mass=st.first_mass,
            mean_entropy_bits=st.mean_entropy_bits, special_mass=special_mass[h],
            spread=st.mean_entropy_bits / most if most > 0 else 0.0, norm_special_mass=norm_special_mass[h],
            alignment=tuple(st.most_attended) if cross else None, sink_score=st.sink_score,
            distance_mass=None if st.distance_mass is None else tuple(st.distance_mass),
        )  # fmt: skip
        for h, st in enumerate(stats)
    ]


def _share(norms: torch.Tensor, flags: torch.Tensor) -> float | None:
    """Mean over the rows that move anything of (norm on the ``flags`` keys / the row's norm)."""
    totals = norms.sum(dim=-1)  # (T, T) -> (T,)
    moving = totals > 0  # (T,)
    if not bool(moving.any()):
        return None
    return (norms[moving][:, flags].sum(dim=-1) / totals[moving]).mean().item()  # (T', S) -> (T',) -> ()


def probe_scores(weights: torch.Tensor, probe: Probe) -> tuple[list[float], list[float]]:
    """(H, T, T) weights over the probe -> (induction_score, duplicate_score) per head."""
    r, start = probe.repeat_length, probe.start
    second = torch.arange(start + r, start + 2 * r)  # (R,) positions p of the second copy
    induction = weights[:, second, second - r + 1].double().mean(dim=-1)  # (H, R) -> (H,)
    duplicate = weights[:, second, second - r].double().mean(dim=-1)  # (H, R) -> (H,)
    return induction.tolist(), duplicate.tolist()


def with_probe(scores: Sequence[HeadScores], induction: Sequence[float], duplicate: Sequence[float]) -> list[HeadScores]:
    return [
        dataclasses.replace(s, induction_score=induction[s.head], duplicate_score=duplicate[s.head]) for s in scores
    ]


def make_probe(leading: Sequence[int], ordinary: Sequence[int], repeat_length: int, seed: int) -> Probe:
    """``leading`` ids, then ``repeat_length`` ids drawn (with replacement) from
    ``ordinary`` with a generator seeded by ``seed``, then the same ids again."""
    if repeat_length < 2:
        raise ValueError("the probe needs a repeat length of 2 or more")
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(ordinary), (repeat_length,), generator=generator).tolist()  # (R,)
    drawn = [ordinary[i] for i in picks]
    return Probe(tuple(leading) + tuple(drawn) * 2, len(leading), repeat_length)


@dataclasses.dataclass(frozen=True)
class HeadsReport:
    """One text's head scores (and the probe's, when it ran)."""

    trace: Trace  # the text's trace: its tokens and model
    heads: tuple[HeadScores, ...]  # layer by layer, head by head
    probe: Probe | None
    probe_note: str | None = None  # why there is no probe (--no-probe, the words tokenizer)
    ablation: Ablation | None = None  # --ablate: each head's change in next-token loss
