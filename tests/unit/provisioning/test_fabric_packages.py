"""gpufleet.provisioning.fabric_packages: NVSwitch/NVLink 5 detection, the Fabric Manager package names from dnf's
module metadata, the specs of the driver transaction and of the exact-version install, and
preflight's verdict on the repository (probe output in the format the preflight role prints).

The ``dnf module info`` texts are captured from dnf (see the comment above them)."""

from __future__ import annotations

import pytest

from gpufleet.provisioning import fabric_packages as fp
from gpufleet.provisioning.preflight_probe import preflight_problems

H100_LSPCI = """\
18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
06:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
"""
PCIE_LSPCI = "3b:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 PCIe] [10de:20f1]\n"

# Captured from dnf 4.14 (Debian 12's, the one the testbed nodes run) for a repository made
# with createrepo_c + modifyrepo_c --mdtype=modules from a modules.yaml in NVIDIA's layout:
# two module versions of stream 580-open (NVIDIA publishes one per driver release), the
# newer one's fm profile naming one more package:
#   dnf -q --repofrompath=probe,file:///repo --repo=probe module info --profile nvidia-driver:580-open
DNF_PROFILES = """\
Name    : nvidia-driver:580-open:20251001000000:4e9c8a1b:x86_64
default : nvidia-open
fm      : nvidia-fabricmanager
        : nvidia-open
ks      : nvidia-driver-cuda

Name    : nvidia-driver:580-open:20251130000000:4e9c8a1b:x86_64
default : nvidia-open
fm      : libnvidia-nscq
        : nvidia-fabricmanager
        : nvidia-open
"""
# the same without --profile
DNF_INFO = """\
Name             : nvidia-driver
Stream           : 580-open [d][a]
Version          : 20251001000000
Context          : 4e9c8a1b
Architecture     : x86_64
Profiles         : default [d], fm, ks
Default profiles : default
Repo             : probe
Summary          : test
Description      : test
Requires         :
Artifacts        : nvidia-fabricmanager-0:580.82.07-1.el9.x86_64
                 : nvidia-kmod-common-3:580.82.07-1.el9.noarch
                 : nvidia-open-3:580.82.07-1.el9.x86_64

Name             : nvidia-driver
Stream           : 580-open [d][a]
Version          : 20251130000000
Context          : 4e9c8a1b
Architecture     : x86_64
Profiles         : default [d], fm
Default profiles : default
Repo             : probe
Summary          : test
Description      : test
Requires         :
Artifacts        : libnvidia-nscq-0:580.95.05-1.el9.x86_64
                 : nvidia-fabricmanager-0:580.95.05-1.el9.x86_64
                 : nvidia-kmod-common-3:580.95.05-1.el9.noarch

Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled, [a]ctive
"""


def probe_text(installed: str = "", **sections: tuple[int, str]) -> str:
    out = [f"installed: {installed}"]
    for name, (rc, body) in sections.items():
        out += [f"=== {name} (rc={rc})", body]
    return "\n".join(out) + "\n"


def test_nvswitches_are_found_in_the_lspci_listing_gpus_are_not() -> None:
    assert fp.nvswitches_from_lspci(H100_LSPCI) == ["0000:05:00.0", "0000:06:00.0"]
    assert fp.nvswitches_from_lspci(PCIE_LSPCI) == []
    # the preflight probe's sysfs fallback line (no pciutils)
    line = "07:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:2901] (NVSwitch, no lspci)"
    assert fp.nvswitches_from_lspci([line]) == ["0000:07:00.0"]


@pytest.mark.parametrize(
    ("archs", "nvl5"),
    [(["sm_90"], False), (["sm_100"], True), (["10.3"], True), (["GB100"], True), ([], False)],
)
def test_nvlink5_is_nvswitch_plus_compute_capability_10(archs: list[str], nvl5: bool) -> None:
    got = fp.fabric_needs(["0000:05:00.0"], archs)
    assert (got["nvlink5"], got["nvlsm"], got["fabricmanager"]) == (nvl5, nvl5, True)
    # a Blackwell GPU without NVSwitch (PCIe card) needs neither
    assert fp.fabric_needs([], archs) == {**fp.fabric_needs([], archs), "fabricmanager": False,
                                          "nvlsm": False, "nvlink5": False}  # fmt: skip


