"""The node agent's settings: one typed place, read from `AENV_NODEAGENT_*` (and `AENV_*`)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from aenv_common.config import CommonSettings
from aenv_nodeagent.confinement.choice import CgroupMode
from aenv_nodeagent.snapshots.push_worker import LOWEST_NICE
from aenv_nodeagent.vmm.jail_choice import JailMode


class NodeAgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_NODEAGENT_", extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    node_id: str = Field(default_factory=socket.gethostname)
    listen: str = "127.0.0.1:50052"
    # Data-plane proxy into this node's sandboxes.
    proxy_listen: str = "127.0.0.1:50080"
    # Prometheus /metrics over HTTP (host:port); unset: not served.
    metrics_listen: str | None = None
    # Addresses other services use to reach us (defaults: the listen addresses).
    advertise_address: str | None = None
    advertise_proxy_address: str | None = None
    # Guest artifacts and template bases (shared by test runs: keyed by their inputs).
    cache_dir: Path | None = None
    # Per-sandbox state: overlays, device state, memory files, QMP sockets.
    state_dir: Path | None = None
    # A PVM guest kernel (CONFIG_PVM_GUEST); without it a PVM host runs guests under TCG.
    pvm_guest_kernel: Path | None = None
    # Capacity (architecture.md, Density; capacity/): the memory budget is the host's memory
    # (MemTotal, or the agent's cgroup limit when lower) less memory_reserved_mib (this agent, the
    # other services, the warm pool, page cache), unless memory_budget_mib is set; sandboxes are
    # placed while their VMs' measured PSS plus a new guest's whole RAM fits it. What the node
    # offers nominally is the host's CPUs, that budget and the free disk of state_dir, each
    # times its overcommit ratio; a capacity_* value replaces its resource's.
    capacity_vcpus: int | None = Field(default=None, gt=0)
    capacity_memory_mib: int | None = Field(default=None, gt=0)
    capacity_disk_mib: int | None = Field(default=None, gt=0)
    # Idle sandboxes (agents waiting on a model) cost little CPU; CPU use is not measured yet.
    cpu_overcommit: float = Field(default=32.0, gt=0)
    # Bounds the guest RAM given out, should every guest fill its RAM at once.
    memory_overcommit: float = Field(default=8.0, gt=0)
    # Overlays are thin: a sandbox's disk is mostly its template's, shared.
    disk_overcommit: float = Field(default=4.0, gt=0)
    memory_reserved_mib: int = Field(default=2048, ge=0)
    memory_budget_mib: int | None = Field(default=None, gt=0)
    # Memory pressure stops new sandboxes here (the record says why; the scheduler skips the
    # node) before the OOM killer picks a guest: MemAvailable under the floor, or PSI's share of
    # time some task stalled on memory over the last 10 s above the percentage.
    pressure_memory_available_min_mib: int = Field(default=1024, ge=0)
    pressure_psi_some_avg10_max: float = Field(default=20.0, gt=0, le=100)
    pressure_interval_s: float = Field(default=1.0, gt=0)
    # Eviction (capacity/eviction.py): while MemAvailable is under this, the node ends its
    # youngest running sandbox (EVICTED_MEMORY_PRESSURE), one at a time, re-reading between
    # each. 0: never (the OOM killer is then the host's last word).
    evict_below_available_mib: int = Field(default=0, ge=0)
    # Guest liveness (sandbox/liveness.py): every interval each running sandbox's envd is asked
    # /health, each probe bounded by the timeout (generous: a TCG guest is slow, not dead);
    # after `liveness_failures` misses in a row the sandbox ends with GUEST_HANG. Either 0: off.
    liveness_interval_s: float = Field(default=30.0, ge=0)
    liveness_failures: int = Field(default=4, ge=0)
    liveness_timeout_s: float = Field(default=10.0, gt=0)
    # Defaults of the `base` template.
    default_vcpus: int = 1
    default_memory_mib: int = 512
    default_disk_mib: int = 2048
    tcg_tb_mib: int = 32
    # Network slots: names `<prefix>-<n>`, host addresses carved from the pool.
    net_prefix: str = "aenv"
    net_pool_cidr: str = "10.211.0.0/16"
    # Cold boots under TCG occasionally hang silently: each attempt is bounded and retried.
    boot_timeout_s: float = 90.0
    boot_attempts: int = 3
    # An image's disk: its files plus this much free room unless a build asks for other room
    # (E2B's minFreeDiskMb), at least the default disk size, at most template_max_disk_mib.
    template_min_free_disk_mib: int = Field(default=1024, ge=0)
    template_max_disk_mib: int = Field(default=65536, gt=0)
    # A template's ready command must succeed within this long after its start command.
    build_ready_timeout_s: float = Field(default=120.0, gt=0)
    restore_ready_timeout_s: float = 30.0
    # A fork's children are restored this many at a time, node-wide (0: one per CPU the agent
    # may run on): every guest woken at once makes each one's wake-up slower.
    fork_restores_at_once: int = Field(default=0, ge=0)
    # Warm pool: network slots, per-template disk overlays and pre-started QEMUs (each idle one
    # holds a slot and ~40 MiB of host memory) built ahead; all 0 disables it.
    warm_pool_slots: int = 4
    warm_pool_overlays: int = 2
    warm_pool_vms: int = 2
    # More pre-started VMs per template, up to this many, as restores from its snapshots (a
    # fork's children) asked for in the last minute, while the host has the room woken guests
    # need: a child then takes one instead of waiting for a QEMU to start. 0 disables them, as
    # does warm_pool_vms 0 (no pre-started VM at all).
    warm_pool_snapshot_vms: int = Field(default=16, ge=0)
    # Woken guests per template at most (restored, warmed by one command, stopped: a create only
    # continues one), kept as many as creates asked for in the last minute; only while the
    # host's MemAvailable is above warm_pool_guests_min_available_mib. 0 disables them.
    warm_pool_guests: int = Field(default=4, ge=0)
    warm_pool_guests_min_available_mib: int = Field(default=2048, ge=0)
    # The node record's lease. Long enough to outlast the seconds 2 cores crowded by a fork of
    # 16 busy VMs can hold a keepalive (11 s seen): a lapse marks every sandbox lost.
    heartbeat_ttl_s: int = 20
    # Sandbox events and death certificates (sandbox/events.py). Off: neither is written, and a
    # record's publish is a plain put (the benchmark's events-off arm).
    events_enabled: bool = True
    # Experiment leases (leases/): a sandbox whose lease lapsed is ended by the watch of
    # `leases/` at once, else by the reconcile every interval; at most `lease_reap_concurrency`
    # at once.
    lease_reconcile_interval_s: float = Field(default=5.0, gt=0)
    lease_reap_concurrency: int = Field(default=64, ge=1)
    # Snapstore gRPC address (host:port): snapshots are persisted there and restored from there
    # on nodes that lack them. Empty: persistence off.
    snapstore_address: str = ""
    # Paused sandboxes are pushed there too, so another node can resume them if this one is lost.
    snapstore_persist_paused: bool = True
    # Snapshot pushes running at once (each already overlaps hashing, compression and upload).
    snapstore_max_pushes: int = Field(default=2, ge=1)
    # Their CPU priority (nice; snapshots/push_worker.py): nobody waits for a push, while
    # creates and guests do wait for the CPU it takes (a fresh node pushes ~1 GB at start).
    snapstore_push_nice: int = Field(default=LOWEST_NICE, ge=0, le=19)
    # Metrics history: envd's /metrics of every running sandbox every interval (E2B: 5 s), kept
    # in a ring of at most max_samples per sandbox (720 x 5 s = the last hour).
    metrics_interval_s: float = Field(default=5.0, gt=0)
    metrics_max_samples: int = Field(default=720, ge=1)
    # A guest slower than this to answer misses that sample.
    metrics_sample_timeout_s: float = Field(default=5.0, gt=0)
    # Templates from OCI images. Layers are cached by digest, shared by every image (default:
    # <cache_dir>/images).
    image_cache_dir: Path | None = None
    # Template snapshots, the templates built or pulled here, and COPY contexts (default:
    # <cache_dir>/templates). Nodes of one host may share it; each node of a test its own.
    templates_dir: Path | None = None
    # The captured templates kept on disk: past this, the least recently used ones that nothing
    # stands on are dropped (pulled from snapstore or captured again on their next use).
    template_cache_max_gib: float = Field(default=64.0, gt=0)
    template_cache_trim_interval_s: float = Field(default=60.0, gt=0)
    # What template builds leave, each bounded the same way (least recently used first, never
    # what a registered or captured template stands on; templates/bounds.py): image layer
    # blobs, images' base disks, step layers, the rootfs files of templates pulled from
    # snapstore.
    image_blob_cache_max_gib: float = Field(default=32.0, gt=0)
    image_bases_max_gib: float = Field(default=64.0, gt=0)
    step_layers_max_gib: float = Field(default=64.0, gt=0)
    pulled_rootfs_max_gib: float = Field(default=64.0, gt=0)
    # `code-interpreter-v1` captured in the background at start when it is not on disk yet,
    # so the first `Sandbox.create()` of E2B's code-interpreter SDK does not wait for it.
    prewarm_code_interpreter: bool = True
    # Mirrors as containerd's hosts.toml gives them: registry (`docker.io`, `host:5000`, or
    # `_default` for any other) -> endpoints (`host[:port][/path]` or URLs) tried in order, then
    # the registry itself unless it is listed in registry_mirror_only. JSON in the environment.
    registry_mirrors: dict[str, list[str]] = Field(default_factory=dict)
    registry_mirror_only: list[str] = Field(default_factory=list)
    # Registries (`host[:port]`, or CIDRs) spoken to over plain HTTP; loopback always is.
    insecure_registries: list[str] = Field(default_factory=list)
    # Registry credentials: a file in Docker's config.json shape (`auths`), never inline, so no
    # secret shows in a dump of these settings.
    registry_credentials_file: Path | None = None
    # A cgroup per VM (confinement/): `required` fails the node's start where the host cannot
    # confine VMs; `auto` runs them unconfined there, saying so (a WARNING, the node's status);
    # `off` does not try.
    vmm_cgroups: CgroupMode = "auto"
    # The cgroup the node's VM cgroups go under (default: the agent's own on v1, /aenv on v2).
    vmm_cgroup_parent: str | None = None
    # QEMU's own memory beside its guest's RAM: memory.max is the RAM (twice for a VM that
    # makes frozen copies), TCG's translation cache, and this.
    vmm_memory_overhead_mib: int = Field(default=256, ge=0)
    # Tasks of one QEMU: its threads (vCPUs, I/O workers: up to 64) and frozen copies.
    vmm_pids_max: int = Field(default=512, ge=16)
    vmm_nofile_max: int = Field(default=4096, ge=64)
    # A QEMU that has not answered QMP this long after its exec failed to start (a busy TCG
    # host starting tens of VMs at once needs more).
    vmm_start_timeout_s: float = Field(default=10.0, gt=0)
    # Every QEMU jailed (vmm/confined.py): a uid of its own from this range (gid alike), a root
    # holding only its files in a mount namespace, no capabilities, QEMU's seccomp sandbox.
    # `required` fails the node's start where the host cannot; `auto` runs QEMU as root there,
    # saying so (a WARNING, the node's status); `off` does not try. The range must be free on
    # the host (no user, no subordinate ids) and hold one uid per VM, frozen copies' included.
    vmm_jail: JailMode = "auto"
    vmm_uid_first: int = Field(default=1_000_000_000, ge=1)
    vmm_uid_count: int = Field(default=65536, ge=16)
    # Egress by name (egress/, docs/egress.md): one process per node filters guest
    # connections by name, applies header rules and dials. It runs as egress_uid (default: the
    # uid just below the VMM range, which must be as free on the host) with no capabilities.
    egress_uid: int | None = Field(default=None, ge=1)
    # Where the platform resolver forwards allowed names (host:port or address; port 53 if
    # none) unless a sandbox names its own dnsServers. Empty: the host's /etc/resolv.conf.
    egress_dns_upstreams: list[str] = Field(default_factory=list)
    # Extra CA certificates (PEM) trusted for upstream TLS besides the system store, where the
    # egress path originates TLS itself (hosts with header rules).
    egress_upstream_ca_file: Path | None = None
    # On each slot's gateway address: redirected guest TCP, and its DNS (UDP and TCP).
    egress_proxy_port: int = Field(default=15001, gt=0, lt=65536)
    egress_dns_port: int = Field(default=15053, gt=0, lt=65536)
    # Where the node forwards what guests send out themselves (an IP-only policy's traffic, UDP
    # and ICMP to an allowed name's addresses; network/host_nat.py): IPv4 CIDRs, the
    # always-blocked ranges excepted whatever is listed. Empty: the node forwards no guest
    # traffic (only the egress process's connections, which it dials itself, leave).
    egress_forward_destinations: list[ipaddress.IPv4Network] = Field(
        default_factory=lambda: [ipaddress.IPv4Network("0.0.0.0/0")])
    # Per sandbox, guest connections the egress process holds at once (the rest are reset).
    egress_max_connections: int = Field(default=1024, ge=1)
    # A proxied connection with no byte either way this long is closed.
    egress_idle_timeout_s: float = Field(default=600.0, gt=0)
    # How long a guest connection may stay silent before the egress process gives up on its
    # name, where the client always speaks first (80, 443, a host with header rules); other
    # ports get a quarter second, so protocols whose server speaks first are not stalled.
    egress_name_wait_s: float = Field(default=5.0, gt=0, le=60)

    def resolved_cache_dir(self) -> Path:
        return self.cache_dir or self.common.home / "cache"

    def resolved_templates_dir(self) -> Path:
        return self.templates_dir or self.resolved_cache_dir() / "templates"

    def resolved_image_cache_dir(self) -> Path:
        return self.image_cache_dir or self.resolved_cache_dir() / "images"

    def resolved_state_dir(self) -> Path:
        return self.state_dir or self.common.home / "nodeagent"

    def resolved_egress_uid(self) -> int:
        return self.egress_uid or self.vmm_uid_first - 1

    def resolved_egress_dns_upstreams(self) -> list[str]:
        return self.egress_dns_upstreams or host_nameservers()

    def nodeagent_address(self) -> str:
        return self.advertise_address or self.listen

    def proxy_address(self) -> str:
        return self.advertise_proxy_address or self.proxy_listen


def host_nameservers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    """The nameservers of the host's resolver configuration (none if it cannot be read)."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return []
    return [words[1] for words in (line.split() for line in lines)
            if len(words) >= 2 and words[0] == "nameserver"]
