from hypothesis import given, strategies as st

from agentserve.ingress.output.stop_strings import StopStrings


def feed_all(pieces, stops):
    s = StopStrings(stops)
    out = "".join(s.feed(p) for p in pieces)
    return out + s.flush(), s.hit


@given(st.text(alphabet="abST", max_size=40), st.data())
def test_split_anywhere_equals_whole(text, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
    whole = text.split("ST")[0] if "ST" in text else text
    assert feed_all(pieces, ["ST"]) == (whole, "ST" in text)


def test_no_stops_passes_through():
    assert feed_all(["a", "b"], []) == ("ab", False)


def test_earliest_of_several_stops_wins():
    assert feed_all(["xx END yy STOP"], ["STOP", "END"]) == ("xx ", True)
