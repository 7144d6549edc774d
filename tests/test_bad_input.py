"""Bad input is refused before any change, with a message that names the variable, the
value and what is allowed (issue 7, "Bad input").

CASES is the one table. Each case gives bad inventory or variable values and the three
things its message must name. How a case runs follows from what it gives:

- ``hosts`` (inventory cases): its own inventory file (the gpu_nodes hosts, with BASE_VARS
  as group vars), and the real ``playbooks/check_inventory.yml`` run on it: the play that
  provision.yml and verify.yml import first. The hosts are fake names on the local
  connection; the check needs no connection to them.
- ``vars`` only (variable cases): all in ONE ansible-playbook run on localhost, each case in
  its own block/rescue that includes ``playbooks/tasks/check_node.yml``, the per-node part
  of the check play (every role's check_inputs entry point: argument spec, then the value
  checks that need neither facts nor the plan), with the case's variables.
- ``os_release`` (OS cases): in the same run, the python_bootstrap role reads that file
  as the node's /etc/os-release (raw, read-only) and refuses the system before anything is
  installed.

"Before any change" is asserted: every PLAY RECAP line says changed=0, the failing task
is one of the validation tasks, and the directories the roles would write to (set to
sentinel paths under tmp_path) do not exist afterwards. No case runs a task that could
install anything: only the validation layer runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHECK_PLAY = REPO / "playbooks" / "check_inventory.yml"
CHECK_NODE = REPO / "playbooks" / "tasks" / "check_node.yml"
ALL_ROLES = [
    "python_bootstrap",
    "preflight",
    "nvidia_driver",
    "cuda_toolkit",
    "torch_env",
    "cluster_network",
    "verify",
]

EL7 = 'NAME="CentOS Linux"\nID="centos"\nVERSION_ID="7"\nPRETTY_NAME="CentOS Linux 7 (Core)"\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n'
EL6 = 'NAME="CentOS Linux"\nID="centos"\nVERSION_ID="6"\n'


@dataclass(frozen=True)
class Case:
    """One bad input: what is given, and the variable, value and allowed words its message needs."""

    id: str
    vars: dict[str, Any]
    variable: str
    value: str
    allowed: str
    hosts: dict[str, dict[str, Any]] | None = None  # inventory case: the gpu_nodes hosts
    os_release: str | None = None  # OS case: the node's os-release

    @property
    def words(self) -> tuple[str, str, str]:
        return (self.variable, self.value, self.allowed)


TWO_NODES: dict[str, dict[str, Any]] = {
    "node1": {"gpufleet_cluster_address": "10.0.0.1"},
    "node2": {"gpufleet_cluster_address": "10.0.0.2"},
}


def hosts(**changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """TWO_NODES with some hosts' variables replaced."""
    return {**TWO_NODES, **changes}


