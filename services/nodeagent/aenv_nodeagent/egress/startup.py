"""The egress process as the node agent starts it: its settings gathered from the node's, the
cluster's egress CA and secrets key, the blocked ranges, and the supervisor started.

Called once from the composition root (server.py), before start-up recovery, so adopted sandboxes
can be re-attached with their recorded policies.
"""

from __future__ import annotations

import logging

from aenv_common.cluster import ClusterStore
from aenv_common.secrets.sealing import create_key_file
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.network.firewall import EgressPorts
from aenv_nodeagent.network.manager import host_blocked_extra
from aenv_nodeagent.network.slots import NetworkConfig

from .certs import load_or_create_cluster_ca
from .control import Configure
from .supervisor import EgressSupervisor, ResolvedSink, SupervisorSettings

log = logging.getLogger(__name__)


async def start_egress(settings: NodeAgentSettings, store: ClusterStore, network: NetworkConfig,
                       on_resolved: ResolvedSink) -> EgressSupervisor:
    """A running, configured egress process. Raises when it cannot start (the agent does not
    start either: a node that silently enforced no names would be worse)."""
    s = settings
    # The platform's key, as the gateway finds or makes it (one file per cluster: shared home,
    # or mounted from the deployment's secret).
    key = create_key_file(s.common.secrets_key_file)
    material = s.common.secrets_key_file.read_bytes()  # checked by create_key_file
    ca = await load_or_create_cluster_ca(store.client, store.keys, key)
    upstreams = s.resolved_egress_dns_upstreams()
    if not upstreams:
        log.warning("no DNS upstream for the egress resolver: names will not resolve")
    configure = Configure(
        secrets_key=material, ca_cert_pem=ca.cert_pem.decode(),
        ca_key_pem=ca.key_pem().decode(), dns_upstreams=upstreams,
        upstream_ca_file=str(s.egress_upstream_ca_file) if s.egress_upstream_ca_file else None,
        etcd_endpoints=s.common.etcd_endpoints, etcd_prefix=s.common.etcd_prefix,
        blocked_extra=await host_blocked_extra(network),
        max_connections_per_sandbox=s.egress_max_connections,
        idle_timeout_s=s.egress_idle_timeout_s, name_wait_s=s.egress_name_wait_s,
    )
    supervisor = EgressSupervisor(
        SupervisorSettings(s.resolved_egress_uid(),
                           EgressPorts(proxy=s.egress_proxy_port, dns=s.egress_dns_port)),
        configure, on_resolved)
    await supervisor.start()
    return supervisor
