"""The GPU-node paths of provisioning on the simulated cluster (issue 31): driver load,
reboots, rolling batches.

Three nodes; node2 (Rocky 9) and node3 (CentOS Stream 10) pose as PCIe GPU nodes through
TESTBED_GPU (docs/testbed.md, "GPU pose"): two H100 PCIe in their PCI list, nouveau bound at
first boot, and a /sys/module that each boot fills as the kernel would (nouveau until a
modprobe.d file blacklists it, then nvidia where the stand-in DKMS built it for the running
kernel), with `nvidia-smi` and `modinfo` answering from that state. A reboot is a reboot:
the node's systemd restarts (boots.log on the host), its boot id changes, SSH goes away and
comes back; `ansible.builtin.reboot` runs unchanged against it. node1 (AlmaLinux 8) has no GPU.

Proves, with the real playbooks/provision.yml (CUDA variant cu126, whose wheels run on
both driver branches the stand-in mirror carries):
- from bare, each GPU node is rebooted once into the driver, node1 never, the nvidia-smi
  verification runs and passes after the reboot, nvidia-persistenced runs;
- a rerun reports changed=0 and reboots nothing;
- a driver branch change (580 -> 575: the module on disk no longer matches the loaded one)
  with SERIAL=1 MAX_FAIL=0 where node2's GPUs are lost after its reboot: batch [node1] passes
  without a reboot, batch [node2] reboots into 575 and fails past 0 %, the rollout stops,
  node3 is left untouched (not rebooted, still 580) and the run names it. (Batches of one
  through node_reboot are also proven under Slurm by the rolling-reboot test in
  test_demo.py: node1 done, node2 waiting for its job, node3 untouched.)
The controller listed by its cluster address is never rebooted: the machine-id decision is
tested on this machine (tests/roles/test_nvidia_driver_reboot.py); no testbed node is the
controller. Proven with stand-ins only: no NVIDIA package, module, GPU or real kernel reboot.
"""

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

pytestmark = tb.cluster_marks(timeout=2400)

GPU_NODES = {2, 3}
LOGS = REPO / "reports" / "testbed-gpu"
# cu126 wheels (CUDA 12.6, a toolkit the stand-in mirror has) run on both of its driver
# branches (575 and 580)
CUDA = ("-e", "gpufleet_cuda_variant=cu126")


def playbook(*extra: str, log: str) -> tb.Run:
    run = tb.playbook("provision.yml", *extra, timeout=1500, log=LOGS / f"{log}.log")
    print(f"\n[gpu] {log}: rc={run.rc} in {run.seconds:.0f} s")
    return run


sh = tb.node_out


def boot_ids(cluster: list[config.Node]) -> dict[str, str]:
    return {n.name: sh(n, "cat /proc/sys/kernel/random/boot_id") for n in cluster}


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[config.Node]]:
    """A fresh 3-node testbed, node2 and node3 posing as GPU nodes."""
    tb.tbctl("down")
    spec = ",".join(f"node{i}" for i in sorted(GPU_NODES))
    up = tb.tbctl("up", "--nodes", "3", "--gpu", spec)
    assert up.returncode == 0, up.stdout + up.stderr
    yield config.make_nodes(3, config.DEFAULT_MIX, gpu=GPU_NODES)
    tb.tbctl("down")


@pytest.fixture(scope="module")
def bare(cluster: list[config.Node]) -> dict[str, str]:
    """What the nodes show before any provisioning (read first): their boot ids."""
    for n in cluster:
        gpus = tb.ssh(n, "lspci -nn -d 10de:").stdout  # the PATH Ansible's shell gets
        assert (gpus == render.gpu_lspci()) == n.gpu, n.name
        if n.gpu:
            assert sh(n, "test -d /sys/module/nouveau && echo y") == "y"
            smi = tb.node_sh(n, "nvidia-smi")
            assert (
                smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout
            )
    return boot_ids(cluster)


@pytest.fixture(scope="module")
def first(cluster: list[config.Node], bare: dict[str, str]) -> tb.Run:
    run = playbook(*CUDA, log="first")
    assert run.rc == 0, run.tail()
    return run


def single(rows: list[tuple[float, float]], node: config.Node) -> tuple[float, float]:
    assert len(rows) == 1, f"{node.name}: reboots {rows}"
    return rows[0]


def section(out: str, task: str) -> str:
    """Every result block of the task named ``task`` (all batches)."""
    parts = out.split("TASK [")
    return "".join(p for p in parts if p.split("]", 1)[0].endswith(task))


