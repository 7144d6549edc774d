"""Bad input is refused before any change, with a message that names the variable as the
user wrote it, the value and what is allowed (issue 7, "Bad input"; issues 28 and 29).

The cases are data: ``bad_inputs.yml`` next to this file (its header says what a case
gives). This module is the one runner. How a case runs follows from what it gives:

- ``hosts`` or ``inventory`` (inventory cases): its own inventory file (the gpu_nodes
  hosts, with BASE_VARS and the case's vars as group vars), and the real
  ``playbooks/check_inventory.yml`` run on it: the play that provision.yml and verify.yml
  import first. The hosts are fake names on the local connection; the check needs no
  connection to them. Two runs at a time.
- ``vars`` only (variable cases): all in ONE ansible-playbook run on localhost, each case in
  its own block/rescue that includes ``playbooks/tasks/check_node.yml``, the per-node part
  of the check play (every role's check_inputs entry point: argument spec, then the value
  checks that need neither facts nor the plan), with the case's variables, for the roles
  that read them (:func:`roles_of`).
- ``os_release`` (OS cases): in the same run, the python_bootstrap role reads that file
  as the node's /etc/os-release (raw, read-only) and refuses the system before anything is
  installed.
- ``argv`` (command cases): make or gpufleet, run in the repository as users run them.

"Before any change" is asserted: every PLAY RECAP line says changed=0, the failing task
is one of the validation tasks, and the directories the roles would write to (set to
sentinel paths under tmp_path) do not exist afterwards. No case runs a task that could
install anything: only the validation layer runs. Cases marked ``slow`` are left out of
make test (another case of make test checks the same rule).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from playbook_runner import PROVISION_ROLES, ansible_env, run_playbook

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
TABLE = Path(__file__).with_name("bad_inputs.yml")
CHECK_PLAY = REPO / "playbooks" / "check_inventory.yml"
CHECK_NODE = REPO / "playbooks" / "tasks" / "check_node.yml"
#: every role whose check a run makes: provision.yml's, node_reboot (nvidia_driver includes
#: it for its reboot; make rolling-reboot runs it), verify
ALL_ROLES = [*PROVISION_ROLES, "node_reboot", "verify"]
OUTCOMES = "bad-input-outcomes"

#: What each class of bad input is (every case names one; each has a case in make test).
CLASSES = {
    "inventory": "the inventory as a whole: hosts, addresses, master, network, port, play settings",
    "versions": "torch, wheel variant and Python versions no node can take",
    "torch-source": "a torch source that cannot work, a lock that cannot be read or is not of the plan",
    "credentials": "credentials in a mirror URL that cannot be kept secret or sent safely",
    "types-and-choices": "a value of the wrong type, or not one of a variable's choices",
    "ranges": "counts, timeouts, ports and sizes outside their range",
    "slurm": "Slurm names, GRES and the health check's files",
    "monitoring": "the health timer's interval, node_exporter's textfile directory, the drain threshold",
    "rendered-files": "newlines and control characters in values rendered into files",
    "ownership": "system directories, accounts and groups gpufleet would take over",
    "security": "wide firewall sources, foreign zones, loader variables, package options, keys",
    "late-values": "values refused late before: architectures, driver branches, numbers",
    "role-specs": "the argument spec and value checks of every role, one case per rule",
    "hgx": "Fabric Manager, NVLink, InfiniBand and DCGM variables",
    "os": "systems gpufleet does not support",
    "commands": "make variables and command-line arguments",
    "names-as-written": "the refusal names the variable the user wrote (gpufleet_x feeds role_x)",
    "memory-bounds": "an all-reduce size beyond any node's memory",
    "port-clashes": "ports of the nodes' services, and ports that clash with each other",
    "address-forms": "addresses with a zone, link-local, a network's network or broadcast address",
    "whitespace-in-names": "names, paths and addresses with blanks around them",
}

#: Two nodes of a valid inventory (``inventory: two_nodes`` in the table).
TWO_NODES: dict[str, dict[str, Any]] = {
    "node1": {"gpufleet_cluster_address": "10.0.0.1"},
    "node2": {"gpufleet_cluster_address": "10.0.0.2"},
}
# The command cases' words: a command substitution that ran would create MARK.
MARK = "/tmp/gpufleet-bad-input-pwned"
COMMANDS: dict[str, tuple[str, ...]] = {
    "{make}": ("make", "--no-print-directory", "-C", str(REPO)),
    "{gpufleet}": (sys.executable, "-m", "gpufleet"),
    "{checks}": (sys.executable, "-m", "pytest", "-c", "checks/pytest.ini", "checks",
                 "-p", "no:cacheprovider", "--collect-only", "-q"),
}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One bad input: what is given, and the fragments its message must (and must not) hold."""

    id: str
    klass: str
    vars: dict[str, Any]
    variable: str
    value: str
    allowed: str
    hosts: dict[str, dict[str, Any]] | None = None  # inventory case: the gpu_nodes hosts
    os_release: str | None = None  # OS case: the node's os-release
    argv: tuple[str, ...] | None = None  # command case: make or gpufleet, run in the repo
    rc: int = 2  # a command case's exit code: 2 refused, 1 a broken input file
    roles: tuple[str, ...] = ()  # a variable case's roles (default: roles_of)
    absent: tuple[str, ...] = ()
    slow: bool = False

    @property
    def words(self) -> tuple[str, str, str]:
        return (self.variable, self.value, self.allowed)


