"""Comparing statistics gathered from blocks with the whole table's (``attention_stats``)."""

from __future__ import annotations

import dataclasses

import pytest

from attn_cli.analysis.stats import HeadStats


def assert_same_stats(got: list[HeadStats], want: list[HeadStats]) -> None:
    """Every field to the bit but the distance profile, a float64 sum over rows whose order follows
    the blocks: to 1e-12."""
    assert [dataclasses.replace(s, distance_mass=None) for s in got] == [dataclasses.replace(s, distance_mass=None) for s in want]
    for g, w in zip(got, want):
        assert (g.distance_mass is None) == (w.distance_mass is None)
        if g.distance_mass is not None:
            assert g.distance_mass == pytest.approx(w.distance_mass, abs=1e-12, rel=0)
