"""SSE framing: the three APIs' streams split into events the same way however the bytes arrive."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agentserve.bench.client import SSEParser, parse_sse

names = st.one_of(st.none(), st.text(st.characters(categories=("Ll", "Lu", "Nd"), include_characters="._"),
                                      min_size=1, max_size=30))
data_lines = st.lists(st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=40),
                      min_size=1, max_size=3)
events = st.lists(st.tuples(names, data_lines), min_size=1, max_size=12)
eols = st.sampled_from(["\n", "\r\n", "\r"])


def encode(evs, eol: str, comments: bool = False) -> bytes:
    out = []
    for name, lines in evs:
        if comments:
            out.append(": keep-alive" + eol)
        if name is not None:
            out.append(f"event: {name}{eol}")
        out += [f"data: {line}{eol}" for line in lines]
        out.append(eol)
    return "".join(out).encode()


def split(blob: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(blob)) for c in cuts})
    chunks, last = [], 0
    for p in points + [len(blob)]:
        chunks.append(blob[last:p])
        last = p
    return chunks


@given(events, eols, st.booleans(), st.lists(st.integers(min_value=0, max_value=4000), max_size=30))
def test_any_chunking_gives_the_same_events(evs, eol, comments, cuts):
    blob = encode(evs, eol, comments)
    p = SSEParser()
    got = []
    for i, chunk in enumerate(split(blob, cuts)):
        got += [(e.event, e.data, e.t) for e in p.feed(chunk, float(i))]
    got += [(e.event, e.data, e.t) for e in p.close(99.0)]
    assert [(n, d) for n, d, _ in got] == [(name, "\n".join(lines)) for name, lines in evs]
    ts = [t for *_, t in got]
    assert ts == sorted(ts)  # stamped with the chunk that completed each event


def test_multibyte_utf8_split_inside_a_character():
    blob = 'data: {"delta": "héllo ✓"}\n\n'.encode()
    cut = blob.index("✓".encode()) + 1
    p = SSEParser()
    evs = p.feed(blob[:cut], 1.0) + p.feed(blob[cut:], 2.0)
    assert [json.loads(e.data)["delta"] for e in evs] == ["héllo ✓"] and evs[0].t == 2.0


def test_field_without_space_and_unknown_fields():
    evs = parse_sse(b"event:ping\ndata:{}\nid: 7\nretry: 10\n\ndata: [DONE]\n\n")
    assert [(e.event, e.data) for e in evs] == [("ping", "{}"), (None, "[DONE]")]


def test_a_stream_cut_before_its_blank_line_still_gives_its_last_event():
    assert [e.data for e in parse_sse(b"data: 1\n\ndata: 2")] == ["1", "2"]
