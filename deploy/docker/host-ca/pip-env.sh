# Sourced by the image's pip steps: the building host's pip settings, unset when not given.
[ -n "${PIP_INDEX_URL:-}" ] || unset PIP_INDEX_URL
[ -n "${PIP_EXTRA_INDEX_URL:-}" ] || unset PIP_EXTRA_INDEX_URL
if [ -s /opt/aenv/host-ca/pip-ca.crt ]; then export PIP_CERT=/opt/aenv/host-ca/pip-ca.crt; fi
