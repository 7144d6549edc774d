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
# Python writes its bytecode caches (__pycache__/, git-ignored; the wheel and the converge
# digests skip them) for every tool make runs, also where the environment sets
# PYTHONDONTWRITEBYTECODE: without them every pytest process rewrites the asserts of all ~200
# test modules again (collection 38.7 s -> 8.7 s on the 2-core machine) and every CLI call
# compiles what it imports again (docs/performance.md).
export PYTHONDONTWRITEBYTECODE =
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

# TIER: empty or a verify tier (gpufleet.verify.tiers); DURATION: empty or a duration
# (gpufleet.units duration: 90s, 2m, 30m, 1h); each refused naming the make variable, exit 2
define CHECK_TIER
@case "$$GF_TIER" in ""|quick|standard|burnin) ;; \
	*) echo "ERROR: TIER='$$GF_TIER' is refused -> allowed: quick, standard or burnin (empty: the inventory's verify_tier)" >&2; exit 2;; esac; \
	$(BIN)/python -m gpufleet.units duration DURATION "$$GF_DURATION" >/dev/null || exit 2
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
	$(BIN)/python -m pytest tests -m "not testbed and not slow and not browser" -n "$$GF_PYTEST_WORKERS" --dist loadgroup

test-slow: setup ## the tests make test leaves out: marked slow (torchrun, role runs), not testbed
	$(BIN)/python -m pytest tests -m "slow and not testbed and not browser" -n "$$GF_PYTEST_WORKERS" --dist loadgroup --durations=25

test-all: setup ## every test that needs neither testbed nor browser (make test plus make test-slow, one run)
	$(BIN)/python -m pytest tests -m "not testbed and not browser"