def test_settings_override_detection() -> None:
    assert fp.fabric_needs([], ["sm_90"], "always")["fabricmanager"] is True
    assert fp.fabric_needs(["x"], ["sm_100"], "never")["nvlsm"] is False
    assert fp.fabric_needs(["x"], ["sm_90"], "auto", "always")["nvlsm"] is True
    assert fp.fabric_needs(["x"], ["sm_100"], True, False)["nvlsm"] is False
    with pytest.raises(fp.FabricChoiceError, match="nvidia_driver_fabricmanager='maybe'"):
        fp.fabric_needs([], [], "maybe")


def test_profiles_merge_every_module_version_of_the_stream() -> None:
    profiles = fp.parse_module_profiles(DNF_PROFILES)
    assert profiles["default"] == ["nvidia-open"]
    assert profiles["fm"] == ["libnvidia-nscq", "nvidia-fabricmanager", "nvidia-open"]
    # fm minus default: the driver's own meta package is not pinned twice
    assert fp.fm_package_names(9, profiles) == ["libnvidia-nscq", "nvidia-fabricmanager"]
    assert fp.fm_package_names(10) == ["nvidia-fabricmanager"]
    assert fp.fm_package_names(8, profiles, ["nvidia-fabric-manager"]) == ["nvidia-fabric-manager"]
    assert fp.fm_package_names(8, {}) == []


def test_artifacts_and_versions() -> None:
    arts = fp.parse_module_artifacts(DNF_INFO)
    assert "nvidia-kmod-common-3:580.95.05-1.el9.noarch" in arts and len(arts) == 6
    have = fp.versions_by_name([*arts, "nvlsm 2025.06.5", ": junk"])
    assert have["nvidia-kmod-common"] == {"580.82.07", "580.95.05"}
    assert have["nvlsm"] == {"2025.06.5"}
    assert ":" not in have


def test_specs() -> None:
    assert fp.transaction_specs(10, ["nvidia-fabricmanager"], "580", ["nvlsm"]) == [
        "nvidia-fabricmanager-580.*",
        "nvlsm",
    ]
    assert fp.transaction_specs(9, ["nvidia-fabricmanager"], "580") == ["nvidia-fabricmanager"]
    assert fp.transaction_specs(10, ["nvidia-fabricmanager"], "") == ["nvidia-fabricmanager"]
    assert fp.exact_specs(["a", "b"], "580.95.05") == ["a-580.95.05", "b-580.95.05"]
    with pytest.raises(fp.FabricChoiceError, match="not installed"):
        fp.exact_specs(["a"], "")
    lines = ["nvidia-fabricmanager 580.82.07", "package libnvidia-nscq is not installed"]
    assert fp.version_mismatches(lines, ["nvidia-fabricmanager", "libnvidia-nscq"], "580.95.05") == [
        "nvidia-fabricmanager 580.82.07",
        "libnvidia-nscq not installed",
    ]  # fmt: skip
    assert fp.version_mismatches(["nvidia-fabricmanager 580.95.05"], ["nvidia-fabricmanager"],
                                 "580.95.05") == []  # fmt: skip


def test_target_version_keeps_the_installed_driver_of_the_branch() -> None:
    avail = ["580.82.07", "580.95.05", "575.57.08"]
    assert fp.target_driver_version(None, avail, "580") == "580.95.05"
    assert fp.target_driver_version("580.82.07", avail, "580") == "580.82.07"
    assert fp.target_driver_version("580.82.07", avail, "575") == "575.57.08"  # branch change
    assert fp.target_driver_version(None, avail, "") == "580.95.05"
    assert fp.target_driver_version(None, avail, "570") is None