def _mark(text: str) -> str:
    return text.replace("{mark}", MARK)


def _case(entry: dict[str, Any], os_releases: dict[str, str]) -> Case:
    hosts = entry.get("hosts")
    if entry.get("inventory") == "two_nodes":
        hosts = {**TWO_NODES, **entry.get("host_vars", {})}
    argv = None
    if "argv" in entry:
        argv = tuple(part for word in entry["argv"] for part in COMMANDS.get(word, (_mark(word),)))
    variable, value, allowed = entry["expect"]
    return Case(
        id=entry["id"],
        klass=entry["class"],
        vars=entry.get("vars", {}),
        variable=variable,
        value=_mark(value),
        allowed=allowed,
        hosts=hosts,
        os_release=os_releases[entry["os_release"]] if "os_release" in entry else None,
        argv=argv,
        rc=entry.get("rc", 2),
        roles=tuple(entry.get("roles", ())),
        absent=tuple(entry.get("absent", ())),
        slow=bool(entry.get("slow", False)),
    )


def load_cases(path: Path = TABLE) -> list[Case]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [_case(entry, data.get("os_releases", {})) for entry in data["cases"]]


CASES = load_cases()
COMMAND_CASES = [c for c in CASES if c.argv is not None]
INVENTORY_CASES = [c for c in CASES if c.hosts is not None]
NODE_CASES = [c for c in CASES if c.hosts is None and c.argv is None]


def _readers() -> dict[str, list[str]]:
    """{shared gpufleet_* variable: the roles whose defaults read it}, from the roles'
    defaults/main.yml (the values, not the comments)."""
    out: dict[str, list[str]] = {}
    for role in ALL_ROLES:
        defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
        for value in (defaults or {}).values():
            for name in re.findall(r"(?<![\w.])gpufleet_\w+", str(value)):
                if role not in out.setdefault(name, []):
                    out[name].append(role)
    return out


READERS = _readers()


def roles_of(case: Case) -> list[str]:
    """The roles whose check_inputs read the case's variables (all roles for no variable).

    The check play runs every role for every node; a case runs only the roles its
    variables belong to (their prefix, the role's extra names, or, for a shared gpufleet_*
    variable, the roles whose defaults read it), which keeps the one run of all cases short.
    A shared variable no default reads is checked by gpufleet_common's argument spec, which
    every role's check runs first.
    """
    from gpufleet.inputs.role_inputs import own_names

    if case.roles:
        return list(case.roles)
    if not case.vars:
        return ALL_ROLES
    wanted: set[str] = set()
    for var in case.vars:
        mine = {r for r in ALL_ROLES if own_names(r, [var])} | set(READERS.get(var, []))
        wanted |= mine or {ALL_ROLES[0]}
    return [r for r in ALL_ROLES if r in wanted]


def check_message(case: Case, msg: str) -> None:
    """The refusal names the variable, the value and what is allowed, and nothing absent."""
    for word in case.words:
        assert word in msg, f"{case.id}: {word!r} not in {msg!r}"
    for word in case.absent:
        assert word not in msg, f"{case.id}: {word!r} in {msg!r}"


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


