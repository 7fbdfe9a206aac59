"""The sandbox directory: the etcd mirror, overlaid for a while with what RPCs just answered."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2
from aenv_gateway.cluster.directory import InMemoryClusterView, Owner, SandboxDirectory

RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
NODE = cluster_pb2.NodeRecord(node_id="n1", nodeagent_address="127.0.0.1:1",
                              proxy_address="127.0.0.1:2")
OWNER = Owner("n1", "127.0.0.1:1", "127.0.0.1:2")


def directory() -> tuple[InMemoryClusterView, SandboxDirectory]:
    view = InMemoryClusterView()
    view.node_records["n1"] = NODE
    return view, SandboxDirectory(view, settle_s=0.0)


def created(view: InMemoryClusterView, directory: SandboxDirectory, sandbox_id: str
            ) -> cluster_pb2.SandboxRecord:
    record = cluster_pb2.SandboxRecord(sandbox_id=sandbox_id, node_id="n1", state=RUNNING)
    directory.remember(record, OWNER)
    return record


def ids(directory: SandboxDirectory) -> set[str]:
    return {r.sandbox_id for r in directory.records()}


def test_a_just_created_sandbox_is_listed_and_found_before_the_mirror_has_it() -> None:
    view, sandboxes = directory()
    created(view, sandboxes, "sbx-1")
    assert ids(sandboxes) == {"sbx-1"}
    located = sandboxes.find("sbx-1")
    assert located is not None and located.owner == OWNER


def test_a_sandbox_deleted_after_its_create_answered_is_neither_listed_nor_found() -> None:
    # Its VM crashed a moment after the create: the mirror saw it, then saw it deleted, while
    # the create's answer is still remembered.
    view, sandboxes = directory()
    view.sandbox_records["sbx-1"] = created(view, sandboxes, "sbx-1")
    view.delete_sandbox("sbx-1")
    assert ids(sandboxes) == set()
    assert sandboxes.find("sbx-1") is None


def test_a_deletion_seen_before_the_answer_does_not_hide_it() -> None:
    # The same id written again after the mirror saw it deleted (a paused sandbox moved to
    # another node): the later answer holds until the mirror shows the new record.
    view, sandboxes = directory()
    view.delete_sandbox("sbx-1")
    created(view, sandboxes, "sbx-1")
    assert ids(sandboxes) == {"sbx-1"}
    assert sandboxes.find("sbx-1") is not None


def test_a_kill_hides_the_sandbox_while_the_mirror_still_shows_it() -> None:
    view, sandboxes = directory()
    view.sandbox_records["sbx-1"] = created(view, sandboxes, "sbx-1")
    sandboxes.forget("sbx-1")
    assert ids(sandboxes) == set()
    assert sandboxes.find("sbx-1") is None