def test_probe_passes_when_the_stream_has_fm_of_the_driver_version() -> None:
    text = probe_text(artifacts=(0, DNF_INFO), profiles=(0, DNF_PROFILES))
    v = fp.probe_verdict(text, 9, "580", "580-open")
    assert v["problem"] is None, v
    assert v["version"] == "580.95.05"
    assert v["names"] == ["libnvidia-nscq", "nvidia-fabricmanager"]


def test_probe_refuses_an_installed_driver_whose_fm_is_gone() -> None:
    info = DNF_INFO.replace("nvidia-fabricmanager-0:580.82.07-1.el9.x86_64", "x-0:1-1.el9.x86_64")
    text = probe_text("580.82.07", artifacts=(0, info), profiles=(0, DNF_PROFILES))
    v = fp.probe_verdict(text, 9, "580", "580-open", repo="http://m/cuda/rhel9/x86_64")
    assert v["version"] == "580.82.07"
    assert "installed driver 580.82.07" in v["problem"]
    assert "libnvidia-nscq, nvidia-fabricmanager of exactly version 580.82.07" in v["problem"]
    assert "only 580.95.05" in v["problem"] and "http://m/cuda/rhel9/x86_64" in v["problem"]
    assert "dnf update 'nvidia-*'" in v["fix"]
    msgs = preflight_problems({"node": "hgx1", "allow_no_gpu": True, "fabricmanager": v})
    assert len(msgs) == 1
    assert msgs[0].startswith("hgx1: NVSwitch system: the installed driver 580.82.07")
    assert "[nvidia_driver_branch] -> fix:" in msgs[0]


def test_probe_el10_pinned_branch_without_fm() -> None:
    pkgs = (
        "nvidia-kmod-common 575.57.08\nnvidia-kmod-common 580.95.05\nnvidia-fabricmanager 580.95.05"
    )
    v = fp.probe_verdict(probe_text(packages=(0, pkgs)), 10, "575")
    assert v["version"] == "575.57.08"
    assert "nvidia-fabricmanager of exactly version 575.57.08" in v["problem"]
    ok = fp.probe_verdict(probe_text(packages=(0, pkgs)), 10, "580")
    assert ok["problem"] is None and ok["version"] == "580.95.05"


def test_probe_nvlsm_and_missing_branch() -> None:
    pkgs = "nvidia-kmod-common 580.95.05\nnvidia-fabricmanager 580.95.05"
    v = fp.probe_verdict(probe_text(packages=(0, pkgs)), 10, "580", nvlsm=["nvlsm"])
    assert v["variable"] == "nvidia_driver_nvlsm" and "nvlsm" in v["problem"]
    v = fp.probe_verdict(probe_text(packages=(0, pkgs + "\nnvlsm 2025.06.5")), 10, "580",
                         nvlsm=["nvlsm"])  # fmt: skip
    assert v["problem"] is None
    v = fp.probe_verdict(probe_text(packages=(0, pkgs)), 10, "570")
    assert "has no driver of branch 570" in v["problem"]


def test_probe_quotes_dnf_when_the_query_fails() -> None:
    err = "Error: Failed to download metadata for repo 'gpufleet-cuda-probe': Cannot download"
    v = fp.probe_verdict(probe_text(artifacts=(1, err), profiles=(0, "")), 8, "580", "580-open")
    assert v["variable"] == "gpufleet_cuda_repo_baseurl"
    assert "failed" in v["problem"] and "Cannot download" in v["problem"]
    assert "missing" not in v["problem"]


def test_probe_without_an_fm_profile_names_the_override() -> None:
    profiles = "Name : nvidia-driver:580-open:1:c:x86_64\ndefault : nvidia-open\n"
    v = fp.probe_verdict(probe_text(artifacts=(0, DNF_INFO), profiles=(0, profiles)), 9, "580",
                         "580-open")  # fmt: skip
    assert v["variable"] == "nvidia_driver_fabricmanager_packages"
