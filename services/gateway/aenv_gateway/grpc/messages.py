"""The gRPC edge's conversions between the API's messages and the operations' types."""

from __future__ import annotations

from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError, InvalidArgument
from aenv_common.status_tables import grpc_status, http_status
from aenv_gateway.cluster.clients import ForkOutcome
from aenv_gateway.core.batch import BatchResult
from aenv_gateway.core.bulk import Outcome, SandboxFilter
from aenv_gateway.core.leases.operations import LeaseView, timestamp
from aenv_gateway.core.listing import VISIBLE_STATES, ListQuery
from aenv_gateway.core.policy import MAX_PAGE
from aenv_gateway.core.redaction import without_proxy_secrets

# The fields a single create and a batch share (the batch's are every item's defaults).
CreateSpec = gateway_pb2.CreateSandboxRequest | gateway_pb2.CreateSandboxesRequest


def lease_message(view: LeaseView) -> gateway_pb2.GetLeaseResponse:
    return gateway_pb2.GetLeaseResponse(
        lease=view.record, expires_at=timestamp(view.expires_at),
        sandbox_count=view.sandbox_count)


def filter_of(message: gateway_pb2.SandboxFilter) -> SandboxFilter:
    return SandboxFilter(
        metadata=dict(message.metadata), states=frozenset(message.states),
        template=message.template_id or None, lease_id=message.lease_id or None,
        every=message.all)


def outcome_message(outcome: Outcome) -> gateway_pb2.SandboxOutcome:
    if outcome.error is None:
        return gateway_pb2.SandboxOutcome(sandbox_id=outcome.sandbox_id, code="OK")
    return gateway_pb2.SandboxOutcome(
        sandbox_id=outcome.sandbox_id, code=grpc_status(outcome.error).name,
        message=outcome.error.message)


def list_query(request: gateway_pb2.ListSandboxesRequest) -> ListQuery:
    states = frozenset(request.states) or VISIBLE_STATES
    if not states <= VISIBLE_STATES:
        raise InvalidArgument("states may hold only SANDBOX_STATE_RUNNING and SANDBOX_STATE_PAUSED")
    if request.page_size > MAX_PAGE:
        raise InvalidArgument(f"page_size must be at most {MAX_PAGE} (0: all)")
    return ListQuery(
        states=states,
        metadata=dict(request.metadata),
        template=request.template_id or None,
        limit=request.page_size or None,
        cursor=request.page_token or None,
    )


def fork_result(outcome: ForkOutcome) -> gateway_pb2.ForkResult:
    """A child, or its failure: its kind as gRPC names it (and, for clients that compare with
    the REST answer, as HTTP does)."""
    if isinstance(outcome, cluster_pb2.SandboxRecord):
        return gateway_pb2.ForkResult(sandbox=without_proxy_secrets(outcome))
    return gateway_pb2.ForkResult(error=gateway_pb2.ForkError(
        code=http_status(outcome), message=outcome.message, status=grpc_status(outcome).name))


def metric(sample: nodeagent_pb2.SandboxMetric) -> gateway_pb2.SandboxMetric:
    return gateway_pb2.SandboxMetric(
        timestamp=sample.timestamp,
        cpu_count=sample.cpu_count,
        cpu_used_pct=sample.cpu_used_pct,
        mem_used=sample.mem_used,
        mem_total=sample.mem_total,
        mem_cache=sample.mem_cache,
        disk_used=sample.disk_used,
        disk_total=sample.disk_total,
    )


def field_of(item: gateway_pb2.CreateSandboxRequest, shared: CreateSpec, name: str) -> Any:
    """A message field of the item if set, else the shared spec's, else None."""
    for spec in (item, shared):
        if spec.HasField(name):
            return getattr(spec, name)
    return None


def create_result(result: BatchResult) -> gateway_pb2.CreateResult:
    if isinstance(result, AenvError):
        return gateway_pb2.CreateResult(
            error=gateway_pb2.SandboxError(
                code=http_status(result), message=result.message, status=grpc_status(result).name
            )
        )
    return gateway_pb2.CreateResult(sandbox=without_proxy_secrets(result))
