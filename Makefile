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

# User variables reach the recipes as environment variables, never pasted into shell text:
# a value holding `...`, $(...), ; or a quote stays data. Argument lists (VERIFY_ARGS,
# CHECKS_ARGS, SMOKE_ARGS) are split into words by gpufleet.argsplit (shlex: quotes group
# words, nothing is expanded or run).
export GF_INVENTORY = $(value INVENTORY)
export GF_VERIFY_ARGS = $(value VERIFY_ARGS)
export GF_CHECKS_ARGS = $(value CHECKS_ARGS)
export GF_SMOKE_ARGS = $(value SMOKE_ARGS)
export GF_NODES = $(value NODES)
export GF_BENCH_REPEATS = $(value BENCH_REPEATS)
export GF_BENCH_RUNS = $(value BENCH_RUNS)
export GF_PYTEST_WORKERS = $(value PYTEST_WORKERS)
# How verify's cluster steps and make run start: empty = the inventory's gpufleet_launcher
# (ssh unless set), ssh, or slurm (one Slurm job per step; docs/slurm.md).
LAUNCHER ?=
export GF_LAUNCHER = $(value LAUNCHER)
ARGSPLIT = $(BIN)/python -m gpufleet.argsplit
# A make variable holding yes/no (REQUIRE_GPU, FULL, SLURM): `$(BOOL) NAME "$$VALUE"` prints 1, 0
# or nothing (empty); any other spelling is refused, exit 2 (gpufleet.units.parse_bool).
BOOL = $(BIN)/python -m gpufleet.units bool
# LAUNCHER: empty or one of the registry's launchers (python -m gpufleet.verify.launchers.registry)
define CHECK_LAUNCHER
@names=$$($(BIN)/python -m gpufleet.verify.launchers.registry) || exit 2; \
	if [ -n "$$GF_LAUNCHER" ] && ! printf '%s\n' $$names | grep -qxF -- "$$GF_LAUNCHER"; then \
	echo "ERROR: LAUNCHER='$$GF_LAUNCHER' is refused -> allowed: $$(echo $$names | sed 's/ / or /g') (empty: the inventory's gpufleet_launcher)" >&2; exit 2; fi
endef

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

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

.PHONY: test test-slow test-all
# Both cores: two pytest workers; a file stays on one worker unless its tests name groups
# (tests/conftest.py), so a module-scoped ansible run happens once.
PYTEST_WORKERS ?= 2
test: setup ## the fast default run (under 3 min): unit, contract and fast role tests
	$(BIN)/python -m pytest tests -m "not testbed and not slow" -n "$$GF_PYTEST_WORKERS" --dist loadgroup

test-slow: setup ## the tests make test leaves out: marked slow (torchrun, role runs), not testbed
	$(BIN)/python -m pytest tests -m "slow and not testbed" -n "$$GF_PYTEST_WORKERS" --dist loadgroup --durations=25

test-all: setup ## every test that needs no testbed (make test plus make test-slow, one run)
	$(BIN)/python -m pytest tests -m "not testbed"

.PHONY: e2e
e2e: setup testbed-deps ## as root: testbed integration tests and the end-to-end demo (make demo, rerun changed=0, down)
	$(BIN)/python -m pytest tests -m "testbed and not faults" --durations=0

.PHONY: faults
faults: setup testbed-deps ## as root: fault injection on a fresh 3-node testbed (docs/reliability.md); reports/faults/
	$(BIN)/python -m pytest tests -m faults --durations=0

.PHONY: soak
RUNS ?= 30
SOAK_KINDS ?= alternate
export GF_RUNS = $(value RUNS)
export GF_SOAK_KINDS = $(value SOAK_KINDS)
soak: setup testbed-deps ## as root: make verify and make run alternately RUNS=30 times on a healthy testbed (SOAK_KINDS=verify: verify each run; VERIFY_ARGS passed on); reports/soak/soak.json
	$(BIN)/python tests/bench/soak.py --runs "$$GF_RUNS" --kinds "$$GF_SOAK_KINDS" --verify-args "$$GF_VERIFY_ARGS"

.PHONY: bench
BENCH_REPEATS ?= 2
bench: setup testbed-deps ## as root: ratios on the 3-node testbed (verify overhead, fidelity, scale, detection); reports/bench/
	$(BIN)/python tests/bench/bench_cluster.py --repeats "$$GF_BENCH_REPEATS"

