"""Every role declares its variables once, in meta/argument_specs.yml (types, checked before
the role runs, and defaults); defaults/main.yml and the README's variables table are generated
from it (scripts/role_docs.py; tests/contract/test_role_docs.py fails when names or values
drift). These tests check the layout and naming around them, for every role under roles/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from playbook_runner import PROVISION_ROLES

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())

_HEADING = re.compile(r"^(#+)\s+(.*)$")
_ROW = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|")


def defaults_keys(role: str) -> set[str]:
    path = REPO / "roles" / role / "defaults" / "main.yml"
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    return set(data or {})


def readme_keys(role: str) -> set[str]:
    path = REPO / "roles" / role / "README.md"
    return table_keys(path.read_text()) if path.exists() else set()


def table_keys(markdown: str) -> set[str]:
    """Variable names in the first column of the tables under a "... Variables" heading."""
    keys: set[str] = set()
    level = 0
    for line in markdown.splitlines():
        heading = _HEADING.match(line)
        if heading:
            depth = len(heading.group(1))
            if "variables" in heading.group(2).lower():
                level = depth
            elif level and depth <= level:
                level = 0
            continue
        row = _ROW.match(line)
        if level and row:
            keys.add(row.group(1))
    return keys


def test_there_are_roles() -> None:
    assert ROLES, "no role under roles/"


@pytest.mark.parametrize("role", ROLES)
def test_role_has_the_three_sources(role: str) -> None:
    base = REPO / "roles" / role
    missing = [
        rel
        for rel in ("defaults/main.yml", "meta/argument_specs.yml", "meta/main.yml", "README.md")
        if not (base / rel).exists()
    ]
    assert not missing, f"roles/{role} lacks {', '.join(missing)}"


def _defaults_match(role: str, other: set[str], where: str) -> None:
    defaults = defaults_keys(role)
    assert defaults == other, (
        f"roles/{role}: only in defaults/main.yml: {sorted(defaults - other)}; "
        f"only in {where}: {sorted(other - defaults)}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_readme_table(role: str) -> None:
    _defaults_match(role, readme_keys(role), "the README variables table")


def prefix(role: str) -> str:
    """gpufleet_common holds the shared gpufleet_* variables; every other role its own."""
    return "gpufleet_" if role == "gpufleet_common" else f"{role}_"


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix(role: str) -> None:
    stray = sorted(k for k in defaults_keys(role) if not k.startswith(prefix(role)))
    assert not stray, f"roles/{role}: defaults without the '{prefix(role)}' prefix: {stray}"


@pytest.mark.parametrize("role", [r for r in ROLES if r != "gpufleet_common"])
def test_every_role_depends_on_gpufleet_common(role: str) -> None:
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    deps = [d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []]
    assert "gpufleet_common" in deps, f"roles/{role}: gpufleet_common is not a dependency"


def test_shared_variables_have_one_default() -> None:
    """A gpufleet_* variable is defaulted in gpufleet_common only: no role writes
    `gpufleet_x | default(...)`."""
    shared = yaml.safe_load((REPO / "roles/gpufleet_common/defaults/main.yml").read_text())
    offenders = []
    for path in sorted(REPO.glob("roles/*/**/*.yml")):
        if "gpufleet_common" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\b(gpufleet_[a-z_]+)\s*\|\s*default\(", line):
                if m.group(1) in shared:
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {m.group(1)}")
    assert not offenders, offenders


def main_options() -> dict[str, dict[str, Any]]:
    """Every role's main-entry-point options, by variable name."""
    options: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        path = REPO / "roles" / role / "meta" / "argument_specs.yml"
        specs = yaml.safe_load(path.read_text())["argument_specs"]
        options.update(specs["main"]["options"] or {})
    return options


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "path": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}


