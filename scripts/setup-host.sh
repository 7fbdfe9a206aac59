#!/usr/bin/env bash
# Installs the Debian packages aenv needs on a node (idempotent: installs only what is missing,
# through the machine's own apt sources). Its one-line summary also goes to $AENV_STEP_SUMMARY
# (scripts/setup-step.sh).
set -euo pipefail
packages=(
  qemu-system-x86 qemu-utils          # the VMM and qcow2 tooling
  etcd-server etcd-client             # cluster state (single-node: started by `aenv up`)
  nftables iproute2                   # per-sandbox netns, DNAT and egress policy
  busybox-static tini                 # guest initramfs and PID 1 of the tools disk
  mmdebstrap e2fsprogs lz4 zstd       # base template rootfs, kernel extraction
  python3.11 python3-venv             # the guest's self-contained Python comes from Debian's
  docker-registry skopeo umoci        # OCI templates and the test registry
  nginx-light wrk                     # data-plane benchmark floor
  dnsmasq-base                        # wildcard DNS of the E2B_DOMAIN test (no system service)
  microsocks stunnel4                 # the egress tests' SOCKS5 proxy and its TLS front (no system service)
  nodejs                              # buf and the e2b JS SDK (npm comes with it)
  gcc libc6-dev                       # the write-logging library preloaded into QEMU
  esbuild                             # the code interpreter's TypeScript, in its own tests
  chromium                            # the dashboard's browser tests (driven by Playwright)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "all ${#packages[@]} packages present" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
  exit 0
fi
echo "setup-host: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed ${#missing[@]} packages: ${missing[*]}" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
