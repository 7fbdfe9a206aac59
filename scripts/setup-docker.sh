#!/usr/bin/env bash
# Installs Debian's Docker engine and docker-compose through the machine's own apt sources and
# starts the daemon when none answers (idempotent; CI runs as root and without systemd, so the
# daemon is started here, detached, logging to /var/log/aenv-dockerd.log).
#
# The daemon leaves the host's firewall and forwarding alone (--iptables=false,
# --ip-forward=false): the node agent's netns and nftables tests share this host, and Docker's
# iptables rules (a FORWARD policy of DROP) would cut their traffic. aenv's containers use the
# host's network (`--network host`), so they need neither.
set -euo pipefail
packages=(docker.io docker-compose)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-docker: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No recommends: the engine's own containerd and runc come as dependencies.
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
docker_cli=/usr/bin/docker
if ! "$docker_cli" info >/dev/null 2>&1; then
  echo "setup-docker: starting dockerd"
  nohup setsid /usr/sbin/dockerd --iptables=false --ip-forward=false \
    >>/var/log/aenv-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    "$docker_cli" info >/dev/null 2>&1 && break
    sleep 0.5
  done
  "$docker_cli" info >/dev/null 2>&1 || { tail -20 /var/log/aenv-dockerd.log; exit 1; }
fi
echo "docker $("$docker_cli" version --format '{{.Server.Version}}') ready" \
  | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
