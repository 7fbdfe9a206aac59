#!/usr/bin/env bash
# Makes what the docker and nspawn tests build, ahead of them: Debian's Docker engine, the aenv
# test image (build-test-image.sh) and the nspawn machine's rootfs. `make test` runs this in the
# background, at low CPU and I/O priority, while the earlier components' tests run: the builds are
# mostly apt, pip and disk, and cold they take minutes. The tests then find the image's layers
# and the rootfs cached by their inputs. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
image=$(bash "$root/scripts/build-test-image.sh")
rootfs=$(bash "$root/scripts/setup-nspawn.sh" | tail -n 1)
echo "image $image and nspawn rootfs $(basename "$rootfs") ready" > "${AENV_STEP_SUMMARY:-/dev/null}"
