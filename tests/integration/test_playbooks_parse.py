"""playbooks/provision.yml, site.yml and the inventories parse; the example inventory is
not part of the shipped local inventory."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from playbook_runner import PROVISION_ROLES, run_playbook
from roles_env_helpers import BIN, REPO, ansible_env, output

pytestmark = pytest.mark.ansible


@pytest.mark.parametrize(
    "playbook", ["site.yml", "playbooks/provision.yml", "playbooks/verify.yml", "playbooks/run.yml"]
)
def test_syntax_check(playbook: str) -> None:
    result = run_playbook(
        REPO / playbook,
        "--syntax-check",
        inventory=REPO / "inventory",
        env=ansible_env(),
        timeout=120,
    )
    assert result.returncode == 0, output(result)


def play_roles(play: dict[str, object]) -> list[tuple[str, bool]]:
    """(role, validates its argument spec at entry) in the order the play runs them."""
    out: list[tuple[str, bool]] = []
    for r in play.get("roles") or []:  # type: ignore[attr-defined]
        out.append((r["role"] if isinstance(r, dict) else r, True))
    for section in ("pre_tasks", "tasks", "post_tasks"):
        for t in play.get(section) or []:  # type: ignore[attr-defined]
            imp = t.get("ansible.builtin.import_role") or t.get("ansible.builtin.include_role")
            if imp:
                out.append((imp["name"], imp.get("rolespec_validate", True) is not False))
    return out


def test_provision_order() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())
    roles = [r for p in plays for r, _ in play_roles(p)]
    assert tuple(roles) == PROVISION_ROLES
    check, first, *_ = plays
    assert check["ansible.builtin.import_playbook"] == "check_inventory.yml", "input checks first"
    assert first["gather_facts"] is False, "python_bootstrap runs before Python exists"
    main = next(p for p in plays if "torch_env" in [r for r, _ in play_roles(p)])
    assert main["any_errors_fatal"] is False
    assert main["serial"] == "{{ gpufleet_provision_serial | default('100%') }}"


@pytest.mark.parametrize("name", ["provision.yml", "verify.yml", "run.yml"])
def test_a_role_skips_its_entry_check_only_where_the_check_play_checked_it(name: str) -> None:
    """rolespec_validate: false is safe only for a role whose variables check_inventory.yml
    (imported first, with this playbook's role list) has already checked on every node."""
    plays = yaml.safe_load((REPO / "playbooks" / name).read_text())
    check = plays[0]
    assert check["ansible.builtin.import_playbook"] == "check_inventory.yml", name
    checked = set(check["vars"]["gpufleet_check_roles"])
    unvalidated = {r for p in plays[1:] for r, validates in play_roles(p) if not validates}
    assert unvalidated <= checked, f"{name}: {sorted(unvalidated - checked)} checked nowhere"
    # and the check play's checks run whatever --tags or --skip-tags a user passes
    check_play = yaml.safe_load((REPO / "playbooks" / "check_inventory.yml").read_text())[0]
    for task in check_play["tasks"]:
        assert "always" in task.get("tags", []), task["name"]
        include = task.get("ansible.builtin.include_tasks")
        if isinstance(include, dict):
            assert "always" in include["apply"]["tags"], task["name"]


def test_site_checks_every_role_then_imports_provision_then_verify() -> None:
    site = yaml.safe_load((REPO / "site.yml").read_text())
    assert [p["ansible.builtin.import_playbook"] for p in site] == [
        "playbooks/check_inventory.yml",
        "playbooks/provision.yml",
        "playbooks/verify.yml",
    ]
    # verify's variables are checked before provision touches a node
    assert "verify" in site[0]["vars"]["gpufleet_check_roles"]


def inventory_hosts(source: str) -> dict[str, dict[str, object]]:
    result = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", source, "--list"],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(result.stdout)
    hosts: dict[str, dict[str, object]] = data["_meta"]["hostvars"]
    return hosts


def test_local_inventory_does_not_pick_up_the_example() -> None:
    hosts = inventory_hosts("inventory")
    assert "gpu01" not in hosts
    assert "localhost" in hosts


def test_example_inventory() -> None:
    hosts = inventory_hosts("inventory/examples/cluster.yml")
    assert sorted(hosts) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert hosts["gpu02"]["gpufleet_cluster_address"] == "10.20.0.12"
    assert hosts["gpu01"]["gpufleet_cluster_cidr"] == "10.20.0.0/24"


def test_every_shared_variable_the_roles_read_lives_in_gpufleet_common() -> None:
    """A gpufleet_* name a role reads is a host fact set during provisioning or a shared
    variable with its default in gpufleet_common (each documented in its README:
    tests/contract/test_role_docs.py)."""
    common = yaml.safe_load((REPO / "roles/gpufleet_common/defaults/main.yml").read_text())
    facts = {  # set by the roles (docs/architecture.md, "Host facts")
        "gpufleet_plan", "gpufleet_target", "gpufleet_gpus", "gpufleet_has_gpu",
        "gpufleet_os_release", "gpufleet_installed_driver", "gpufleet_secure_boot",
        "gpufleet_cluster_interface", "gpufleet_fabric",
    }  # fmt: skip
    used: set[str] = set()
    for path in (REPO / "roles").rglob("*.yml"):
        if "gpufleet_common" not in path.parts:
            used |= set(re.findall(r"\bgpufleet_[a-z0-9]+(?:_[a-z0-9]+)*\b", path.read_text()))
    used -= {"gpufleet_common"}
    homeless = sorted(v for v in used - facts if v not in common)
    assert not homeless, f"read by a role, not defaulted in gpufleet_common: {homeless}"
