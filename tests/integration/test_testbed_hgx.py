"""The HGX install paths end to end on the simulated cluster (issue 16): three nodes, node1
(AlmaLinux 8, dnf module streams) posing as an HGX B200 and node3 (CentOS Stream 10, packages
+ versionlock) as an HGX H100 through TESTBED_HGX (NVSwitches in their PCI list, recorded HCA
ports), node2 (Rocky 9) a plain node. tests/playbooks/hgx_provision.yml runs preflight,
nvidia_driver, infiniband, dcgm (gpufleet_dcgm: true) and cluster_network with real dnf,
rpm and systemd against the testbed's signed stand-in packages.

Proves: Fabric Manager at exactly the driver's version and enabled, NVLSM and ib_umad on the
B200 pose only, none of it on the plain node; rdma-core and the persisted nvidia-peermem
where HCAs are; NCCL_IB_HCA from the active InfiniBand ports (the Polling port and the RoCE
port left out); DCGM installed with its unit enabled; a rerun changes nothing; a branch
change (580 -> 575) moves Fabric Manager with the driver and, on EL10, under the same
versionlock. Proven with stand-ins only: no NVIDIA repository, GPU, NVSwitch or HCA here;
nothing is started (no GPU: enabled only)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "testbed"))

from tbctl import config, render  # noqa: E402

import testbed_lib as tb  # noqa: E402

pytestmark = tb.cluster_marks(timeout=1800)

POSES = {1: "b200", 3: "h100"}
PLAYBOOK = "tests/playbooks/hgx_provision.yml"
LOGS = REPO / "reports" / "testbed-hgx"


def playbook(*extra: str, log: str) -> tb.Run:
    argv = [str(tb.VENV_BIN / "ansible-playbook"), PLAYBOOK, "-i", str(tb.INVENTORY),
            "-e", "gpufleet_dcgm=true", *extra]  # fmt: skip
    run = tb.run(argv, timeout=900, log=LOGS / f"{log}.log")
    print(f"\n[hgx] {log}: rc={run.rc} in {run.seconds:.0f} s")
    return run


sh = tb.node_out


def rpm_version(node: config.Node, name: str) -> str:
    r = tb.node_sh(node, f"rpm -q --qf '%{{VERSION}}' {name}")
    return r.stdout.strip() if r.returncode == 0 else ""


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[config.Node]]:
    """A fresh 3-node testbed with the poses (a running testbed keeps its nodes' files)."""
    tb.tbctl("down")
    spec = ",".join(f"node{i}={b}" for i, b in POSES.items())
    up = tb.tbctl("up", "--nodes", "3", "--hgx", spec)
    assert up.returncode == 0, up.stdout + up.stderr
    yield config.make_nodes(3, config.DEFAULT_MIX, POSES)
    tb.tbctl("down")


@pytest.fixture(scope="module")
def first(cluster: list[config.Node]) -> tb.Run:
    run = playbook(log="first")
    assert run.rc == 0, run.tail()
    return run


def test_the_pose_is_what_preflight_reads(cluster: list[config.Node]) -> None:
    b200, plain, _ = cluster
    over_ssh = tb.ssh(b200, "lspci -nn -d 10de:")  # the PATH Ansible's shell gets
    assert over_ssh.returncode == 0 and over_ssh.stdout == render.hgx_lspci("b200")
    assert "0680" not in tb.ssh(plain, "lspci -nn -d 10de:").stdout


def test_fabric_manager_at_the_driver_version_and_enabled(
    cluster: list[config.Node], first: tb.Run
) -> None:
    b200, plain, h100 = cluster
    for node in (b200, h100):
        driver = rpm_version(node, "nvidia-kmod-common")
        assert driver == render.DRIVER_BRANCHES["580"], node.name
        assert rpm_version(node, "nvidia-fabricmanager") == driver, node.name
        assert sh(node, "systemctl is-enabled nvidia-fabricmanager") == "enabled"
        assert sh(node, "nv-fabricmanager --version") == f"Fabric Manager version is : {driver}"
    assert rpm_version(plain, "nvidia-kmod-common") == render.DRIVER_BRANCHES["580"]
    assert rpm_version(plain, "nvidia-fabricmanager") == ""
    # NVLink 5 (the B200 pose) only
    assert rpm_version(b200, "nvlsm") == render.NVLSM_VERSION
    assert sh(b200, "cat /etc/modules-load.d/gpufleet-ib_umad.conf").endswith("ib_umad")
    for node in (plain, h100):
        assert rpm_version(node, "nvlsm") == ""
        assert tb.node_sh(node, "test -e /etc/modules-load.d/gpufleet-ib_umad.conf").returncode
    # EL10: the branch hold covers Fabric Manager
    locks = sh(h100, "cat /etc/dnf/plugins/versionlock.list")
    assert "nvidia-fabricmanager-580.*" in locks and "nvidia-open-580.*" in locks


def test_rdma_peermem_and_nccl_ib_hca(cluster: list[config.Node], first: tb.Run) -> None:
    b200, plain, h100 = cluster
    for node in (b200, h100):
        for n in ("rdma-core", "libibverbs-utils", "infiniband-diags"):
            assert rpm_version(node, n), f"{node.name}: {n}"
        conf = sh(node, "cat /etc/modules-load.d/nvidia-peermem.conf")
        assert conf.splitlines()[-1] == "nvidia-peermem"
        env = sh(node, "cat /etc/gpufleet/nccl.env")
        assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n" in env + "\n", env
    assert rpm_version(plain, "rdma-core") == ""
    assert "NCCL_IB_HCA" not in sh(plain, "cat /etc/gpufleet/nccl.env")
    assert tb.node_sh(plain, "test -e /etc/modules-load.d/nvidia-peermem.conf").returncode


def test_dcgm_installed_and_enabled(cluster: list[config.Node], first: tb.Run) -> None:
    for node in cluster:
        assert rpm_version(node, "datacenter-gpu-manager-4-cuda13"), node.name
        assert sh(node, "systemctl is-enabled nvidia-dcgm") == "enabled"


def test_rerun_changes_nothing_then_a_branch_change_moves_fabric_manager(
    cluster: list[config.Node], first: tb.Run
) -> None:
    again = playbook(log="rerun")
    assert again.rc == 0, again.tail()
    recap = again.recap()
    assert set(recap) == {n.name for n in cluster}
    assert {h: r[1] for h, r in recap.items()} == dict.fromkeys(recap, 0), again.tail()

    b200, _, h100 = cluster
    # cu129 wheels (CUDA 12.9, sm_90 and sm_100) need a driver >= 525.60.13, so branch 575
    # may be pinned (cu126 carries no sm_100 code: the planner refuses it for the B200 pose)
    switch = playbook("-e", "nvidia_driver_branch=575", "-e", "gpufleet_cuda_variant=cu129",
                      "--limit", f"{b200.name},{h100.name}", log="branch-575")  # fmt: skip
    assert switch.rc == 0, switch.tail()
    for node in (b200, h100):
        driver = rpm_version(node, "nvidia-kmod-common")
        assert driver == render.DRIVER_BRANCHES["575"], node.name
        assert rpm_version(node, "nvidia-fabricmanager") == driver, node.name
    locks = sh(h100, "cat /etc/dnf/plugins/versionlock.list")
    assert "nvidia-fabricmanager-575.*" in locks and "nvidia-fabricmanager-580.*" not in locks
    # DCGM follows the plan's CUDA major (cu129: 12), replacing the cuda13 build
    for node in (b200, h100):
        assert rpm_version(node, "datacenter-gpu-manager-4-cuda12"), node.name
        assert rpm_version(node, "datacenter-gpu-manager-4-cuda13") == "", node.name
