"""Comparing statistics gathered from blocks with the whole table's (``attention_stats``)."""

from __future__ import annotations

import dataclasses

import pytest

from attn_cli.analysis.stats import HeadStats


APPROXIMATE = ("entropy_bits", "effective_tokens", "distance_mass")


def assert_same_stats(got: list[HeadStats], want: list[HeadStats]) -> None:
    """Every field to the bit but the entropy (float32 terms in blocks, float64 in stats.py: to
    1e-6 bits, and 2 ** bits with it) and the distance profile (each block's rows summed in float32,
    a few hundred terms a distance: to 1e-7)."""
    blank = dict.fromkeys(APPROXIMATE)
    assert [dataclasses.replace(s, **blank) for s in got] == [dataclasses.replace(s, **blank) for s in want]
    for g, w in zip(got, want):
        assert g.entropy_bits == pytest.approx(w.entropy_bits, abs=1e-6, rel=0)
        assert g.effective_tokens == pytest.approx(w.effective_tokens, rel=1e-6)
        assert (g.distance_mass is None) == (w.distance_mass is None)
        if g.distance_mass is not None:
            assert g.distance_mass == pytest.approx(w.distance_mass, abs=1e-7, rel=0)
