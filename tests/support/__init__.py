"""What the test modules share to run the real graph: the session's Ray cluster (cluster.py), the graph harness that
deploys apps on it (graph.py), and signing keys the start-up check accepts (keys.py)."""