def type_problem(name: str, value: Any, options: dict[str, dict[str, Any]]) -> str | None:
    """Why ``name: value`` is not a declared role option of its declared type (None: it is).
    A templated string is typed when Ansible renders it, so only its option is checked."""
    if name not in options:
        return f"{name} is no role's option (meta/argument_specs.yml)"
    kind = str(options[name].get("type", "str"))
    if isinstance(value, str) and "{{" in value:
        return None
    wanted = _PYTHON_TYPES.get(kind, (object,))
    if not isinstance(value, wanted) or (kind in ("int", "float") and isinstance(value, bool)):
        return f"{name}: {value!r} is not of type {kind}"
    choices = options[name].get("choices")
    if choices and value not in choices:
        return f"{name}: {value!r} is not one of {choices}"
    return None


_EXAMPLE = re.compile(r"^#\s*([a-z][a-z0-9_]*):(\s.*)?$")
_ROLE_VARIABLE = re.compile(r"^(gpufleet|" + "|".join(ROLES) + r")_")


def test_the_inventory_sets_declared_options_of_their_type() -> None:
    """inventory/group_vars/all shows what a site usually sets; each value there, and each
    commented example, is a declared role option of its declared type (a renamed or
    mistyped variable fails here, not silently on a cluster)."""
    options = main_options()
    problems = []
    for path in sorted((REPO / "inventory" / "group_vars" / "all").glob("*.yml")):
        text = path.read_text()
        for name, value in (yaml.safe_load(text) or {}).items():
            problems.append(type_problem(name, value, options))
        for line in text.splitlines():
            example = _EXAMPLE.match(line)
            if example:
                ((name, value),) = yaml.safe_load(line.lstrip("# ")).items()
                problems.append(type_problem(name, value, options))
    assert not [p for p in problems if p], [p for p in problems if p]


@pytest.mark.parametrize("source", ["inventory/hosts.yml", "inventory/examples/cluster.yml"])
def test_the_inventory_hosts_set_declared_options(source: str) -> None:
    """Role and gpufleet_* variables of the shipped hosts files are declared options of
    their type (the Ansible connection variables are Ansible's)."""
    options = main_options()
    found: list[tuple[str, Any]] = []

    def walk(group: dict[str, Any]) -> None:
        found.extend((group.get("vars") or {}).items())
        for host_vars in (group.get("hosts") or {}).values():
            found.extend((host_vars or {}).items())
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(yaml.safe_load((REPO / source).read_text())["all"])
    problems = [type_problem(k, v, options) for k, v in found if _ROLE_VARIABLE.match(k)]
    assert found and not [p for p in problems if p], [p for p in problems if p]


def test_the_inventory_checks_refuse_what_they_should() -> None:
    options = main_options()
    assert type_problem("gpufleet_torch_versoin", "2.13.0", options)
    assert type_problem("gpufleet_rdzv_port", "29500", options)
    assert type_problem("gpufleet_dcgm", "yes", options)
    assert type_problem("gpufleet_gpus_expected", True, options)
    assert type_problem("torch_env_manager", "pip", options)
    assert type_problem("gpufleet_gpu_archs", "sm_80", options)
    assert type_problem("gpufleet_cluster_cidr", "10.1.0.0/16", options) is None
    assert type_problem("verify_python", "{{ ansible_playbook_python }}", options) is None


@pytest.mark.parametrize("role", ROLES)
def test_every_option_is_described(role: str) -> None:
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    options = yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"] or {}
    undescribed = sorted(k for k, v in options.items() if not (v or {}).get("description"))
    assert not undescribed, f"roles/{role}: options without a description: {undescribed}"


def test_readme_parser_reads_only_the_variables_section() -> None:
    text = (
        "# r\n| `not_this` | x |\n## Role Variables\n| `r_a` | 1 |\n### Sub\n| `r_b` | 2 |\n"
        "## Example\n| `not_that` | y |\n"
    )
    assert table_keys(text) == {"r_a", "r_b"}


@pytest.mark.parametrize("role", [r for r in ROLES if r != "gpufleet_common"])
def test_the_check_inputs_entry_point_checks_what_the_main_one_does(role: str) -> None:
    """check_inventory.yml checks each role's check_inputs entry point; the playbooks then
    import the roles with rolespec_validate: false. That is the same check only while the
    two entry points declare the same options."""
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    entries = specs["argument_specs"]
    assert entries["check_inputs"]["options"] == entries["main"]["options"], role


