"""playbooks/provision.yml, site.yml and the inventories parse; the example inventory is
not part of the shipped local inventory."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from roles_env_helpers import BIN, REPO, ansible_env, output

pytestmark = pytest.mark.ansible

OTHER_ROLES = ("python_bootstrap", "preflight", "nvidia_driver", "cuda_toolkit")
STUBS = REPO / "tests" / "fixtures" / "stub_roles"


def syntax_env() -> dict[str, str]:
    """Roles of other branches stand in as stubs until they are merged (real ones win)."""
    env = ansible_env()
    env["ANSIBLE_ROLES_PATH"] = f"{REPO / 'roles'}:{STUBS}"
    return env


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/provision.yml"])
def test_syntax_check(playbook: str) -> None:
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "inventory", playbook],
        cwd=REPO,
        env=syntax_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, output(result)


def test_provision_order() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())
    roles = [r["role"] if isinstance(r, dict) else r for p in plays for r in p.get("roles", [])]
    assert roles == [
        "python_bootstrap",
        "preflight",
        "nvidia_driver",
        "cuda_toolkit",
        "torch_env",
        "cluster_network",
    ]
    check, first, *_ = plays
    assert check["ansible.builtin.import_playbook"] == "check_inventory.yml", "input checks first"
    assert first["gather_facts"] is False, "python_bootstrap runs before Python exists"
    main = next(p for p in plays if "torch_env" in str(p.get("roles")))
    assert main["any_errors_fatal"] is False
    assert main["serial"] == "{{ gpufleet_provision_serial | default('100%') }}"


def test_site_imports_provision_then_verify() -> None:
    site = yaml.safe_load((REPO / "site.yml").read_text())
    assert [p["ansible.builtin.import_playbook"] for p in site] == [
        "playbooks/provision.yml",
        "playbooks/verify.yml",
    ]


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


def test_group_vars_cover_the_global_variables_the_roles_read() -> None:
    """Every gpufleet_* variable torch_env/cluster_network read is documented for users."""
    group_vars = (REPO / "inventory" / "group_vars" / "all" / "provision.yml").read_text()

    used: set[str] = set()
    for role in ("torch_env", "cluster_network"):
        for path in (REPO / "roles" / role).rglob("*.yml"):
            used |= set(re.findall(r"\bgpufleet_[a-z0-9_]+", path.read_text()))
    internal = {
        "gpufleet_plan",
        "gpufleet_config_dir",
        "gpufleet_gpus_expected",
        "gpufleet_cluster_interface",
    }
    undocumented = sorted(v for v in used - internal if v not in group_vars)
    assert not undocumented, f"not in inventory/group_vars/all/provision.yml: {undocumented}"
