# aenv — the two commands that matter:
#   make run    set up everything missing, then start the platform on this node
#   make test   set up everything missing, then run every test
# Each set-up step prints one line; what its tools say goes to $(SETUP_LOG), and a failing step
# prints its end there (scripts/setup-step.sh).
SHELL := /bin/bash
AENV_HOME ?= $(HOME)/.aenv
VENV := .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
SETUP_LOG ?= $(CURDIR)/build/setup.log
export SETUP_LOG
STEP := bash scripts/setup-step.sh
UNIT := not vm and not netns and not etcd and not s3 and not sdk and not registry and not docker \
        and not nspawn

.PHONY: run test setup setup-dev setup-host setup-python setup-node setup-harbor artifacts gen \
        gen-check lint \
        test-unit test-vm test-scale test-docker test-nspawn bench clean-test

run: setup
	@$(VENV)/bin/aenv up --home "$(AENV_HOME)"

# The tests need code-interpreter-v1's rootfs too: built here, beside base's, before them. The
# Docker image's layers and the nspawn machine's rootfs are built in the background while the
# components before `tests` run (scripts/prepare-deployments.sh); --durations names the slowest.
test: CODE_INTERPRETER_ROOTFS := --code-interpreter
test: setup setup-dev lint
	bash scripts/run-tests.sh --prepare-deployments --timeout 1800 --durations=15 -m "not scale"

# What the platform needs to run; setup-dev adds what only lint and the tests use.
setup: setup-host setup-python artifacts
setup-dev: setup-node setup-harbor

setup-host:
	@$(STEP) setup-host bash scripts/setup-host.sh

setup-python: setup-host
	@$(STEP) setup-python bash scripts/setup-python.sh

# Harbor's own venv, for tests/e2e/harbor and bench/harbor_trials.py.
setup-harbor: setup-host
	@$(STEP) setup-harbor bash scripts/setup-harbor.sh

# buf (lint, gen) and the e2b JS SDK (its conformance tests).
setup-node: setup-host
	@$(STEP) setup-node bash scripts/setup-node.sh

# Guest kernel, initramfs, tools disk (Python + envd) and the base template rootfs, cached under
# $(AENV_HOME)/cache by a hash of their inputs. code-interpreter-v1's rootfs (minutes) is not on
# `make run`'s way: the node agent builds it in the background at its first start.
CODE_INTERPRETER_ROOTFS ?= --no-code-interpreter
artifacts: setup-python
	@$(STEP) artifacts $(PY) -m aenv_nodeagent.artifacts build --cache-dir "$(AENV_HOME)/cache" \
	  --envd-package gen/python --envd-package services/envd $(CODE_INTERPRETER_ROOTFS)

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

# The platform in Docker containers built here (Debian's engine, a base made by mmdebstrap with
# the image's packages from the host's apt archives): `aenv up` in one container, and the compose
# stack as a two-node cluster. On a loaded 2-core host a cold image build takes ~5 minutes (a
# warm one under 1.5), the whole marker ~11 minutes cold; make test builds the image ahead.
test-docker:
	bash scripts/run-tests.sh --timeout 3600 -m docker

# The systemd units booted in a systemd-nspawn machine (Debian's systemd, a rootfs made by
# mmdebstrap and cached by scripts/setup-nspawn.sh): install.sh, an SDK program, a restart, a stop.
test-nspawn:
	bash scripts/run-tests.sh --timeout 3600 -m nspawn

bench: setup
	$(PY) bench/create_latency.py
