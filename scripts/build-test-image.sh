#!/usr/bin/env bash
# The image the docker tests run, built from this checkout (deploy/docker/build.sh) once Debian's
# engine is set up (setup-docker.sh); prints its tag (TEST_IMAGE, default aenv-test:latest).
#
# The tag stays: the image and its parent layers are the next build's cache, so a build of an
# unchanged checkout takes seconds. An earlier build the tag moved off is left untagged; those
# are pruned (only images labelled as aenv's), so repeated runs keep one image's layers and the
# base, not one more gigabyte per change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
docker=${DOCKER:-/usr/bin/docker}
tag=${TEST_IMAGE:-aenv-test:latest}
bash "$root/scripts/setup-docker.sh" >&2
"$root/deploy/docker/build.sh" "$tag" >&2
"$docker" image prune --force --filter "label=org.opencontainers.image.title=aenv" >&2
echo "$tag"