.PHONY: bench-report
REPORT_NODES ?= 1000
export GF_REPORT_NODES = $(value REPORT_NODES)
bench-report: setup ## the controller side of verify at REPORT_NODES=1000 synthetic nodes x 8 GPUs (report under 10 s and 1 GiB); reports/bench/
	$(BIN)/python tests/bench/bench_report.py --nodes "$$GF_REPORT_NODES"

.PHONY: bench-scale
SCALE_NODES ?= 3,6,12
export GF_SCALE_NODES = $(value SCALE_NODES)
bench-scale: setup testbed-deps ## as root: provisioning rerun, verify and bad-node localisation at SCALE_NODES=3,6,12 testbed nodes, extrapolated to 100/1000 (docs/scale.md); reports/bench-scale/
	$(BIN)/python tests/bench/bench_scale.py --nodes "$$GF_SCALE_NODES" --repeats "$$GF_BENCH_REPEATS"

.PHONY: lint
PY_DIRS = $(wildcard src tests checks smoke_tests testbed collections scripts)
# mypy --strict (settings in pyproject.toml): first src/gpufleet, the collection's plugins
# and testbed/tbctl in one run, then each pytest tree in a run of its own, with the tree as
# the root its modules are named from (tests/, checks/ and smoke_tests/ each have a
# conftest.py, tests/fixtures two generate.py: one run over all would see duplicates).
MYPY_TREES = tests checks smoke_tests

lint: setup ## ansible-lint (production profile), yamllint, ruff, mypy, syntax checks
	$(BIN)/ruff check --no-cache $(PY_DIRS)
	$(BIN)/ruff format --no-cache --check $(PY_DIRS)
	$(BIN)/mypy
	@for tree in $(MYPY_TREES); do \
	  echo "MYPYPATH=$$tree $(BIN)/mypy --cache-dir .mypy_cache/$$tree $$tree"; \
	  MYPYPATH=$$tree $(BIN)/mypy --cache-dir .mypy_cache/$$tree $$tree || exit 1; done
	$(BIN)/python scripts/check_docs.py
	$(BIN)/python scripts/role_docs.py --check
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production
	$(BIN)/ansible-playbook --syntax-check -i "$$GF_INVENTORY" site.yml

.PHONY: role-docs
role-docs: setup ## regenerate the roles' variable tables (README.md) from meta/argument_specs.yml
	$(BIN)/python scripts/role_docs.py

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

# --- checks ---
# Node health checks (checks/, docs/checks.md). REQUIRE_GPU= empty: manifest require_gpu,
# else env GPUFLEET_REQUIRE_GPU, else false; REQUIRE_GPU=1 fails every GPU check without a
# driver, REQUIRE_GPU=0 skips them. CHECKS_ARGS passes more options (--expected-gpus 8 ...).
CHECKS_OUT  ?= reports/local
REQUIRE_GPU ?=
CHECKS_ARGS ?=
BENCH_RUNS  ?= 5
# REQUIRE_GPU and CHECKS_OUT reach the recipe as environment variables (data, never shell
# text): REQUIRE_GPU accepts 1/true/yes/on/y and 0/false/no/off/n in any case, anything
# else is refused (exit 2); CHECKS_OUT is quoted.
check: export REQUIRE_GPU := $(REQUIRE_GPU)
check: export CHECKS_OUT := $(CHECKS_OUT)

.PHONY: check
check: setup ## node health checks here (NVML, torch): $(CHECKS_OUT)/checks.{xml,json}; REQUIRE_GPU=1|0
	@req=$$($(BOOL) REQUIRE_GPU "$$REQUIRE_GPU"); \
	case "$$req" in "") req=();; 1) req=(--require-gpu);; *) req=(--no-require-gpu);; esac; \
	mkdir -p -- "$$CHECKS_OUT"; \
	PYTHONPATH=src $(ARGSPLIT) GF_CHECKS_ARGS CHECKS_ARGS -- \
		$(BIN)/python -m pytest -c checks/pytest.ini checks -p no:cacheprovider \
		--junitxml="$$CHECKS_OUT/checks.xml" --gpufleet-json="$$CHECKS_OUT/checks.json" \
		$${req[@]+"$${req[@]}"}

.PHONY: bench-checks
bench-checks: setup ## time the checks suite on the healthy 8-GPU recording (budget 10 s)
	$(BIN)/python tests/bench/bench_checks.py --runs "$$GF_BENCH_RUNS"

