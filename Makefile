# gpufleet — make help lists the targets. Every target installs what it needs through
# `make setup` (a pinned .venv); nothing is installed by hand.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON    ?= python3
VENV      ?= .venv
BIN       := $(VENV)/bin
INVENTORY ?= inventory
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

SETUP_STAMP := $(VENV)/.setup-done

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: $(SETUP_STAMP) ## create .venv with the pinned controller tools and gpufleet (editable)

$(SETUP_STAMP): requirements/controller.txt requirements/constraints.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "make setup needs Python >= 3.11 (ansible-core 2.19); set PYTHON=")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo ">> installing pinned controller tools into $(VENV) (torch CPU build, ansible, linters)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-c requirements/constraints.txt -r requirements/controller.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

.PHONY: test
test: setup ## run the project's own tests (unit, role rendering, CPU smoke tests)
	$(BIN)/python -m pytest tests

.PHONY: lint
lint: setup ## ansible-lint (production profile), yamllint, ruff, mypy, syntax checks
	$(BIN)/ruff check src tests checks smoke_tests collections
	$(BIN)/ruff format --check src tests checks smoke_tests collections
	$(BIN)/mypy
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production

.PHONY: plan
plan: setup ## example: plan torch 2.11.0 for a node whose driver is 570.86.15
	$(BIN)/gpufleet plan --torch 2.11.0 --os rocky9 --driver 570.86.15 --gpu-arch sm_80,sm_90

.PHONY: matrix
matrix: setup ## regenerate the support matrix in README.md from the compatibility data
	$(BIN)/gpufleet matrix --update-readme README.md

.PHONY: lock
lock: setup ## refresh requirements/constraints.txt from the current .venv
	{ echo '# Full pin set for the controller venv (make setup). Regenerate with: make lock'; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^torch=='; } > requirements/constraints.txt

# --- testbed ---
# The simulated EL cluster (docs/testbed.md). Needs root; Debian 12 host tools come from
# `make testbed-deps`. State lives in testbed/.state (git-ignored).
NODES ?= 3
TESTBED_APT_PACKAGES := debootstrap dnf dnf-plugins-core python3-dnf rpm createrepo-c gnupg \
	openssh-client iproute2 nftables util-linux procps ca-certificates
TBCTL := PYTHONPATH=$(CURDIR)/testbed $(BIN)/python -m tbctl

.PHONY: testbed-deps testbed-up testbed-down testbed-status testbed-clean
testbed-deps: ## install the testbed's host tools with apt-get (debootstrap, dnf, rpm, createrepo-c, gnupg, ...)
	@missing=$$(for p in $(TESTBED_APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo ">> testbed-deps: installing $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	else echo ">> testbed-deps: all host tools present"; fi

testbed-up: setup testbed-deps ## start the simulated EL cluster (NODES=3; idempotent); prints the inventory path
	$(TBCTL) up --nodes $(NODES)

testbed-down: setup ## stop the testbed and remove all it made but the cached base rootfs (safe twice)
	$(TBCTL) down

testbed-status: setup ## show the testbed's bridge, mirror and nodes
	$(TBCTL) status

testbed-clean: setup ## testbed-down, then remove the cached base rootfs and wheels
	$(TBCTL) clean
