#!/usr/bin/env bash
# Makes what the docker and nspawn tests build, ahead of them: Debian's Docker engine, the aenv
# image's layers and the nspawn machine's rootfs. `make test` runs this in the background, at low
# CPU and I/O priority, while the earlier components' tests run: the builds are mostly apt, pip
# and disk, and cold they take minutes. The tests' own builds then find every layer and the rootfs
# cached by their inputs. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
docker=${DOCKER:-/usr/bin/docker}

bash "$root/scripts/setup-docker.sh"
# Built under a throwaway tag and untagged with --no-prune: the layers stay as the build cache.
tag=aenv-prepared:$$
"$root/deploy/docker/build.sh" "$tag" >/dev/null
"$docker" rmi --no-prune "$tag" >/dev/null
rootfs=$(bash "$root/scripts/setup-nspawn.sh" | tail -n 1)
echo "image layers and nspawn rootfs ($(basename "$rootfs")) ready" > "${AENV_STEP_SUMMARY:-/dev/null}"
