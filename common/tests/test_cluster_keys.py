import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster import NODES, SANDBOXES, EtcdKeys
from aenv_common.cluster.codec import decode, encode


def test_default_layout() -> None:
    keys = EtcdKeys()
    assert keys.node("n1") == b"/aenv/v1/nodes/n1"
    assert keys.sandbox("abc") == b"/aenv/v1/sandboxes/abc"
    assert keys.template("base") == b"/aenv/v1/templates/base"
    assert keys.snapshot("s1") == b"/aenv/v1/snapshots/s1"
    assert keys.scheduler_leader == b"/aenv/v1/scheduler/leader"


def test_custom_prefix_and_round_trip_of_ids() -> None:
    keys = EtcdKeys("/x/y")
    assert keys.collection(NODES) == b"/x/y/nodes/"
    assert keys.id_from_key(SANDBOXES, keys.sandbox("s42")) == "s42"


@pytest.mark.parametrize("bad", ["", "a/b"])
def test_ids_that_would_escape_their_key_are_rejected(bad: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        EtcdKeys().sandbox(bad)


@pytest.mark.parametrize("prefix", ["aenv", "/aenv/"])
def test_malformed_prefix_is_rejected(prefix: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        EtcdKeys(prefix)


def test_key_outside_collection_is_rejected() -> None:
    with pytest.raises(errors.InvalidArgument):
        EtcdKeys().id_from_key(NODES, b"/aenv/v1/sandboxes/x")


def test_codec_round_trip_is_deterministic() -> None:
    record = cluster_pb2.SandboxRecord(
        sandbox_id="s1", node_id="n1", state=cluster_pb2.SANDBOX_STATE_RUNNING,
        metadata={"b": "2", "a": "1"},
    )
    data = encode(record)
    assert decode(cluster_pb2.SandboxRecord, data) == record
    assert encode(decode(cluster_pb2.SandboxRecord, data)) == data


def test_corrupt_bytes_raise_internal() -> None:
    with pytest.raises(errors.Internal):
        decode(cluster_pb2.NodeRecord, b"\xff\xff\xff")
