# aenv — the two commands that matter:
#   make run    set up everything missing, then start the platform on this node
#   make test   set up everything missing, then run every test
SHELL := /bin/bash
AENV_HOME ?= $(HOME)/.aenv
VENV := .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
UNIT := not vm and not netns and not etcd and not s3 and not sdk and not registry

.PHONY: run test setup setup-host setup-python setup-node artifacts gen gen-check lint \
        test-unit test-vm test-scale bench clean-test

run: setup
	$(VENV)/bin/aenv up --home "$(AENV_HOME)"

test: setup lint
	bash scripts/run-tests.sh --timeout 1800 -m "not scale"

setup: setup-host setup-python setup-node artifacts

setup-host:
	bash scripts/setup-host.sh

setup-python: setup-host
	bash scripts/setup-python.sh
	bash scripts/setup-harbor.sh

setup-node: setup-host
	bash scripts/setup-node.sh

# Guest kernel, initramfs, tools disk (Python + envd) and the base template rootfs, cached under
# $(AENV_HOME)/cache by a hash of their inputs.
artifacts: setup-python
	$(PY) -m aenv_nodeagent.artifacts build --cache-dir "$(AENV_HOME)/cache" \
	  --envd-package gen/python --envd-package services/envd

gen: setup-python
	PYTHON=$(PY) bash scripts/gen-protos.sh

lint: setup-python setup-node
	node_modules/.bin/buf lint
	$(VENV)/bin/ruff check .
	bash scripts/typecheck.sh

test-unit:
	bash scripts/run-tests.sh -m "$(UNIT)" -q

test-vm:
	bash scripts/run-tests.sh -m vm -q

# Hundreds of guests at once: too slow for every run on a 2-core TCG host.
test-scale:
	bash scripts/run-tests.sh --timeout 3600 -m scale

bench: setup
	$(PY) bench/create_latency.py
