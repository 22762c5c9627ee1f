"""The replica's digest-chain memo (turn_digest.TurnChains) gives exactly the chain hashed from scratch, whatever a
session sends: the same turn objects extended (a delta applied), fresh copies of them (a whole resend), edits, other
headers (another caller or template setting), and more new turns than it looks back over."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.preprocess.turn_digest import TurnChains, chain
from agentserve.protocol import TextBlock, Turn


def _turn(n: int) -> Turn:
    return Turn(role=("user", "assistant")[n % 2], blocks=(TextBlock(text=f"turn {n}"),))


_steps = st.lists(st.tuples(st.sampled_from(["extend", "copy", "edit", "header"]), st.integers(1, 20)),
                  min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_the_memo_gives_the_chain_hashed_from_scratch(steps):
    chains = TurnChains(1 << 20)
    turns: tuple[Turn, ...] = (_turn(0),)
    header = b"h0"
    for n, (action, k) in enumerate(steps):
        if action == "extend":  # the earlier turns are the same objects (ConversationDelta.apply)
            turns = turns + tuple(_turn(100 * n + j) for j in range(k))
        elif action == "copy":  # equal turns, new objects (sent whole)
            turns = tuple(Turn(role=t.role, blocks=t.blocks) for t in turns)
        elif action == "edit":
            i = k % len(turns)
            turns = turns[:i] + (Turn(role=turns[i].role, blocks=(TextBlock(text=f"edited {n}"),)),) + turns[i + 1 :]
        else:
            header = f"h{k}".encode()
        assert chains.chain(header, turns) == chain(header, turns)