def test_from_bare_each_gpu_node_reboots_into_the_driver_once(
    cluster: list[config.Node], bare: dict[str, str], first: tb.Run
) -> None:
    node1, node2, node3 = cluster
    recap = first.recap()
    assert sorted(recap) == ["node1", "node2", "node3"]
    assert all(r[3] == 0 for r in recap.values()), recap
    assert tb.reboots(node1) == []
    for n in (node2, node3):
        single(tb.reboots(n), n)
    after = boot_ids(cluster)
    assert after["node1"] == bare["node1"]
    assert after["node2"] != bare["node2"] and after["node3"] != bare["node3"]
    want = render.DRIVER_BRANCHES["580"]
    for n in (node2, node3):
        assert sh(n, "cat /sys/module/nvidia/version") == want
        assert tb.node_sh(n, "test -d /sys/module/nouveau").returncode != 0
        smi = sh(n, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        assert smi.splitlines() == [want] * len(render.GPU_PCI)
        assert sh(n, "systemctl is-active nvidia-persistenced") == "active"
    # the reboot goes through role node_reboot: no Slurm on this testbed, so plainly
    rebooted = section(first.out, "node_reboot : Reboot the node")
    asked = section(first.out, "Ask nvidia-smi")
    flat = " ".join(first.out.split())
    for name in ("node2", "node3"):
        assert f"changed: [{name}]" in rebooted and f"ok: [{name}]" in asked, name
        assert f"{name}: not a Slurm node (no Slurm configuration on the node)" in flat, name
    assert "[node1]" not in rebooted + asked  # no GPU: reboot.yml stops before both


def test_rerun_changes_nothing_and_reboots_nothing(
    cluster: list[config.Node], first: tb.Run
) -> None:
    before = boot_ids(cluster)
    again = playbook(*CUDA, log="rerun")
    assert again.rc == 0, again.tail()
    assert {h: r[1] for h, r in again.recap().items()} == {n.name: 0 for n in cluster}
    assert boot_ids(cluster) == before


def test_serial_1_moves_one_node_at_a_time_and_a_failed_batch_stops_the_rest(
    cluster: list[config.Node], first: tb.Run
) -> None:
    """A driver branch change (580 -> 575) in batches of one with MAX_FAIL=0, where node2's
    GPUs are lost after its reboot: batch [node1] passes (no GPU, no reboot), batch [node2]
    reboots into 575 and fails the nvidia-smi verification, and the rollout stops there:
    node3, the next batch, is never touched (no task of the batched play, no reboot, still
    580) and the run names it. One run proves both the batches and the stop (CI's hour)."""
    node1, node2, node3 = cluster
    before = boot_ids(cluster)
    reboots = {n.name: tb.reboots(n) for n in cluster}
    sh(node2, f"touch {render.GPU_LOST_FILE}")
    try:
        stopped = playbook(
            *CUDA, "-e", "nvidia_driver_branch=575", "-e", "gpufleet_provision_serial=1",
            "-e", "gpufleet_provision_max_fail_percentage=0", log="branch-575-serial-1-node2-lost",
        )  # fmt: skip
    finally:
        sh(node2, f"rm -f {render.GPU_LOST_FILE}")
    assert stopped.rc != 0
    recap = stopped.recap()
    assert recap["node2"][3] == 1 and recap["node1"][3] == 0, recap
    # node1: its batch ran first and passed, without a reboot
    assert tb.reboots(node1) == reboots["node1"] and boot_ids(cluster)["node1"] == before["node1"]
    # node2 was rebooted once, into the new branch, and failed the nvidia-smi verification
    assert len(tb.reboots(node2)) == len(reboots["node2"]) + 1
    assert sh(node2, "cat /sys/module/nvidia/version") == render.DRIVER_BRANCHES["575"]
    assert "Unable to determine the device handle" in section(stopped.out, "Ask nvidia-smi")
    # node3: no task of the batched play, not rebooted, still on 580, and named
    flat = " ".join(stopped.out.split())
    assert "ROLLOUT STOPPED in play 'Provision the GPU nodes'" in flat
    assert (
        "past max_fail_percentage 0 % (failed: node2). Left untouched by this run: node3 ->" in flat
    )
    assert boot_ids(cluster)["node3"] == before["node3"] and tb.reboots(node3) == reboots["node3"]
    assert sh(node3, "cat /sys/module/nvidia/version") == render.DRIVER_BRANCHES["580"]
