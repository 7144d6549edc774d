"""gpufleet.node.platform_checks on fake sysfs/proc trees under tmp_path and fake command
output: ACS on the bridges above GPUs/HCAs and the IOMMU mode (nvidia-peermem loaded and
registered is gpudirect_rdma's: tests/unit/node/test_ib_ports.py). The lspci texts in
tests/fixtures/platform/ have the shape of real `lspci -vvv -s <bdf>` output (root, ACS on
and off; a bridge without ACS; a non-root run)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpufleet.node import platform_checks as pc
from gpufleet.node.platform_checks import CommandOutput
from gpufleet.results import Record

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "platform"
ACS_ON = (FIXTURES / "lspci_switch_port_acs_on.txt").read_text()
ACS_OFF = (FIXTURES / "lspci_switch_port_acs_off.txt").read_text()
ROOT_ON = (FIXTURES / "lspci_root_port_acs_on.txt").read_text()
ROOT_OFF = (FIXTURES / "lspci_root_port_acs_off.txt").read_text()
NO_ACS = (FIXTURES / "lspci_switch_upstream_no_acs.txt").read_text()
DENIED = (FIXTURES / "lspci_access_denied.txt").read_text()


# An HGX-like slice: root port 15:01.0 -> switch upstream port 16:00.0 -> downstream ports
# 17:00.0 (GPU 18:00.0) and 17:01.0 (HCA 19:00.0); an NVSwitch 05:00.0 under root port 00:02.0.
ROOT_PORT, UPSTREAM, DSP_GPU, DSP_HCA = (
    "0000:15:01.0",
    "0000:16:00.0",
    "0000:17:00.0",
    "0000:17:01.0",
)
GPU, HCA, NVSWITCH = "0000:18:00.0", "0000:19:00.0", "0000:05:00.0"
HGX_BRIDGES = (ROOT_PORT, UPSTREAM, DSP_GPU, DSP_HCA)


class Tree:
    """A fake root: sys/devices/pci*/<bdf>/... with vendor and class, and the
    sys/bus/pci/devices/<bdf> links sysfs has."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def device(self, chain: Sequence[str], vendor: str, klass: str, device: str = "0x0000") -> Path:
        real = self.root / "sys/devices" / Path(*chain)
        real.mkdir(parents=True, exist_ok=True)
        for name, text in (("vendor", vendor), ("device", device), ("class", klass)):
            (real / name).write_text(text + "\n")
        bus = self.root / "sys/bus/pci/devices"
        bus.mkdir(parents=True, exist_ok=True)
        (bus / chain[-1]).symlink_to(os.path.relpath(real, bus))
        return real

    def iommu_group(self, bdf: str, number: int, kind: str | None) -> None:
        group = self.root / "sys/kernel/iommu_groups" / str(number)
        (group / "devices").mkdir(parents=True, exist_ok=True)
        if kind is not None:
            (group / "type").write_text(kind + "\n")
        dev = self.root / "sys/bus/pci/devices" / bdf
        (dev / "iommu_group").symlink_to(os.path.relpath(group, dev.resolve()))

    def hgx(self) -> Tree:
        top = ["pci0000:15", ROOT_PORT]
        self.device(top, "0x8086", "0x060400", "0x352a")
        self.device([*top, UPSTREAM], "0x1000", "0x060400", "0xc030")
        self.device([*top, UPSTREAM, DSP_GPU], "0x1000", "0x060400", "0xc030")
        self.device([*top, UPSTREAM, DSP_HCA], "0x1000", "0x060400", "0xc030")
        self.device([*top, UPSTREAM, DSP_GPU, GPU], "0x10de", "0x030200", "0x2330")
        self.device([*top, UPSTREAM, DSP_HCA, HCA], "0x15b3", "0x020700", "0x1021")
        self.device(["pci0000:00", "0000:00:02.0"], "0x8086", "0x060400")
        self.device(["pci0000:00", "0000:00:02.0", NVSWITCH], "0x10de", "0x068000", "0x22a3")
        return self


class FakeRun:
    """The Runner: `lspci -vvv -s <bdf>` answered from a table; None: lspci not installed.
    Records every argv."""

    def __init__(
        self,
        lspci: dict[str, str] | None = None,
        lspci_rc: int = 0,
    ) -> None:
        self.lspci = lspci
        self.lspci_rc = lspci_rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandOutput | None:
        self.calls.append(list(argv))
        if argv[0] == "lspci":
            if self.lspci is None:
                return None
            if self.lspci_rc:
                return CommandOutput(self.lspci_rc, "", "lspci: -s: Invalid slot number")
            return CommandOutput(0, self.lspci.get(argv[-1], ""))
        raise AssertionError(f"unexpected command {argv}")

    def lspci_slots(self) -> list[str]:
        return [c[-1] for c in self.calls if c[0] == "lspci"]