def _after_run_once_lookups(role: str, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks from the first one that is not a run-once lookup. A role may start with
    run-once set_facts that compute something for every node at once (cluster_network's peer
    list), only where check_inventory.yml checked the role's variables in this run: it reads
    no input before the input check."""
    i = 0
    while i < len(tasks) and tasks[i].get("run_once") is True:
        task = tasks[i]
        assert set(task) <= {"name", "ansible.builtin.set_fact", "run_once", "when"}, task
        assert "ansible.builtin.set_fact" in task, task
        assert task.get("when") == f"'{role}' in (__gpufleet_inputs_checked | default([]))", task
        i += 1
    return tasks[i:]


@pytest.mark.parametrize("role", [r for r in ROLES if r != "gpufleet_common"])
def test_check_inputs_is_the_first_task_file(role: str) -> None:
    """Bad input stops a role before it does anything, however the role is entered."""
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
    first = _after_run_once_lookups(role, tasks)[0]
    if "gpufleet.core.converge_state" in first:
        # a gated role: its gate checks the variables before it looks at the node (the same
        # check as tasks/check_inputs.yml), unless check_inventory.yml did in this run
        assert first["gpufleet.core.converge_state"].get("check_inputs") is True, (role, first)
        entry = yaml.safe_load((REPO / "roles" / role / "tasks" / "check_inputs.yml").read_text())
        assert [t.get("gpufleet.core.check_inputs") for t in entry] == [{"roles": [role]}], entry
    elif "ansible.builtin.include_tasks" in first:
        # skipped only where check_inventory.yml checked this role's variables in this run
        # (provision.yml's first play: playbooks/tasks/check_node.yml notes the roles)
        assert first["ansible.builtin.include_tasks"] == "check_inputs.yml", (role, first)
        assert first.get("when") == "role_name not in (__gpufleet_inputs_checked | default([]))", (
            role,
            first,
        )
    else:
        assert first.get("ansible.builtin.import_tasks") == "check_inputs.yml", (role, first)


GATED = [r for r in ROLES if (REPO / "roles" / r / "tasks" / "full.yml").is_file()]


def test_the_provision_roles_are_gated_by_the_converged_fast_path() -> None:
    """Every provisioning role but the two that must run each time: python_bootstrap (a
    Python to run modules with) and preflight (the planner, which refuses an impossible
    node whatever its stamps say)."""
    always = {"python_bootstrap", "preflight"}
    assert sorted(GATED) == sorted(set(PROVISION_ROLES) - always)


@pytest.mark.parametrize("role", GATED)
def test_gated_role_checks_runs_in_full_and_records_last(role: str) -> None:
    """main.yml: input checks, the gate (watching the role's own list), exports published only
    when converged, full.yml only when not; full.yml records the stamp as its last task,
    after the handlers, with the gate's digest (docs/performance.md)."""
    main = _after_run_once_lookups(
        role, yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
    )
    gate = main[0]
    args = gate["gpufleet.core.converge_state"]
    assert args["role"] == role and args["state"] == "check", gate
    assert args["check_inputs"] is True, "the gate checks the role's variables first"
    assert args["watch"] == f"{{{{ __{role}_converge_watch }}}}"
    assert args["enabled"] == "{{ gpufleet_converge_fast | bool }}"
    # answered from provision.yml's survey where it can, else a check on the node
    assert args["survey"] == "{{ __gpufleet_converge_survey | default({}) }}"
    assert gate["register"] == f"__{role}_gate"
    rest = main[1:]
    assert rest[-1]["ansible.builtin.include_tasks"] == "full.yml"
    assert rest[-1]["when"] == f"not __{role}_gate.converged"
    # converged: the role ends in the controller (a meta task runs no worker per node)
    assert rest[-2] == {
        "name": "End the role where the node is converged",
        "ansible.builtin.meta": "end_role",
        "when": f"__{role}_gate.converged",
    }
    for task in rest[:-2]:
        assert task["when"] == f"__{role}_gate.converged", task
        assert set(task["ansible.builtin.set_fact"]) == set(args.get("exports", [])), task
    full = yaml.safe_load((REPO / "roles" / role / "tasks" / "full.yml").read_text())
    assert full[-2] == {
        "name": "Run the handlers before the stamp records the node",
        "ansible.builtin.meta": "flush_handlers",
    }
    record = full[-1]["gpufleet.core.converge_state"]
    assert record["state"] == "record" and record["role"] == role
    assert record["digest"] == f"{{{{ __{role}_gate.digest }}}}"
    assert record["watch"] == args["watch"]
    assert set(record.get("exports", {})) == set(args.get("exports", []))
    watch = yaml.safe_load((REPO / "roles" / role / "vars" / "main.yml").read_text())[
        f"__{role}_converge_watch"
    ]
    assert watch.get("rpmdb") is True, "every gated role installs packages or depends on them"
    assert not any("main.yml" in t.get("ansible.builtin.include_tasks", "") for t in full)


def test_os_variables_load_one_way() -> None:
    """Roles with OS-specific variable files load them with first_found, most specific file
    first (<os_family>-<major>.yml, <os_family>.yml, default.yml), and name them that way."""
    pattern = re.compile(r"^(RedHat-(8|9|10)|RedHat|default|main)\.yml$")
    for role in ROLES:
        varsdir = REPO / "roles" / role / "vars"
        os_files = [p.name for p in varsdir.glob("*.yml") if p.name != "main.yml"]
        if not os_files:
            continue
        assert all(pattern.match(n) for n in os_files), (role, os_files)
        text = "\n".join(p.read_text() for p in (REPO / "roles" / role / "tasks").glob("*.yml"))
        assert "Load OS-specific variables (most specific file first)" in text, role
        assert "ansible.builtin.first_found" in text, role
        assert (
            "{{ ansible_facts['os_family'] }}-{{ ansible_facts['distribution_major_version'] }}.yml"
            in text
        ), role


def _pins(lines: list[str]) -> dict[str, str]:
    """{normalised name: version} of the ``name==version`` lines."""
    out: dict[str, str] = {}
    for line in lines:
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            out[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return out


def test_node_env_pins_follow_the_constraints() -> None:
    """The testbed's offline wheelhouse is downloaded with requirements/constraints.txt, and a
    node env installs torch_env_packages from it: a package pinned to another version there
    cannot be installed on an offline node. One version per package, so they must agree."""
    defaults = yaml.safe_load((REPO / "roles" / "torch_env" / "defaults" / "main.yml").read_text())
    node = _pins(defaults["torch_env_packages"])
    constraints = _pins((REPO / "requirements" / "constraints.txt").read_text().splitlines())
    assert node, "torch_env_packages pins nothing"
    differ = {n: (v, constraints.get(n)) for n, v in node.items() if constraints.get(n) != v}
    assert not differ, f"torch_env_packages vs requirements/constraints.txt: {differ}"


def _free_form_scripts() -> list[tuple[str, str]]:
    """(where, text) of every free-form shell/command task under roles/*/tasks."""
    found: list[tuple[str, str]] = []

    def walk(tasks: object, where: str) -> None:
        for task in tasks if isinstance(tasks, list) else []:
            if not isinstance(task, dict):
                continue
            for key in ("ansible.builtin.shell", "ansible.builtin.command"):
                if isinstance(task.get(key), str):
                    found.append((f"{where}: {task.get('name', '?')}", task[key]))
            for nested in ("block", "rescue", "always"):
                walk(task.get(nested), where)

    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        walk(yaml.safe_load(path.read_text()), str(path.relative_to(REPO)))
    return found


def test_every_free_form_script_survives_ansibles_argument_splitter() -> None:
    """ansible splits a free-form shell/command text like module arguments: an odd quote,
    even in a shell comment ("dash's"), is "unbalanced quotes" and stops the play when the
    task file loads (make faults caught one). Split each as ansible does."""
    from ansible.parsing.splitter import split_args

    scripts = _free_form_scripts()
    assert scripts, "no free-form shell/command tasks found"
    broken = []
    for where, text in scripts:
        try:
            split_args(text)
        except Exception as exc:  # any refusal is the finding
            broken.append(f"{where}: {exc}")
    assert not broken, "\n".join(broken)