def playbook(inventory: Path, play: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return run_playbook(
        play, inventory=inventory, env=ansible_env(json_results=True), timeout=timeout
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


def selected_inventory_cases(session: pytest.Session) -> set[str]:
    """Ids of the test_inventory_case cases this pytest run selected (after -m / -k)."""
    return {
        case.id
        for item in session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_inventory_case"
        and isinstance(case := item.callspec.params["case"], Case)
    }


@pytest.fixture(scope="module")
def inventory_runs(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, InventoryRun]:
    """Every selected inventory case (and a good inventory, id "_good"), two at a time."""
    tmp = tmp_path_factory.mktemp("inventories")
    selected = selected_inventory_cases(request.session)
    jobs = {c.id: (c.hosts or {}, c.vars) for c in INVENTORY_CASES if c.id in selected}
    jobs["_good"] = (TWO_NODES, {})
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            cid: pool.submit(run_inventory_case, tmp / cid, h, v) for cid, (h, v) in jobs.items()
        }
        return {cid: f.result() for cid, f in futures.items()}


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
    cases = [*NODE_CASES, Case("_good", "", {}, "", "", "")]
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
    files = [CHECK_NODE, *REPO.glob("roles/*/tasks/check_inputs.yml")]
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
    # the shared variables' spec: gpufleet_common runs as the first check_inputs' dependency
    if task.startswith("gpufleet_common : Validating arguments against arg spec 'main'"):
        return True
    return task.split(" : ", 1)[-1] in names


# --------------------------------------------------------------------------- the tests


def test_the_table() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(CASES) >= 230
    for c in CASES:
        assert all(c.words), f"{c.id}: name the variable, the value and what is allowed"
        assert c.klass in CLASSES, f"{c.id}: class {c.klass!r} is not one of CLASSES"
    assert {c.klass for c in CASES} == set(CLASSES), "every class has its cases"
    fast = {c.klass for c in CASES if not c.slow}
    assert fast == set(CLASSES), "make test runs a case of every class"


@pytest.mark.xdist_group("bad-input-inventory")
def test_good_inventory_passes(inventory_runs: dict[str, InventoryRun]) -> None:
    run = inventory_runs["_good"]
    assert run.rc == 0, run.stdout[-3000:]
    assert set(run.recap) == {"node1", "node2"}, "the recap shows the nodes only"
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in run.recap.values())


@pytest.mark.xdist_group("bad-input-variables")
def test_good_variables_pass(node_run: tuple[dict[str, Any], str, Path]) -> None:
    outcomes, _, _ = node_run
    assert outcomes["_good"]["msg"] == "NO-ERROR"


@pytest.mark.xdist_group("bad-input-inventory")
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in INVENTORY_CASES],
)
def test_inventory_case(inventory_runs: dict[str, InventoryRun], case: Case) -> None:
    run = inventory_runs[case.id]
    assert run.rc != 0, f"{case.id}: bad inventory accepted:\n{run.stdout[-3000:]}"
    assert run.failures, run.stdout[-3000:]
    names = validation_tasks()
    for task, _ in run.failures:
        assert in_validation(task, names), f"{case.id}: failed outside the check play: {task}"
    check_message(case, "\n".join(m for _, m in run.failures))
    assert run.recap, run.stdout[-3000:]
    assert all(r["changed"] == 0 for r in run.recap.values()), run.recap
    assert not run.sentinel_root.exists(), f"{case.id}: something was written"


@pytest.mark.xdist_group("bad-input-variables")
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in NODE_CASES],
)
def test_variable_case(node_run: tuple[dict[str, Any], str, Path], case: Case) -> None:
    outcomes, _, _ = node_run
    outcome = outcomes[case.id]
    msg = outcome["msg"]
    assert msg != "NO-ERROR", f"{case.id}: bad input was accepted"
    assert in_validation(outcome["task"], validation_tasks()), outcome["task"]
    check_message(case, msg)


@pytest.mark.xdist_group("bad-input-variables")
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


@pytest.mark.xdist_group("bad-input-commands")
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in COMMAND_CASES],
)
def test_command_case(case: Case) -> None:
    """A bad make variable or CLI argument: refused with its exit code (make: 2 for any
    failed recipe; pytest: 4 for a bad option), one message naming it, its value and what
    is allowed, no traceback, no command run from the value, no run folder left claimed."""
    assert case.argv is not None
    Path(MARK).unlink(missing_ok=True)
    env = {**ansible_env(), "PYTHONPATH": str(REPO / "src"), "PYTHON": sys.executable}
    res = subprocess.run(case.argv, cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    out = res.stdout + res.stderr
    expected = 2 if case.argv[0] == "make" else case.rc
    assert res.returncode == expected, f"{case.id}: rc {res.returncode}\n{out[-3000:]}"
    check_message(case, out)
    assert "Traceback" not in out, out[-3000:]
    assert not Path(MARK).exists(), f"{case.id}: a command in the value ran"
    # a claimed run folder (gpufleet verify names it) is given back: nothing ran
    for rid in re.findall(r">> verify run (\S+)", out):
        assert not (REPO / "reports" / rid).exists(), f"{case.id}: reports/{rid} left behind"