def hgx_lspci(**over: str) -> dict[str, str]:
    return {ROOT_PORT: ROOT_OFF, UPSTREAM: NO_ACS, DSP_GPU: ACS_OFF, DSP_HCA: ACS_OFF, **over}


def acs(tmp_path: Path, run: FakeRun) -> Record:
    return pc.pcie_acs(pc.read_acs(tmp_path, run))


# --------------------------------------------------------------------------- ACS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            ACS_ON, (True, ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")), id="on"
        ),
        pytest.param(ACS_OFF, (True, ()), id="off"),
        pytest.param(
            ROOT_ON, (True, ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")), id="root-on"
        ),
        pytest.param(NO_ACS, (False, ()), id="no-acs-capability"),
        pytest.param(DENIED, None, id="not-root"),
        pytest.param("", None, id="no-output"),
    ],
)
def test_parse_acs_ctl(text: str, expected: tuple[bool, tuple[str, ...]] | None) -> None:
    assert pc.parse_acs_ctl(text) == expected


def test_topology_walks_the_symlinks_up_to_the_root_port(tmp_path: Path) -> None:
    funcs = {f.address: f for f in pc.read_pci(Tree(tmp_path).hgx().root) or []}
    assert funcs[GPU].bridges == (ROOT_PORT, UPSTREAM, DSP_GPU)
    assert funcs[HCA].bridges == (ROOT_PORT, UPSTREAM, DSP_HCA)
    assert [f.address for f in pc.endpoints(list(funcs.values()))] == [GPU, HCA]
    assert funcs[NVSWITCH].kind is None  # a bridge-class NVIDIA device is no GPU


def test_acs_on_a_switch_port_fails_naming_the_bridge_and_the_device(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()
    run = FakeRun(hgx_lspci(**{DSP_GPU: ACS_ON}))
    r = acs(tmp_path, run)
    assert r.status == "fail"
    assert f"bridge {DSP_GPU} (ACSCtl SrcValid+ ReqRedir+ CmpltRedir+) above GPU {GPU}" in r.message
    assert DSP_HCA not in r.message.split("Fix:")[0]
    assert "setpci -s <bridge> ECAP_ACS+0x6.w=0000" in r.remedy
    # the bridges above the GPU and the HCA, each once; not the NVSwitch's root port
    assert sorted(run.lspci_slots()) == sorted(HGX_BRIDGES)
    assert r.value[DSP_GPU]["enabled"] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]


