"""The Responses store on PostgreSQL (a real server started for this module): a stored response and its
`previous_response_id` chain survive a restart of the Ingress replica that opened it, and entries are still scoped per key."""

from __future__ import annotations

from typing import Iterator

import psycopg
import pytest

from tests.integration.durable_graph import RestartableGraph, assert_chain_survived, graph_args, start_chain
from tests.postgres_server import postgres_server
from tests.support.keys import signing_key

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="module")
def graph(model_path, dsn, tmp_path_factory) -> Iterator[RestartableGraph]:
    state = {"backend": "postgres", "postgres_dsn": dsn, "data_dir": str(tmp_path_factory.mktemp("data"))}
    g = RestartableGraph(graph_args(state, secret_key=signing_key("postgres")))
    g.start()
    try:
        yield g
    finally:
        g.stop()


def test_chain_survives_an_ingress_replica_restart_on_postgres(graph, dsn):
    turn1, turn2 = start_chain(graph)
    with psycopg.connect(dsn) as conn:  # the entries are in the database, not in the replica
        (n,) = conn.execute("SELECT COUNT(*) FROM agentserve_responses WHERE id IN (%s, %s)", (turn1.id, turn2.id)).fetchone()
    assert n == 2
    graph.restart_ingress_replica()
    assert_chain_survived(graph, turn1, turn2)
