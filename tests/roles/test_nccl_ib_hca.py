"""cluster_network's NCCL_IB_HCA: the inventory's pinned list wins over the node's ports, and
discovery can be turned off. The discovery itself (a sysfs-like tree: two active IB ports,
one in Polling, one active RoCE front-end port -> the two active IB ports) and the rerun
are in tests/test_roles_env_render.py::test_cluster_network_end_to_end_and_idempotent,
with the same tree (roles_env_helpers.ib_tree)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roles_env_helpers import ib_tree, output, run_roles, write_inventory

pytestmark = pytest.mark.ansible


def env_file(path: Path) -> dict[str, str]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def base(tmp_path: Path, **over: object) -> dict[str, object]:
    return {
        "gpufleet_cluster_cidr": "10.99.0.0/24",
        "cluster_network_interface": "eth0",
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewall": "none",
        "cluster_network_ib_sysfs_root": str(ib_tree(tmp_path / "sys-ib")),
        **over,
    }


@pytest.mark.slow
def test_the_inventory_pin_wins_and_discovery_can_be_off(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path / "inv.json", gpufleet_cluster_address="10.99.0.1")
    pinned = base(tmp_path, cluster_network_ib_enable=True, cluster_network_ib_hca=["mlx5_3:1"],
                  cluster_network_ib_gid_index=3)  # fmt: skip
    res = run_roles(tmp_path, ["cluster_network"], pinned, inv)
    assert res.returncode == 0, output(res)
    env = env_file(tmp_path / "etc" / "nccl.env")
    assert env["NCCL_IB_HCA"] == "=mlx5_3:1" and env["NCCL_IB_GID_INDEX"] == "3"
    off = base(tmp_path, cluster_network_ib_hca_from_ports=False)
    res = run_roles(tmp_path, ["cluster_network"], off, inv)
    assert res.returncode == 0, output(res)
    assert "NCCL_IB_HCA" not in env_file(tmp_path / "etc" / "nccl.env")