def test_acs_off_everywhere_passes(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()
    r = acs(tmp_path, FakeRun(hgx_lspci()))
    assert r.status == "pass", r.message
    assert "4 bridge(s) above 2 GPU(s)/HCA(s)" in r.message
    assert r.value[UPSTREAM]["acs"] is False  # an upstream port without the capability
    assert r.remedy == ""


def test_acs_on_the_root_port_only_warns(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()
    r = acs(tmp_path, FakeRun(hgx_lspci(**{ROOT_PORT: ROOT_ON})))
    assert r.status == "warn"
    assert f"root port(s): bridge {ROOT_PORT}" in r.message
    assert f"above GPU {GPU}, HCA {HCA}" in r.message
    assert r.remedy == pc.ACS_REMEDY


def test_acs_without_lspci_is_incomplete(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()
    r = acs(tmp_path, FakeRun(lspci=None))
    assert r.status == "incomplete"
    assert "lspci is not installed" in r.message
    assert "dnf install pciutils" in r.remedy


def test_acs_as_non_root_is_incomplete(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()
    r = acs(tmp_path, FakeRun(dict.fromkeys(HGX_BRIDGES, DENIED)))
    assert r.status == "incomplete"
    assert "4 of 4 bridge(s) unreadable" in r.message
    assert "lspci needs root" in r.message


def test_acs_found_on_a_switch_port_is_a_failure_even_with_unreadable_bridges(
    tmp_path: Path,
) -> None:
    Tree(tmp_path).hgx()
    r = acs(tmp_path, FakeRun(hgx_lspci(**{DSP_HCA: ACS_ON, ROOT_PORT: DENIED})))
    assert r.status == "fail"
    assert f"bridge {DSP_HCA} (ACSCtl SrcValid+ ReqRedir+ CmpltRedir+) above HCA {HCA}" in r.message
    assert f"Also unreadable: {ROOT_PORT}" in r.message


def test_acs_lspci_error_is_incomplete(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()
    r = acs(tmp_path, FakeRun(hgx_lspci(), lspci_rc=1))
    assert r.status == "incomplete"
    assert "lspci exit 1: lspci: -s: Invalid slot number" in r.message


def test_acs_skips_without_gpu_or_hca(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.device(["pci0000:00", "0000:00:01.0"], "0x8086", "0x060400")
    tree.device(["pci0000:00", "0000:00:01.0", "0000:01:00.0"], "0x8086", "0x010802")  # NVMe
    run = FakeRun(hgx_lspci())
    r = acs(tmp_path, run)
    assert r.status == "skip"
    assert "no NVIDIA GPU and no Mellanox/NVIDIA HCA" in r.message
    assert run.calls == []


def test_acs_skips_devices_on_the_root_bus(tmp_path: Path) -> None:
    Tree(tmp_path).device(["pci0000:00", "0000:00:05.0"], "0x10de", "0x030200")  # a VM's GPU
    run = FakeRun(hgx_lspci())
    r = acs(tmp_path, run)
    assert r.status == "skip"
    assert "no PCIe bridge above GPU 0000:00:05.0" in r.message
    assert run.calls == []


def test_acs_ignores_hca_virtual_functions(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.device(["pci0000:3a", "0000:3a:01.0"], "0x8086", "0x060400")
    vf = tree.device(["pci0000:3a", "0000:3a:01.0", "0000:3b:00.2"], "0x15b3", "0x020000")
    (vf / "physfn").mkdir()
    run = FakeRun({"0000:3a:01.0": ROOT_ON})
    assert acs(tmp_path, run).status == "skip"
    assert run.calls == []


def test_acs_without_pci_sysfs_is_incomplete(tmp_path: Path) -> None:
    r = acs(tmp_path, FakeRun(hgx_lspci()))
    assert r.status == "incomplete"
    assert "/sys/bus/pci/devices is absent" in r.message


# --------------------------------------------------------------------------- IOMMU

CMDLINE = "BOOT_IMAGE=(hd0,gpt2)/vmlinuz-5.14.0-503.el9.x86_64 root=/dev/mapper/rl-root ro crashkernel=1G-4G:192M rd.driver.blacklist=nouveau"


def iommu(tmp_path: Path) -> Record:
    return pc.iommu_mode(pc.read_iommu(tmp_path))


def test_iommu_args() -> None:
    line = f"{CMDLINE} intel_iommu=on iommu=pt amd_iommu=off iommu.passthrough=1 iommufd=x"
    assert pc.iommu_args(line) == [
        "intel_iommu=on",
        "iommu=pt",
        "amd_iommu=off",
        "iommu.passthrough=1",
    ]
    assert pc.iommu_args(CMDLINE) == []
    assert pc.iommu_args(None) == []


def test_iommu_identity_domains_pass(tmp_path: Path) -> None:
    tree = Tree(tmp_path).hgx()
    tree.write("proc/cmdline", f"{CMDLINE} intel_iommu=on iommu=pt\n")
    tree.write("sys/class/iommu/dmar0/name", "dmar0\n")
    tree.iommu_group(GPU, 40, "identity")
    tree.iommu_group(HCA, 41, "identity")
    r = iommu(tmp_path)
    assert r.status == "pass", r.message
    assert r.value == "passthrough"
    assert "2 device(s) in identity domains" in r.message
    assert "intel_iommu=on iommu=pt" in r.message


def test_iommu_translating_with_gpus_warns(tmp_path: Path) -> None:
    tree = Tree(tmp_path).hgx()
    tree.write("proc/cmdline", f"{CMDLINE} intel_iommu=on\n")
    tree.write("sys/class/iommu/dmar0/name", "dmar0\n")
    tree.iommu_group(GPU, 40, "DMA-FQ")
    tree.iommu_group(HCA, 41, "identity")
    r = iommu(tmp_path)
    assert r.status == "warn"
    assert r.value == "translated"
    assert f"{GPU} domain DMA-FQ" in r.message
    assert HCA not in r.message
    assert "grubby --update-kernel=ALL --args='iommu=pt'" in r.remedy


def test_iommu_off_passes(tmp_path: Path) -> None:
    tree = Tree(tmp_path).hgx()
    tree.write("proc/cmdline", CMDLINE + "\n")
    (tmp_path / "sys/kernel/iommu_groups").mkdir(parents=True)
    (tmp_path / "sys/class/iommu").mkdir(parents=True)
    r = iommu(tmp_path)
    assert (r.status, r.value) == ("pass", "off")
    assert "kernel IOMMU arguments: none" in r.message


@pytest.mark.parametrize(
    ("args", "status", "mode"),
    [
        pytest.param("iommu=pt", "pass", "passthrough", id="pt"),
        pytest.param("iommu.passthrough=1", "pass", "passthrough", id="passthrough-1"),
        pytest.param("amd_iommu=on", "warn", "translated", id="no-pt"),
    ],
)
def test_iommu_groups_without_type_fall_back_to_the_command_line(
    tmp_path: Path, args: str, status: str, mode: str
) -> None:
    """Kernels before 5.11 have no iommu_groups/<n>/type: the command line decides."""
    tree = Tree(tmp_path).hgx()
    tree.write("proc/cmdline", f"{CMDLINE} {args}\n")
    tree.write("sys/class/iommu/ivhd0/name", "ivhd0\n")
    tree.iommu_group(GPU, 7, None)
    r = iommu(tmp_path)
    assert (r.status, r.value) == (status, mode), r.message
    assert args in r.message


def test_iommu_skips_without_gpu(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.device(["pci0000:3a", "0000:3a:01.0"], "0x8086", "0x060400")
    tree.device(["pci0000:3a", "0000:3a:01.0", HCA], "0x15b3", "0x020700")
    tree.write("proc/cmdline", f"{CMDLINE} intel_iommu=on\n")
    tree.write("sys/class/iommu/dmar0/name", "dmar0\n")
    tree.iommu_group(HCA, 3, "DMA")
    r = iommu(tmp_path)
    assert r.status == "skip"
    assert "no NVIDIA GPU on the PCI bus (IOMMU translated)" in r.message


def test_iommu_unreadable_is_incomplete(tmp_path: Path) -> None:
    Tree(tmp_path).hgx()  # no /proc/cmdline, no /sys/kernel/iommu_groups
    r = iommu(tmp_path)
    assert (r.status, r.value) == ("incomplete", "unknown")
    assert "/proc/cmdline and /sys/kernel/iommu_groups unreadable" in r.message


def test_iommu_without_pci_sysfs_is_incomplete(tmp_path: Path) -> None:
    Tree(tmp_path).write("proc/cmdline", CMDLINE)
    r = iommu(tmp_path)
    assert r.status == "incomplete"
    assert "cannot tell whether GPUs are present" in r.message


# --------------------------------------------------------------------------- both


def test_platform_records_on_a_healthy_hgx_tree(tmp_path: Path) -> None:
    tree = Tree(tmp_path).hgx()
    tree.write("proc/cmdline", f"{CMDLINE} intel_iommu=on iommu=pt\n")
    tree.write("sys/class/iommu/dmar0/name", "dmar0\n")
    tree.iommu_group(GPU, 40, "identity")
    tree.iommu_group(HCA, 41, "identity")
    run = FakeRun(hgx_lspci())
    records = pc.platform_records(tmp_path, run)
    assert [(r.name, r.status) for r in records] == [
        (pc.PCIE_ACS, "pass"),
        (pc.IOMMU_MODE, "pass"),
    ], [r.message for r in records]


def test_platform_records_on_a_broken_hgx_tree(tmp_path: Path) -> None:
    tree = Tree(tmp_path).hgx()
    tree.write("proc/cmdline", f"{CMDLINE} intel_iommu=on\n")
    tree.write("sys/class/iommu/dmar0/name", "dmar0\n")
    tree.iommu_group(GPU, 40, "DMA")
    run = FakeRun(hgx_lspci(**{DSP_GPU: ACS_ON}))
    records = pc.platform_records(tmp_path, run)
    assert [r.status for r in records] == ["fail", "warn"]
    assert all(r.remedy and "Fix: " in r.message for r in records)


# --------------------------------------------------------------------------- the real runner


def test_run_command_reports_a_missing_command_as_none() -> None:
    assert pc.run_command(["gpufleet-no-such-command-xyz", "--version"]) is None


def test_run_command_returns_exit_status_and_output() -> None:
    out = pc.run_command(["sh", "-c", "echo ACSCtl; echo oops >&2; exit 3"])
    assert out == CommandOutput(3, "ACSCtl\n", "oops\n")


def test_run_command_timeout_reads_as_minus_one() -> None:
    out = pc.run_command(["sleep", "5"], timeout_s=0.1)
    assert out is not None and out.returncode == -1
    assert "timed out" in out.stderr