CASES: list[Case] = [
    # --- the inventory as a whole (cluster-level checks of the check play) -----------------
    Case("empty-gpu-nodes", {}, "gpu_nodes", "gpu_nodes=[]", "one or more hosts", hosts={}),
    Case(
        "duplicate-cluster-address",
        {},
        "gpufleet_cluster_address",
        "'10.0.0.1' is used by node1 and node2",
        "a distinct address per node",
        hosts=hosts(node2={"gpufleet_cluster_address": "10.0.0.1"}),
    ),
    Case(
        "duplicate-ansible-host",
        {},
        "ansible_host",
        "'192.168.1.10' is used by node1 and node2",
        "a distinct ansible_host per node",
        hosts={
            "node1": {"ansible_host": "192.168.1.10"},
            "node2": {"ansible_host": "192.168.1.10"},
        },
    ),
    Case(
        "master-not-in-gpu-nodes",
        {"gpufleet_master": "node9"},
        "gpufleet_master",
        "'node9'",
        "node1 or node2",
        hosts=TWO_NODES,
    ),
    Case(
        "cidr-prefix-33",
        {"gpufleet_cluster_cidr": "10.0.0.0/33"},
        "gpufleet_cluster_cidr",
        "'10.0.0.0/33'",
        "prefix 0-32 for IPv4",
        hosts=TWO_NODES,
    ),
    Case(
        "cidr-banana",
        {"gpufleet_cluster_cidr": "banana"},
        "gpufleet_cluster_cidr",
        "'banana'",
        "ADDRESS/PREFIX, e.g. 10.0.0.0/24",
        hosts=TWO_NODES,
    ),
    Case(
        "cidr-host-bits",
        {"gpufleet_cluster_cidr": "10.0.0.1/24"},
        "gpufleet_cluster_cidr",
        "'10.0.0.1/24'",
        "the network address 10.0.0.0/24",
        hosts=TWO_NODES,
    ),
    Case(
        "address-outside-cidr",
        {},
        "gpufleet_cluster_address",
        "'10.0.1.2'",
        "an address inside 10.0.0.0/24",
        hosts=hosts(node2={"gpufleet_cluster_address": "10.0.1.2"}),
    ),
    Case(
        "address-malformed",
        {},
        "gpufleet_cluster_address",
        "'10.0.0'",
        "IPv4 or IPv6 address",
        hosts=hosts(node2={"gpufleet_cluster_address": "10.0.0"}),
    ),
    Case(
        "cidr-differs-between-nodes",
        {},
        "gpufleet_cluster_cidr differs",
        "'10.0.0.0/16' on node2",
        "one value for the whole cluster",
        hosts=hosts(
            node2={"gpufleet_cluster_address": "10.0.0.2", "gpufleet_cluster_cidr": "10.0.0.0/16"}
        ),
    ),
    Case(
        "rdzv-port-zero",
        {"gpufleet_rdzv_port": 0},
        "gpufleet_rdzv_port",
        "=0",
        "an integer 1-65535",
        hosts=TWO_NODES,
    ),
    Case(
        "rdzv-port-70000",
        {"gpufleet_rdzv_port": 70000},
        "gpufleet_rdzv_port",
        "=70000",
        "an integer 1-65535",
        hosts=TWO_NODES,
    ),
    Case(
        "rdzv-port-str-for-int",
        {"gpufleet_rdzv_port": "http"},
        "gpufleet_rdzv_port",
        "'http'",
        "an integer 1-65535",
        hosts=TWO_NODES,
    ),
    Case(
        "node-variable-in-host-vars",
        {},
        "node2: nvidia_driver_install_retries",
        "=0",
        "an integer >= 1",
        hosts=hosts(
            node2={"gpufleet_cluster_address": "10.0.0.2", "nvidia_driver_install_retries": 0}
        ),
    ),
    # --- versions (preflight's checks and the planner, for the versions alone) -------------
    Case(
        "torch-malformed",
        {"gpufleet_torch_version": "2.x"},
        "gpufleet_torch_version",
        "=2.x",
        "write X.Y.Z",
    ),
    Case(
        "torch-unknown",
        {"gpufleet_torch_version": "9.9.9"},
        "gpufleet_torch_version",
        "9.9.9",
        "it knows torch 1.13 to 2.15",
    ),
    Case(
        "variant-not-published-for-torch",
        {"gpufleet_torch_version": "2.13.0", "gpufleet_cuda_variant": "cu118"},
        "gpufleet_cuda_variant",
        "cu118",
        "it has cu126, cu129, cu130, cu132 and cpu",
    ),
    Case(
        "variant-malformed",
        {"gpufleet_cuda_variant": "gpu"},
        "gpufleet_cuda_variant",
        "=gpu",
        "cuXXX such as cu126",
    ),
    Case(
        "python-malformed",
        {"gpufleet_python_version": "3"},
        "gpufleet_python_version",
        "=3 ",
        "write 3.X",
    ),
    Case(
        "python-outside-torch-range",
        {"gpufleet_torch_version": "2.13.0", "gpufleet_python_version": "3.8"},
        "gpufleet_python_version",
        "not 3.8",
        "Python 3.10 to 3.14",
    ),
    Case(
        "driver-branch-malformed",
        {"nvidia_driver_branch": "abc"},
        "nvidia_driver_branch",
        "=abc",
        "three digits such as 580",
    ),
    # --- types and choices (argument specs) ------------------------------------------------
    Case(
        "env-manager-unknown",
        {"torch_env_manager": "pip"},
        "torch_env_manager",
        "got: pip",
        "one of: conda, venv",
    ),
    Case(
        "str-for-int",
        {"torch_env_pip_timeout": "soon"},
        "torch_env_pip_timeout",
        "'soon'",
        "convert to int",
    ),
    Case(
        "str-for-int-verify",
        {"verify_iters": "many"},
        "verify_iters",
        "'many'",
        "convert to int",
    ),
    Case(
        "non-bool-for-bool",
        {"cluster_network_restrict_ports": "maybe"},
        "cluster_network_restrict_ports",
        "'maybe'",
        "Valid booleans include",
    ),
    Case(
        "str-for-list-find-links",
        {"gpufleet_pip_find_links": "/srv/wheels"},
        "torch_env_pip_find_links (gpufleet_pip_find_links)",
        '"/srv/wheels"',
        "a list of strings",
    ),
    Case(
        "str-for-list-ib-hca",
        {"cluster_network_ib_enable": True, "cluster_network_ib_hca": "mlx5_0"},
        "cluster_network_ib_hca",
        '"mlx5_0"',
        "a list of HCA names",
    ),
    Case(
        "reboot-choice",
        {"nvidia_driver_reboot": "sometimes"},
        "nvidia_driver_reboot",
        "got: sometimes",
        "one of: auto, never",
    ),
    Case(
        "verify-dtype-unknown",
        {"verify_dtype": "float8"},
        "verify_dtype",
        "got: float8",
        "float32, float16, bfloat16, float64, int32, int64",
    ),
    # --- counts, timeouts, ports, paths (the roles' value checks) --------------------------
    Case("verify-iters-zero", {"verify_iters": 0}, "verify_iters", "=0", "an integer >= 1"),
    Case(
        "verify-cpu-nproc-zero",
        {"verify_cpu_nproc": 0},
        "verify_cpu_nproc",
        "=0",
        "an integer >= 1",
    ),
    Case(
        "verify-gpus-per-node-negative",
        {"verify_gpus_per_node": -1},
        "verify_gpus_per_node",
        "=-1",
        "an integer >= 0",
    ),
    Case(
        "verify-collective-timeout-zero",
        {"verify_collective_timeout": 0},
        "verify_collective_timeout",
        "=0",
        "an integer >= 1 (seconds)",
    ),
    Case(
        "verify-rdzv-timeout-negative",
        {"verify_rdzv_timeout": -5},
        "verify_rdzv_timeout",
        "=-5",
        "an integer >= 1 (seconds)",
    ),
    Case(
        "verify-probe-retries-negative",
        {"verify_probe_retries": -1},
        "verify_probe_retries",
        "=-1",
        "an integer >= 1",
    ),
    Case(
        "verify-probe-port-70000",
        {"verify_probe_port": 70000},
        "verify_probe_port",
        "=70000",
        "an integer 1-65535",
    ),
    Case(
        "verify-sizes-malformed",
        {"verify_sizes": "64Q,1M"},
        "verify_sizes",
        "'64Q,1M'",
        "e.g. 4096, 64K, 16M or 1G",
    ),
    Case(
        "verify-run-id-path",
        {"verify_run_id": "../other"},
        "verify_run_id",
        "'../other'",
        "A-Z a-z 0-9 . _ -",
    ),
    Case(
        "torch-env-retries-negative",
        {"torch_env_pip_retries": -1},
        "torch_env_pip_retries",
        "=-1",
        "an integer >= 0",
    ),
    Case(
        "torch-env-prefix-relative",
        {"torch_env_prefix": "opt/env"},
        "torch_env_prefix",
        "=opt/env",
        "an absolute path",
    ),
    Case(
        "toolkit-retries-zero",
        {"cuda_toolkit_install_retries": 0},
        "cuda_toolkit_install_retries",
        "=0",
        "an integer >= 1",
    ),
    # --- unsupported systems (python_bootstrap, before fact gathering) ---------------------
    Case(
        "os-el7", {}, "[ansible_distribution]", "CentOS 7 is refused", "EL 8/9/10", os_release=EL7
    ),
    Case(
        "os-ubuntu",
        {},
        "[ansible_distribution]",
        "ubuntu 22.04 is not Enterprise Linux",
        "Oracle Linux 8, 9 and 10",
        os_release=UBUNTU,
    ),
    Case(
        "os-el6",
        {},
        "[ansible_distribution]",
        "CentOS 6 is not supported",
        "EL 8, 9, 10",
        os_release=EL6,
    ),
]

