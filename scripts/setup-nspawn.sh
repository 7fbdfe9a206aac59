#!/usr/bin/env bash
# The machine tests/deploy/test_systemd_nspawn.py boots with systemd-nspawn: Debian's
# systemd-container on this host, and a Debian rootfs with systemd, the node's packages
# (deploy/docker/packages.txt) and the wheels of every third-party package aenv's venv needs,
# so deploy/systemd/install.sh runs inside it offline (pip there: no index, those wheels only).
# Made by mmdebstrap from this host's own apt sources and pip settings, cached under
# $AENV_NSPAWN_DIR (default ~/.aenv/nspawn) by a digest of its inputs; an older one is removed.
# Idempotent. Prints the rootfs's path as its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${AENV_NSPAWN_DIR:-$HOME/.aenv/nspawn}
python=${PYTHON:-$root/.venv/bin/python}

if ! dpkg-query -W -f='${Status}' systemd-container 2>/dev/null | grep -q "install ok installed"
then
  echo "setup-nspawn: installing systemd-container" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends systemd-container >&2
fi

packages=$(grep -v '^#' "$root/deploy/docker/packages.txt" | paste -sd,)
pyprojects=("$root"/*/pyproject.toml "$root"/*/*/pyproject.toml)
key=$(cat "$0" "$root/deploy/docker/packages.txt" "$root/deploy/docker/requirements.py" \
  "${pyprojects[@]}" | sha256sum | cut -c1-16)
rootfs=$dir/rootfs-$key
if [ -e "$rootfs/.complete" ]; then
  echo "$rootfs"
  exit 0
fi

found=$(bash "$root/scripts/host-apt-sources.sh")
mapfile -t sources <<<"$found"

mkdir -p "$dir"
work=$(mktemp -d "$dir/.build-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "setup-nspawn: making $rootfs" >&2
# systemd as PID 1; dbus for systemctl's and logind's peers; procps for an operator's ps.
mmdebstrap --quiet --variant=minbase \
  --include="systemd,systemd-sysv,dbus,procps,$packages" \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --customize-hook='rm -rf "$1"/var/cache/apt/*' \
  bookworm "$work/root" "${sources[@]}" >&2

# The venv's third-party wheels (and pip's build backend), resolved by this host's pip settings.
"$python" "$root/deploy/docker/requirements.py" "${pyprojects[@]}" > "$work/requirements.txt"
wheels=$work/root/opt/aenv/wheels
"$python" -m pip wheel -q --wheel-dir "$wheels" -r "$work/requirements.txt" \
  pip "setuptools>=68" wheel > "$work/pip.log" 2>&1 || { tail -40 "$work/pip.log" >&2; exit 1; }
printf '[global]\nno-index = true\nfind-links = /opt/aenv/wheels\n' > "$work/root/etc/pip.conf"

rm -rf "$dir"/rootfs-*
mv "$work/root" "$rootfs"
touch "$rootfs/.complete"
echo "$rootfs"
