"""Stand-in for the `ray` Python package in the launch tests: the cluster is $STANDIN_DIR/ray/nodes
(one file per node holding its GPU count), as the stand-in `ray` CLI writes it."""
import os

_DIR = os.path.join(os.environ.get("STANDIN_DIR", "/nonexistent"), "ray")


def init(address=None, **_):
    if not os.path.exists(os.path.join(_DIR, "head-up")):
        raise ConnectionError("no Ray head")


def _nodes():
    root = os.path.join(_DIR, "nodes")
    return {n: int(open(os.path.join(root, n)).read() or 0) for n in os.listdir(root)}


def nodes():
    return [{"NodeID": n, "Alive": True} for n in _nodes()]


def cluster_resources():
    return {"GPU": float(sum(_nodes().values()))}
