"""The one percentile definition: linear interpolation between closest ranks over the raw samples."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentserve.bench.stats import P99_MIN_SAMPLES, drop_warmup, p50, percentile, summary

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=1, max_size=300)


def test_small_known_values():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 0) == 1.0
    assert percentile(xs, 100) == 4.0
    assert percentile(xs, 50) == 2.5  # between the two middle samples, as statistics.median
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0


def test_no_samples_is_nan_and_q_is_checked():
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    with pytest.raises(ValueError):
        percentile([1.0], -1)


@given(samples, st.floats(min_value=0, max_value=100))
def test_matches_numpy_linear(xs, q):
    assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q, method="linear")), rel=1e-9, abs=1e-6)


@given(samples)
def test_p50_is_the_median(xs):
    assert p50(xs) == pytest.approx(statistics.median(xs), rel=1e-9, abs=1e-6)


@given(samples, st.floats(min_value=0, max_value=100), st.floats(min_value=0, max_value=100))
def test_monotone_in_q_and_within_range(xs, q1, q2):
    lo, hi = sorted((q1, q2))
    assert min(xs) <= percentile(xs, lo) <= percentile(xs, hi) + 1e-6 <= max(xs) + 1e-6


@given(samples, st.permutations(list(range(10))))
def test_order_of_samples_does_not_matter(xs, _perm):
    assert percentile(xs, 90) == percentile(list(reversed(xs)), 90)


def test_summary_reports_p99_only_with_enough_samples():
    few = [float(i) for i in range(P99_MIN_SAMPLES - 1)]
    assert set(summary(few)) == {"n", "p50", "p90"}
    many = [float(i) for i in range(P99_MIN_SAMPLES)]
    s = summary(many)
    assert set(s) == {"n", "p50", "p90", "p99"}
    assert s["n"] == P99_MIN_SAMPLES and s["p50"] == 49.5 and s["p99"] == pytest.approx(98.01)


def test_summary_rounds():
    assert summary([1.23456, 2.34567], digits=3)["p50"] == 1.79
    assert summary([1.23456, 2.34567], digits=None)["p50"] == pytest.approx(1.790115)


def test_drop_warmup():
    assert drop_warmup([9.0, 1.0, 2.0], 1) == [1.0, 2.0]
    assert drop_warmup([1.0], 0) == [1.0]
    with pytest.raises(ValueError):
        drop_warmup([1.0], -1)