# --- provision ---
# The gpufleet wheel that torch_env copies to every node. SOURCE_DATE_EPOCH makes the
# build reproducible, so an unchanged tree gives a byte-identical wheel and a rerun of
# `make provision` changes nothing on the nodes.
WHEEL_STAMP := dist/.gpufleet-wheel
WHEEL_SOURCES := pyproject.toml $(shell find src -type f -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: wheel
wheel: $(WHEEL_STAMP) ## build dist/gpufleet-<version>-py3-none-any.whl (the one wheel torch_env installs)

$(WHEEL_STAMP): $(SETUP_STAMP) $(WHEEL_SOURCES)
	@mkdir -p dist
	rm -f dist/gpufleet-*.whl
	SOURCE_DATE_EPOCH=315532800 $(BIN)/python -m pip wheel --quiet --disable-pip-version-check \
		--no-deps --no-build-isolation --wheel-dir dist .
	@rm -rf build
	@touch $@

.PHONY: provision
provision: export GF_FULL = $(value FULL)
# SERIAL (nodes at once: a count or a percentage) and MAX_FAIL (percent of one batch that may
# fail before the rollout stops) are provision.yml's play keywords: -e, never the inventory
provision: export GF_SERIAL = $(value SERIAL)
provision: export GF_MAX_FAIL = $(value MAX_FAIL)
provision: setup wheel ## provision the nodes of $(INVENTORY): driver, toolkit, env, network (FULL=1: no converged fast path; SERIAL=1 MAX_FAIL=0: rolling)
	@full=$$($(BOOL) FULL "$$GF_FULL"); extra=(); [ "$$full" = 1 ] && extra=(-e gpufleet_converge_fast=false); \
	[ -n "$$GF_SERIAL" ] && extra+=(-e "gpufleet_provision_serial=$$GF_SERIAL"); \
	[ -n "$$GF_MAX_FAIL" ] && extra+=(-e "gpufleet_provision_max_fail_percentage=$$GF_MAX_FAIL"); \
	echo "ansible-playbook playbooks/provision.yml -i $$GF_INVENTORY $${extra[*]-}"; \
	$(BIN)/ansible-playbook playbooks/provision.yml -i "$$GF_INVENTORY" $${extra[@]+"$${extra[@]}"}

.PHONY: syntax-check
syntax-check: setup ## ansible-playbook --syntax-check of site.yml and the playbooks
	$(BIN)/ansible-playbook --syntax-check -i "$$GF_INVENTORY" site.yml
	$(BIN)/ansible-playbook --syntax-check -i "$$GF_INVENTORY" playbooks/provision.yml

# --- verify ---
# make verify: node checks, port pre-check, torchrun smoke runs and the cluster all-reduce
# on every node of $(INVENTORY), then the report under reports/<run-id>/ (reports/latest).
# Exit 1 when the report has a failure. make smoke: the single-node suite here, with .venv.
SMOKE_ARGS ?=
VERIFY_ARGS ?=
# RUN_ID empty (default): a new id, the UTC second plus a random suffix. A given RUN_ID is
# data: passed through the environment (never pasted into the shell), checked by
# `gpufleet runid` (pattern, `latest` reserved, reports/<id> must not exist yet).
RUN_ID ?=
# Another make verify from this checkout holds reports/.verify.lock: wait this long, then refuse.
VERIFY_LOCK_WAIT ?= 900

.PHONY: verify
verify: export GF_RUN_ID = $(value RUN_ID)
verify: export GF_LOCK_WAIT = $(value VERIFY_LOCK_WAIT)
verify: setup ## verify the nodes of INVENTORY (checks, pre-check, torchrun, report); LAUNCHER=slurm; exit 0 pass, else 2 (make's rule; gpufleet verify: 1 failure, 2 refused)
	$(CHECK_LAUNCHER)
	@rc=0; $(ARGSPLIT) GF_VERIFY_ARGS VERIFY_ARGS -- $(BIN)/gpufleet verify \
		--inventory "$$GF_INVENTORY" --run-id "$$GF_RUN_ID" --lock-wait "$$GF_LOCK_WAIT" \
		--launcher "$$GF_LAUNCHER" -- || rc=$$?; \
	case $$rc in 0) ;; 1) echo ">> exit 1: the run failed (gpufleet verify returns 1; make returns 2)"; exit 1;; \
	  *) echo ">> exit $$rc: refused before any change (gpufleet verify returns $$rc; make returns 2)"; exit $$rc;; esac

