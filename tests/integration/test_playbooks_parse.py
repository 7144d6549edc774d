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


def test_provision_order() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())
    roles = [r["role"] if isinstance(r, dict) else r for p in plays for r in p.get("roles", [])]
    assert tuple(roles) == PROVISION_ROLES
    check, first, *_ = plays
    assert check["ansible.builtin.import_playbook"] == "check_inventory.yml", "input checks first"
    assert first["gather_facts"] is False, "python_bootstrap runs before Python exists"
    main = next(p for p in plays if "torch_env" in str(p.get("roles")))
    assert main["any_errors_fatal"] is False
    assert main["serial"] == "{{ gpufleet_provision_serial | default('100%') }}"


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
    variable with its default in gpufleet_common, which the user-facing group_vars show."""
    common = yaml.safe_load((REPO / "roles/gpufleet_common/defaults/main.yml").read_text())
    group_vars = (REPO / "inventory" / "group_vars" / "all" / "provision.yml").read_text()
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
    internal = {"gpufleet_config_dir", "gpufleet_gpus_expected", "gpufleet_cluster_address",
                "gpufleet_master"}  # fmt: skip
    undocumented = sorted(v for v in common if v not in internal and v not in group_vars)
    assert not undocumented, f"not in inventory/group_vars/all/provision.yml: {undocumented}"
