"""Exact expected events for every format's fixtures, fed whole, one character at a time, and randomly split."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fixtures import ALL_CASES
from .helpers import merged, run, split, summary

IDS = [f"{f.id}:{cid}" for f, cid, _, _ in ALL_CASES]


@pytest.mark.parametrize(("fam", "cid", "text", "expected"), ALL_CASES, ids=IDS)
def test_fixture_whole(fam, cid, text, expected):
    assert summary(run(fam.kw, [text])) == expected


@pytest.mark.parametrize(("fam", "cid", "text", "expected"), ALL_CASES, ids=IDS)
def test_fixture_char_by_char(fam, cid, text, expected):
    events = run(fam.kw, list(text))
    assert summary(events) == expected
    assert _strip_ids(merged(events)) == _strip_ids(merged(run(fam.kw, [text])))


def _strip_ids(events):
    return [e.__class__.__name__ + repr(getattr(e, "__dict__", None) or _fields(e)) for e in events]


def _fields(e):
    return {k: getattr(e, k) for k in e.__slots__ if k != "id"}


@pytest.mark.parametrize(("fam", "cid", "text", "expected"), ALL_CASES, ids=IDS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fixture_random_splits(fam, cid, text, expected, data):
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=min(40, len(text))))
    events = run(fam.kw, split(text, cuts))
    assert _strip_ids(merged(events)) == _strip_ids(merged(run(fam.kw, [text])))
    assert summary(events) == expected