.PHONY: run
SCRIPT ?=
ARGS ?=
run: export GF_SCRIPT = $(value SCRIPT)
run: export GF_RUN_ID = $(value RUN_ID)
run: export GPUFLEET_RUN_ARGS = $(value ARGS)
run: setup ## run your torchrun script on all nodes of INVENTORY: SCRIPT=path/to/train.py ARGS="..." [LAUNCHER=slurm]; logs in reports/<run-id>/
	@test -f "$$GF_SCRIPT" || { echo "ERROR: SCRIPT='$$GF_SCRIPT' is refused -> allowed: the path of an existing file, your torchrun script (make run SCRIPT=path/to/train.py [ARGS=\"...\"])" >&2; exit 2; }
	$(CHECK_LAUNCHER)
	@extra=$$($(BIN)/python -c 'import json,os; print(json.dumps({ \
		"verify_script_args": os.environ["GPUFLEET_RUN_ARGS"], \
		"verify_script": os.path.abspath(os.environ["GF_SCRIPT"]), \
		"verify_run_id": os.environ["GF_RUN_ID"], \
		**({"gpufleet_launcher": os.environ["GF_LAUNCHER"]} if os.environ["GF_LAUNCHER"] else {})}))'); \
	$(ARGSPLIT) GF_VERIFY_ARGS VERIFY_ARGS -- \
		$(BIN)/ansible-playbook playbooks/run.yml -i "$$GF_INVENTORY" -e "$$extra"

.PHONY: smoke
smoke: setup ## run the single-node smoke suite here (CPU: 2 gloo ranks) into reports/smoke-local/
	@mkdir -p reports/smoke-local
	PYTHONPATH=src $(ARGSPLIT) GF_SMOKE_ARGS SMOKE_ARGS -- \
		$(BIN)/python -m pytest smoke_tests/ -p no:cacheprovider \
		--gpufleet-json=reports/smoke-local/smoke.json --junitxml=reports/smoke-local/smoke.xml

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

# SLURM=1 (or LAUNCHER=slurm) also runs Slurm on the nodes: slurmctld on node1, slurmd on
# every node (the site's scheduler; kept until testbed-down).
SLURM ?=
export GF_SLURM = $(value SLURM)
testbed-up: setup testbed-deps ## start the simulated EL cluster (NODES=3; SLURM=1 adds Slurm; TESTBED_GPU=node2,node3 poses GPU nodes; idempotent); prints the inventory path
	@slurm=(); sl=$$($(BOOL) SLURM "$$GF_SLURM"); [ "$$sl" = 1 ] && slurm=(--slurm); \
	[ "$$GF_LAUNCHER" = slurm ] && slurm=(--slurm); \
	$(TBCTL) up --nodes "$$GF_NODES" $${slurm[@]+"$${slurm[@]}"}

testbed-down: setup ## stop the testbed and remove all it made but the cached base rootfs (safe twice)
	$(TBCTL) down

# Opt-in, never in make test, e2e or CI (about 2.7 GB from PyPI): PyPI's CUDA build of the
# pinned torch with its nvidia-* and triton wheels into testbed/.state/cache/wheels-cuda
# (once; a rerun downloads nothing), then installed into a throwaway venv here and compared
# with `gpufleet plan` (tbctl/cuda_wheels.py; docs/testbed.md, "A real CUDA wheel (opt-in)").
.PHONY: testbed-cuda-wheels
testbed-cuda-wheels: setup ## opt-in, ~2.7 GB from PyPI: download the CUDA build of the pinned torch, check its versions against the plan
	PYTHONPATH=$(CURDIR)/testbed:$(CURDIR)/src $(BIN)/python -m tbctl.cuda_wheels download
	PYTHONPATH=$(CURDIR)/testbed:$(CURDIR)/src $(BIN)/python -m tbctl.cuda_wheels check

testbed-status: setup ## show the testbed's bridge, mirror and nodes
	$(TBCTL) status

testbed-clean: setup ## testbed-down, then remove the cached base rootfs and wheels
	$(TBCTL) clean

# --- demo ---
.PHONY: demo
demo: setup ## the main job on the built-in simulated cluster (root): testbed-up, provision, verify (LAUNCHER=slurm: through Slurm)
	$(MAKE) --no-print-directory testbed-up
	$(MAKE) --no-print-directory provision INVENTORY=testbed/inventory
	$(MAKE) --no-print-directory verify INVENTORY=testbed/inventory
	@echo ">> demo done: the cluster report is reports/latest/summary.md; make testbed-down removes the testbed"
