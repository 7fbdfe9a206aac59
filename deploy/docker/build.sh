#!/usr/bin/env bash
# Builds the aenv image on this machine, without Docker Hub: a Debian base image made locally by
# mmdebstrap from the host's own apt sources with the image's packages (packages.txt) already in
# (kept as a cache, tagged by that list: built once), then deploy/docker/Dockerfile over it.
# Idempotent; a second build reuses every cached layer.
#
# The base reuses what the host has by input: the .deb files in the host's apt cache are hard
# linked into mmdebstrap's chroot, so apt downloads only what the host lacks (a cached .deb is
# used only when it is the version the index names).
#
#   deploy/docker/build.sh [TAG]        (default TAG: aenv:latest; env BASE_IMAGE, DOCKER)
#
# The build context is the repository's files as git sees them (tracked or new, minus ignored:
# no .venv, no caches), streamed as a tar. The build uses the host's network so apt and pip reach
# the mirrors this host is configured for; pip's index settings are passed as build arguments,
# read from the host (never written here).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tag=${1:-aenv:latest}
packages=$(grep -v '^#' "$root/deploy/docker/packages.txt" | paste -sd,)
# No recommends, as the Dockerfile's apt; dpkg without fsync (a base is made whole or not at all).
mm_options=(--variant=minbase --include="$packages" --dpkgopt=force-unsafe-io
  --aptopt='APT::Install-Recommends "false"' --aptopt='Acquire::Check-Valid-Until "false"')
base=${BASE_IMAGE:-aenv-base:bookworm-$(sha256sum <<<"${mm_options[*]}" | cut -c1-12)}
docker=${DOCKER:-/usr/bin/docker}
export DOCKER_BUILDKIT=0

if ! "$docker" image inspect "$base" >/dev/null 2>&1; then
  found=$(bash "$root/scripts/host-apt-sources.sh")
  mapfile -t sources <<<"$found"
  echo "build: making $base with mmdebstrap from ${sources[*]}"
  # The host's cached .deb files hard linked in (the chroot is under $TMPDIR; on another
  # filesystem none are, and apt downloads them). The sources go into the image, so apt there
  # uses them too.
  mmdebstrap --quiet "${mm_options[@]}" \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
    --setup-hook='find /var/cache/apt/archives -maxdepth 1 -name "*.deb" \
      -exec cp -l -t "$1"/var/cache/apt/archives {} + 2>/dev/null || true' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm - "${sources[@]}" | "$docker" import - "$base"
fi

# pip's own settings on this host: environment first, then its configuration files.
pip_setting() {
  local env_name=$1 key=$2 value
  value=${!env_name:-}
  [ -n "$value" ] || value=$(python3 -m pip config get "global.$key" 2>/dev/null || true)
  # file:// indexes are this host's disk, not visible inside the build.
  tr ' ' '\n' <<<"$value" | grep -E '^https?://' | paste -sd' ' || true
}
index_url=$(pip_setting PIP_INDEX_URL index-url)
extra_index_url=$(pip_setting PIP_EXTRA_INDEX_URL extra-index-url)

# pip's CA bundle on this host (a TLS-inspecting proxy's CA, say), added to the context.
extra=$(mktemp -d)
trap 'rm -rf "$extra"' EXIT
mkdir -p "$extra/deploy/docker/host-ca"
cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [ -f "$cert" ]; then cp "$cert" "$extra/deploy/docker/host-ca/pip-ca.crt"; fi

cd "$root"
git ls-files -z --cached --others --exclude-standard -- \
    deploy/docker gen/python common services clients cli \
  | tar --null --ignore-failed-read -c -T - -C "$extra" deploy/docker/host-ca \
  | "$docker" build --network host --force-rm -f deploy/docker/Dockerfile -t "$tag" \
      --build-arg BASE_IMAGE="$base" \
      --build-arg PIP_INDEX_URL="$index_url" \
      --build-arg PIP_EXTRA_INDEX_URL="$extra_index_url" \
      -