# The report page (index.html) in Debian's headless chromium: tests marked browser, in no other
# test target. Screenshots land in reports/browser/ (tests/browser_lib.py).
BROWSER_APT_PACKAGES := chromium fonts-dejavu-core
.PHONY: browser-deps test-browser
browser-deps: ## install Debian's chromium (and a font) with apt-get, for make test-browser
	@missing=$$(for p in $(BROWSER_APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo ">> browser-deps: installing $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	else echo ">> browser-deps: chromium present"; fi

test-browser: setup browser-deps ## the report page in headless chromium: no console error, verdict, nodes, reproducers, 64 nodes in under 5 s; reports/browser/
	$(BIN)/python -m pytest tests -m "browser and not testbed" --durations=10

# Debian's prometheus package: promtool for make lint (the shipped rules) and the tests
# (gpufleet health --prom), and the testbed's host Prometheus (make demo MONITOR=1). Its own
# daemon must not start here (it would take port 9090 from the testbed's): apt-get runs under a
# policy-rc.d that refuses every start (Debian's mechanism; a temporary one when the host has
# none), and where systemd runs, the unit the package enabled is disabled again.
MONITOR_APT_PACKAGES := prometheus
.PHONY: monitor-deps
monitor-deps: ## install Debian's prometheus (promtool, and the testbed's host Prometheus) with apt-get; its daemon is not started
	@missing=$$(for p in $(MONITOR_APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo ">> monitor-deps: prometheus present"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "!! monitor-deps: $$missing missing, and installing it needs root: run 'sudo make monitor-deps' once (make lint checks the rules with its promtool)" >&2; exit 2; fi; \
	echo ">> monitor-deps: installing $$missing (its daemon is not started)"; \
	policy=/usr/sbin/policy-rc.d; ours=; \
	trap '[ -n "$$ours" ] && rm -f "$$policy"' EXIT; trap 'exit 130' INT TERM; \
	if [ ! -e "$$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$$policy"; chmod 755 "$$policy"; ours=1; fi; \
	rc=0; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing || rc=$$?; \
	[ -n "$$ours" ] && rm -f "$$policy"; ours=; \
	if [ "$$rc" = 0 ] && [ -d /run/systemd/system ]; then systemctl disable --now prometheus.service || true; fi; \
	exit $$rc

.PHONY: e2e e2e-cuda
e2e: setup testbed-deps browser-deps ## as root: testbed integration tests and the end-to-end demo (make demo, rerun changed=0, down); CI runs it
	$(BIN)/python -m pytest tests -m "testbed and not faults and not cuda_wheels" --durations=0

# make e2e and make faults in one run, one testbed less: the fault scenarios run on the demo's
# testbed, after the SSH demo's tests and before Slurm is added to it (tests/e2e_order.py).
.PHONY: e2e-full
e2e-full: setup testbed-deps browser-deps ## as root: make e2e with the fault scenarios on the demo's testbed (72 min on the 2-core machine; not in CI)
	$(BIN)/python -m pytest tests -m "testbed and not cuda_wheels" --durations=0

e2e-cuda: setup testbed-deps ## as root, opt-in (~2.7 GB download, ~15 GB disk): PyPI's real CUDA torch provisioned on the testbed (TORCH_WHEELS=cuda), rerun changed=0, verify
	$(BIN)/python -m pytest tests -m cuda_wheels --durations=0

.PHONY: faults
faults: setup testbed-deps browser-deps ## as root: fault injection on a fresh 3-node testbed (docs/reliability.md; not in CI: make e2e-full runs it with make e2e); reports/faults/
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

.PHONY: bench-page
PAGE_NODES ?= 64
export GF_PAGE_NODES = $(value PAGE_NODES)
bench-page: setup browser-deps ## index.html of PAGE_NODES=64 synthetic nodes (one failed) in headless chromium: first frame under 5 s, screenshot; reports/bench/page-N.{json,png}
	$(BIN)/python tests/bench/bench_report.py --nodes "$$GF_PAGE_NODES" --faulty 9 --browser \
		--out "reports/bench/page-$$GF_PAGE_NODES.json"

.PHONY: bench-scale
SCALE_NODES ?= 3,6,12
SCALE_RANKS ?= 0
export GF_SCALE_NODES = $(value SCALE_NODES)
export GF_SCALE_RANKS = $(value SCALE_RANKS)
bench-scale: setup testbed-deps ## as root: provisioning rerun, verify and bad-node localisation at SCALE_NODES=3,6,12 testbed nodes, extrapolated to 100/1000 (docs/scale.md); reports/bench-scale/
	$(BIN)/python tests/bench/bench_scale.py --nodes "$$GF_SCALE_NODES" --repeats "$$GF_BENCH_REPEATS" \
		--ranks-per-node "$$GF_SCALE_RANKS"

.PHONY: lint
PY_DIRS = $(wildcard src tests checks smoke_tests testbed collections scripts)
# mypy --strict (settings in pyproject.toml): first src/gpufleet, the collection's plugins
# and testbed/tbctl in one run, then each pytest tree in a run of its own, with the tree as
# the root its modules are named from (tests/, checks/ and smoke_tests/ each have a
# conftest.py, tests/fixtures two generate.py: one run over all would see duplicates).
MYPY_TREES = tests checks smoke_tests

# The shipped Prometheus rules (docs/monitoring.md): promtool from Debian's prometheus (make monitor-deps)
PROM_RULES := monitoring/prometheus/gpufleet.rules.yml
# Two lanes side by side (each mostly one process at a time, so two cores finish in about the
# longer lane's time); --output-sync keeps each lane's output together.
.PHONY: lint-python lint-ansible
lint: setup monitor-deps ## ansible-lint (production profile), yamllint, ruff, mypy, syntax checks, promtool check/test rules
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint-python lint-ansible

lint-python: setup ## the Python lane of make lint: ruff (check, format), mypy --strict on src and each test tree
	$(BIN)/ruff check --no-cache $(PY_DIRS)
	$(BIN)/ruff format --no-cache --check $(PY_DIRS)
	$(BIN)/mypy
	@for tree in $(MYPY_TREES); do \
	  echo "MYPYPATH=$$tree $(BIN)/mypy --cache-dir .mypy_cache/$$tree $$tree"; \
	  MYPYPATH=$$tree $(BIN)/mypy --cache-dir .mypy_cache/$$tree $$tree || exit 1; done

lint-ansible: setup monitor-deps ## the other lane of make lint: docs and role-docs checks, yamllint, ansible-lint, syntax check, promtool
	$(BIN)/python scripts/check_docs.py
	$(BIN)/python scripts/role_docs.py --check
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production
	$(BIN)/ansible-playbook --syntax-check -i "$$GF_INVENTORY" site.yml
	promtool check rules $(PROM_RULES)
	promtool test rules $(PROM_RULES:.yml=.test.yml)

.PHONY: role-docs
role-docs: setup ## regenerate each role's defaults/main.yml and README variable table from meta/argument_specs.yml
	$(BIN)/python scripts/role_docs.py

.PHONY: plan
plan: setup ## example: plan torch 2.11.0 for a node whose driver is 570.86.15
	$(BIN)/gpufleet plan --torch 2.11.0 --os rocky9 --driver 570.86.15 --gpu-arch sm_80,sm_90

# A hash lock of the torch step for torch_env (gpufleet_torch_lock): the plan's torch build of
# TORCH (CUDA: a variant, empty = the planner's) for PYTHON, from INDEX_URL (empty = the
# source's public index; SOURCE=auto|pypi|pytorch-index|wheelhouse, FIND_LINKS), with the
# packages torch_env installs beside it (roles/torch_env/defaults/main.yml); WHEELHOUSE=DIR
# keeps the wheels. INDEX_URL reaches gpufleet lock and pip through the environment only
# (GPUFLEET_INDEX_URL, PIP_INDEX_URL): credentials in it never stand on a command line.
TORCH ?= 2.13.0
CUDA ?=
PYTHON_VERSION ?= 3.11
INDEX_URL ?=
SOURCE ?= auto
FIND_LINKS ?=
WHEELHOUSE ?=
LOCK_OUT ?= torch.lock
.PHONY: torch-lock
torch-lock: export GF_TORCH = $(value TORCH)
torch-lock: export GF_CUDA = $(value CUDA)
torch-lock: export GF_PYTHON_VERSION = $(value PYTHON_VERSION)
torch-lock: export GPUFLEET_INDEX_URL = $(value INDEX_URL)
torch-lock: export GF_SOURCE = $(value SOURCE)
torch-lock: export GF_FIND_LINKS = $(value FIND_LINKS)
torch-lock: export GF_WHEELHOUSE = $(value WHEELHOUSE)
torch-lock: export GF_LOCK_OUT = $(value LOCK_OUT)
torch-lock: setup ## write LOCK_OUT=torch.lock: a hash lock of TORCH's CUDA=<variant> build and torch_env's packages (gpufleet_torch_lock)
	@args=(--torch "$$GF_TORCH" --python "$$GF_PYTHON_VERSION" --source "$$GF_SOURCE" --output "$$GF_LOCK_OUT"); \
	[ -n "$$GF_CUDA" ] && args+=(--cuda "$$GF_CUDA"); \
	[ -n "$$GF_WHEELHOUSE" ] && args+=(--wheelhouse "$$GF_WHEELHOUSE"); \
	for link in $$GF_FIND_LINKS; do args+=(--find-links "$$link"); done; \
	while IFS= read -r pkg; do args+=(--package "$$pkg"); done < <($(BIN)/python -c 'import yaml; \
	  print("\n".join(yaml.safe_load(open("roles/torch_env/defaults/main.yml"))["torch_env_packages"]))'); \
	$(BIN)/gpufleet lock "$${args[@]}"

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

.PHONY: rolling-reboot
# make rolling-reboot: reboot the nodes of INVENTORY without losing a job (playbooks/
# rolling_reboot.yml, role node_reboot; docs/slurm.md, "Rolling reboots"). SERIAL nodes at a
# time (a count or a percentage; default 1); DRAIN_TIMEOUT: seconds a drained node's jobs may
# take to end (default 3600) before the rollout stops; REBOOT_ARGS: more ansible-playbook
# arguments (-e node_reboot_slurm=drain). All are checked before any change.
SERIAL ?=
DRAIN_TIMEOUT ?=
REBOOT_ARGS ?=
rolling-reboot: export GF_SERIAL = $(value SERIAL)
rolling-reboot: export GF_DRAIN_TIMEOUT = $(value DRAIN_TIMEOUT)
rolling-reboot: export GF_REBOOT_ARGS = $(value REBOOT_ARGS)
rolling-reboot: setup ## reboot INVENTORY's nodes without losing a job: SERIAL=1 at a time, Slurm nodes drained, jobs waited for (DRAIN_TIMEOUT=3600 s), health pass, resume; reports/rolling-reboot/summary.json
	@extra=$$($(BIN)/python -c 'import json, os; print(json.dumps({k: os.environ[e] for k, e in (("node_reboot_serial", "GF_SERIAL"), ("node_reboot_drain_timeout", "GF_DRAIN_TIMEOUT")) if os.environ[e] != ""}))'); \
	mkdir -p reports/rolling-reboot; \
	echo "ansible-playbook playbooks/rolling_reboot.yml -i $$GF_INVENTORY -e '$$extra' $$GF_REBOOT_ARGS"; \
	$(ARGSPLIT) GF_REBOOT_ARGS REBOOT_ARGS -- $(BIN)/ansible-playbook playbooks/rolling_reboot.yml \
		-i "$$GF_INVENTORY" -e "$$extra"

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
# TIER: quick (a Slurm prolog, at most 60 s per node), standard, burnin (standard, then every
# device busy for DURATION: 90s, 2m, 30m, 1h); empty = the inventory's verify_tier (standard).
# PROFILES_DIR: the site's own profile files (gpufleet_profiles_dir). All three are checked by
# gpufleet verify (exit 2 naming the variable) before anything runs.
TIER ?=
DURATION ?=
PROFILES_DIR ?=

.PHONY: verify
verify: export GF_RUN_ID = $(value RUN_ID)
verify: export GF_LOCK_WAIT = $(value VERIFY_LOCK_WAIT)
verify: export GF_TIER = $(value TIER)
verify: export GF_DURATION = $(value DURATION)
verify: export GF_PROFILES_DIR = $(value PROFILES_DIR)
verify: export GF_REPORT_DIR = $(value REPORT_DIR)
verify: setup ## verify the nodes of INVENTORY (checks, compute, torchrun, report); TIER=quick|standard|burnin DURATION=30m; LAUNCHER=slurm; REPORT_DIR=dir (default reports/); exit 0 pass, else 2 (make's rule; gpufleet verify: 1 failure, 2 refused)
	$(CHECK_LAUNCHER)
	$(CHECK_TIER)
	@tier=(); [ -n "$$GF_TIER" ] && tier+=(--tier "$$GF_TIER"); \
	[ -n "$$GF_DURATION" ] && tier+=(--duration "$$GF_DURATION"); \
	[ -n "$$GF_PROFILES_DIR" ] && tier+=(--profiles-dir "$$GF_PROFILES_DIR"); \
	[ -n "$$GF_REPORT_DIR" ] && tier+=(--report-dir "$$GF_REPORT_DIR"); \
	rc=0; $(ARGSPLIT) GF_VERIFY_ARGS VERIFY_ARGS -- $(BIN)/gpufleet verify \
		--inventory "$$GF_INVENTORY" --run-id "$$GF_RUN_ID" --lock-wait "$$GF_LOCK_WAIT" \
		--launcher "$$GF_LAUNCHER" $${tier[@]+"$${tier[@]}"} -- || rc=$$?; \
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
# TORCH_WHEELS=cuda: the nodes get PyPI's real CUDA build of the pinned torch (~2.7 GB
# downloaded once into the cache, ~5 GB per node's env) from a PyPI-layout index, the last
# node from a find-links wheelhouse with no index; empty or cpu: the CPU build (fast).
TORCH_WHEELS ?=
export GF_TORCH_WHEELS = $(value TORCH_WHEELS)
# MONITOR=1: the site's monitoring too: Debian's prometheus-node-exporter in every node,
# Debian's prometheus on 127.0.0.1:9090 with gpufleet's rules (docs/monitoring.md; kept until
# testbed-down), and the inventory turns on the health timer (gpufleet_health_timer).
MONITOR ?=
export GF_MONITOR = $(value MONITOR)
# monitor-deps is a prerequisite when MONITOR is on (never a $(MAKE) inside the recipe: make -n
# would run that line, tbctl up with it); the recipe still refuses a spelling BOOL does not know
MONITOR_DEPS = $(if $(filter-out 0 n N no No NO false False FALSE off Off OFF,$(MONITOR)),monitor-deps)
testbed-up: setup testbed-deps $(MONITOR_DEPS) ## start the simulated EL cluster (NODES=3; SLURM=1 adds Slurm; MONITOR=1 node_exporter + Prometheus; TESTBED_GPU=node2,node3 poses GPU nodes; TORCH_WHEELS=cuda: PyPI's CUDA torch; idempotent); prints the inventory path
	@extra=(); sl=$$($(BOOL) SLURM "$$GF_SLURM"); [ "$$sl" = 1 ] && extra=(--slurm); \
	[ "$$GF_LAUNCHER" = slurm ] && extra=(--slurm); \
	mon=$$($(BOOL) MONITOR "$$GF_MONITOR"); [ "$$mon" = 1 ] && extra+=(--monitor); \
	case "$$GF_TORCH_WHEELS" in ""|cpu|cuda) ;; *) echo "ERROR: TORCH_WHEELS='$$GF_TORCH_WHEELS' is refused -> allowed: cpu (default) or cuda" >&2; exit 2;; esac; \
	$(TBCTL) up --nodes "$$GF_NODES" --torch-wheels "$${GF_TORCH_WHEELS:-cpu}" $${extra[@]+"$${extra[@]}"}

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
demo: setup ## the main job on the built-in simulated cluster (root): testbed-up, provision, verify (LAUNCHER=slurm: through Slurm; MONITOR=1: node_exporter, Prometheus at 127.0.0.1:9090, the health timer)
	$(MAKE) --no-print-directory testbed-up
	$(MAKE) --no-print-directory provision INVENTORY=testbed/inventory
	$(MAKE) --no-print-directory verify INVENTORY=testbed/inventory
	@mon=$$($(BOOL) MONITOR "$$GF_MONITOR"); if [ "$$mon" = 1 ]; then $(TBCTL) monitor-wait --timeout 180 && \
	  echo ">> Prometheus: http://127.0.0.1:9090 (gpufleet_health_* of every node, alerts of monitoring/prometheus/gpufleet.rules.yml)"; fi
	@echo ">> demo done: the cluster report is reports/latest/index.html (summary.md, summary.json); make testbed-down removes the testbed"