OUTCOMES = "bad-input-outcomes"
INVENTORY_CASES = [c for c in CASES if c.hosts is not None]
# Global variables of inventory/group_vars and the role that checks them first.
GLOBAL_READERS = {
    "gpufleet_torch_version": "preflight",
    "gpufleet_cuda_variant": "preflight",
    "gpufleet_python_version": "preflight",
    "gpufleet_pip_find_links": "torch_env",
}
NODE_CASES = [c for c in CASES if c.hosts is None]


# --------------------------------------------------------------------------- running


def sentinels(root: Path) -> dict[str, str]:
    """Where the roles would write: paths under ``root`` that must stay absent."""
    return {
        "gpufleet_env_prefix": str(root / "opt" / "env"),
        "gpufleet_state_dir": str(root / "var" / "gpufleet"),
        "gpufleet_config_dir": str(root / "etc" / "gpufleet"),
        "torch_env_conda_root": str(root / "opt" / "miniforge"),
        "cluster_network_firewalld_dir": str(root / "etc" / "firewalld"),
        "verify_work_dir": str(root / "runs"),
        "verify_suites_dir": str(root / "suites"),
        "verify_report_dir": str(root / "reports"),
    }


def base_vars(root: Path) -> dict[str, Any]:
    """Group variables of a valid cluster (every case changes one thing)."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_cluster_cidr": "10.0.0.0/24",
        "gpufleet_rdzv_port": 29500,
        "gpufleet_torch_version": "2.13.0",
        **sentinels(root),
    }


def ansible_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCALHOST_WARNING="0",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def playbook(inventory: Path, play: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play)],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    text = stdout.split("PLAY RECAP", 1)[-1]
    out = {}
    for m in re.finditer(r"^(\S+)\s+:\s+(ok=.*)$", text, flags=re.MULTILINE):
        out[m.group(1)] = {k: int(v) for k, v in (p.split("=") for p in m.group(2).split())}
    return out


def failures(stdout: str) -> list[tuple[str, str]]:
    """(task name, message) of every ``fatal:`` result (json result format)."""
    task, out = "", []
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK [") : line.rindex("]")]
        elif line.startswith("fatal: [") and "=> {" in line:
            result = json.loads(line.split("=> ", 1)[1])
            out.append((task, str(result.get("msg", ""))))
    return out


@dataclass
class InventoryRun:
    rc: int
    stdout: str
    recap: dict[str, dict[str, int]]
    failures: list[tuple[str, str]]
    sentinel_root: Path
    extra: dict[str, Any] = field(default_factory=dict)


def run_inventory_case(
    root: Path, case_hosts: dict[str, Any], group_vars: dict[str, Any]
) -> InventoryRun:
    root.mkdir(parents=True)
    inventory = root / "hosts.json"
    group = {"hosts": case_hosts, "vars": {**base_vars(root / "node"), **group_vars}}
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": group}}}), encoding="utf-8")
    res = playbook(inventory, CHECK_PLAY)
    return InventoryRun(
        res.returncode,
        res.stdout + res.stderr,
        recap(res.stdout),
        failures(res.stdout),
        root / "node",
    )


@pytest.fixture(scope="module")
def inventory_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, InventoryRun]:
    """Every inventory case (and a good inventory, id "_good"), two at a time."""
    tmp = tmp_path_factory.mktemp("inventories")
    jobs = {c.id: (c.hosts or {}, c.vars) for c in INVENTORY_CASES}
    jobs["_good"] = (TWO_NODES, {})
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            cid: pool.submit(run_inventory_case, tmp / cid, h, v) for cid, (h, v) in jobs.items()
        }
        return {cid: f.result() for cid, f in futures.items()}


def roles_of(case: Case) -> list[str]:
    """The roles whose check_inputs read the case's variables (all roles for no variable).

    The check play runs every role for every node; a case runs only the roles its
    variables belong to, which keeps the one run of all cases short.
    """
    if not case.vars:
        return ALL_ROLES
    wanted = set()
    for var in case.vars:
        role = GLOBAL_READERS.get(var) or next(r for r in ALL_ROLES if var.startswith(r + "_"))
        wanted.add(role)
    return [r for r in ALL_ROLES if r in wanted]


def _node_play(root: Path) -> list[dict[str, Any]]:
    """One play on localhost: every node case in its own block/rescue (plus "_good")."""
    record = (
        "{{ r | combine({'%s': {'task': ansible_failed_task.name | default('?'), 'msg': "
        "([ansible_failed_result.msg | default('')] + (ansible_failed_result.results | default([])"
        " | selectattr('failed', 'defined') | selectattr('failed') | map(attribute='msg')"
        " | list)) | join(' | ')}}) }}"
    )
    base = {**base_vars(root), "gpufleet_cluster_address": "10.0.0.1"}
    del base["ansible_connection"], base["ansible_python_interpreter"]
    tasks: list[dict[str, Any]] = [{"name": "start", "ansible.builtin.set_fact": {"r": {}}}]
    cases = [*NODE_CASES, Case("_good", {}, "", "", "")]
    for case in cases:
        if case.os_release is not None:
            release = root.parent / f"os-release-{case.id}"
            release.write_text(case.os_release, encoding="utf-8")
            step = {
                "name": f"{case.id}: python_bootstrap reads the os-release",
                "ansible.builtin.include_role": {"name": "python_bootstrap"},
                "vars": {
                    **base,
                    "python_bootstrap_os_release_file": str(release),
                    # never install, even if the refusal were missing
                    "python_bootstrap_interpreter": sys.executable,
                    "python_bootstrap_install": False,
                    **case.vars,
                },
            }
        else:
            step = {
                "name": f"{case.id}: the check play's node checks",
                "ansible.builtin.include_tasks": str(CHECK_NODE),
                "vars": {**base, "gpufleet_check_roles": roles_of(case), **case.vars},
            }
        ok = {"r": "{{ r | combine({'" + case.id + "': {'task': '', 'msg': 'NO-ERROR'}}) }}"}
        tasks.append(
            {
                "name": f"case {case.id}",
                "block": [step, {"name": f"{case.id} passed", "ansible.builtin.set_fact": ok}],
                "rescue": [
                    {
                        "name": f"{case.id} refused",
                        "ansible.builtin.set_fact": {"r": record % case.id},
                    }
                ],
            }
        )
    # printed, not written to a file: the run must report changed=0
    tasks.append({"name": "outcomes", "ansible.builtin.debug": {"msg": {OUTCOMES: "{{ r }}"}}})
    return [{"hosts": "gpu_nodes", "gather_facts": False, "tasks": tasks}]


@pytest.fixture(scope="module")
def node_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """(outcomes {case id: {task, msg}}, output, sentinel root) of the one run of node cases."""
    tmp = tmp_path_factory.mktemp("nodes")
    root = tmp / "node"
    play = tmp / "play.yml"
    play.write_text(yaml.safe_dump(_node_play(root), sort_keys=False), encoding="utf-8")
    inventory = tmp / "hosts.json"
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"localhost": localhost}}}}}),
        encoding="utf-8",
    )
    res = playbook(inventory, play, timeout=600)
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-4000:]
    start = res.stdout.index("=> ", res.stdout.index("TASK [outcomes]")) + len("=> ")
    result, _ = json.JSONDecoder().raw_decode(res.stdout, start)
    outcomes: dict[str, Any] = result["msg"][OUTCOMES]
    return outcomes, text, root


def validation_tasks() -> set[str]:
    """Names of the tasks that make up the validation layer (check play, check_inputs)."""
    names = {t["name"] for play in yaml.safe_load(CHECK_PLAY.read_text()) for t in play["tasks"]}
    files = [
        *REPO.glob("roles/*/tasks/check_inputs.yml"),
        REPO / "roles/preflight/tasks/validate.yml",
    ]
    for path in files:
        names |= {t["name"] for t in yaml.safe_load(path.read_text()) or []}
    # python_bootstrap refuses unsupported systems with preflight's refuse.yml
    names |= {
        t["name"] for t in yaml.safe_load((REPO / "roles/preflight/tasks/refuse.yml").read_text())
    }
    return names


def in_validation(task: str, names: set[str]) -> bool:
    if "Validating arguments against arg spec 'check_inputs'" in task:
        return True
    return task.split(" : ", 1)[-1] in names


# --------------------------------------------------------------------------- the tests


def test_the_table() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert 35 <= len(CASES) <= 50
    for c in CASES:
        assert all(c.words), f"{c.id}: name the variable, the value and what is allowed"


def test_good_inventory_passes(inventory_runs: dict[str, InventoryRun]) -> None:
    run = inventory_runs["_good"]
    assert run.rc == 0, run.stdout[-3000:]
    assert set(run.recap) == {"node1", "node2"}, "the recap shows the nodes only"
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in run.recap.values())


def test_good_variables_pass(node_run: tuple[dict[str, Any], str, Path]) -> None:
    outcomes, _, _ = node_run
    assert outcomes["_good"]["msg"] == "NO-ERROR"


@pytest.mark.parametrize("case", INVENTORY_CASES, ids=lambda c: c.id)
def test_inventory_case(inventory_runs: dict[str, InventoryRun], case: Case) -> None:
    run = inventory_runs[case.id]
    assert run.rc != 0, f"{case.id}: bad inventory accepted:\n{run.stdout[-3000:]}"
    assert run.failures, run.stdout[-3000:]
    names = validation_tasks()
    for task, _ in run.failures:
        assert in_validation(task, names), f"{case.id}: failed outside the check play: {task}"
    msg = "\n".join(m for _, m in run.failures)
    for word in case.words:
        assert word in msg, f"{case.id}: {word!r} not in {msg!r}"
    assert run.recap, run.stdout[-3000:]
    assert all(r["changed"] == 0 for r in run.recap.values()), run.recap
    assert not run.sentinel_root.exists(), f"{case.id}: something was written"


@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: c.id)
def test_variable_case(node_run: tuple[dict[str, Any], str, Path], case: Case) -> None:
    outcomes, _, _ = node_run
    outcome = outcomes[case.id]
    msg = outcome["msg"]
    assert msg != "NO-ERROR", f"{case.id}: bad input was accepted"
    assert in_validation(outcome["task"], validation_tasks()), outcome["task"]
    for word in case.words:
        assert word in msg, f"{case.id}: {word!r} not in {msg!r}"


def test_variable_cases_change_nothing(node_run: tuple[dict[str, Any], str, Path]) -> None:
    _, text, root = node_run
    counters = recap(text)
    assert counters["localhost"]["changed"] == 0, counters
    assert counters["localhost"]["rescued"] == len(NODE_CASES), counters
    assert not root.exists(), "a refused input must not write anything"


def test_the_playbooks_check_first() -> None:
    """provision.yml and verify.yml import the check play before anything else."""
    for name in ("provision.yml", "verify.yml"):
        first = yaml.safe_load((REPO / "playbooks" / name).read_text())[0]
        assert first["ansible.builtin.import_playbook"] == "check_inventory.yml", name
    provision = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())[0]
    assert set(provision["vars"]["gpufleet_check_roles"]) == set(ALL_ROLES) - {"verify"}
