"""Planner tests: every torch minor in the data, every published variant, every refusal.

The expectations are written out by hand from the public sources data/compat.json cites
(its ``sources`` table: release notes, PyPI, the wheel indexes), so a wrong edit of
data/compat.json fails here.
"""

from __future__ import annotations

import pytest

from gpufleet.errors import EXIT_REFUSED, RefusedError
from gpufleet.planning.compat import load
from gpufleet.planning.planner import PlanRefused, PlanRequest, make_plan

# minor: (newest patch, PyPI default, published variants (cpu aside), python range, NCCL)
RELEASES = {
    "1.13": ("1.13.1", "cu117", ["cu116", "cu117"], ("3.7", "3.11"), "2.14.3"),
    "2.0": ("2.0.1", "cu117", ["cu117", "cu118"], ("3.8", "3.11"), "2.14.3"),
    "2.1": ("2.1.2", "cu121", ["cu118", "cu121"], ("3.8", "3.11"), "2.18.1"),
    "2.2": ("2.2.2", "cu121", ["cu118", "cu121"], ("3.8", "3.12"), "2.19.3"),
    "2.3": ("2.3.1", "cu121", ["cu118", "cu121"], ("3.8", "3.12"), "2.20.5"),
    "2.4": ("2.4.1", "cu121", ["cu118", "cu121", "cu124"], ("3.8", "3.12"), "2.20.5"),
    "2.5": ("2.5.1", "cu124", ["cu118", "cu121", "cu124"], ("3.9", "3.13"), "2.21.5"),
    "2.6": ("2.6.0", "cu124", ["cu118", "cu124", "cu126"], ("3.9", "3.13"), "2.21.5"),
    "2.7": ("2.7.1", "cu126", ["cu118", "cu126", "cu128"], ("3.9", "3.13"), "2.26.2"),
    "2.8": ("2.8.0", "cu128", ["cu126", "cu128", "cu129"], ("3.9", "3.13"), "2.27.3"),
    "2.9": ("2.9.1", "cu128", ["cu126", "cu128", "cu129", "cu130"], ("3.10", "3.14"), "2.27.5"),
    "2.10": ("2.10.0", "cu128", ["cu126", "cu128", "cu129", "cu130"], ("3.10", "3.14"), "2.27.5"),
    "2.11": ("2.11.0", "cu130", ["cu126", "cu128", "cu129", "cu130"], ("3.10", "3.14"), "2.28.9"),
    "2.12": ("2.12.1", "cu130", ["cu126", "cu129", "cu130", "cu132"], ("3.10", "3.14"), "2.29.7"),
    "2.13": ("2.13.0", "cu130", ["cu126", "cu129", "cu130", "cu132"], ("3.10", "3.14"), "2.29.7"),
    "2.14": ("2.14.1", "cu130", ["cu126", "cu129", "cu130", "cu132"], ("3.10", "3.14"), "2.30.7"),
    "2.15": ("2.15.0", "cu132", ["cu130", "cu132"], ("3.11", "3.15"), "2.30.7"),
}
# CUDA version: (toolkit package, minor-version floor, GA driver, recommended branch)
CUDA = {
    "11.6": ("cuda-toolkit-11-6", "450.80.02", "510.39.01", "580"),
    "11.7": ("cuda-toolkit-11-7", "450.80.02", "515.43.04", "580"),
    "11.8": ("cuda-toolkit-11-8", "450.80.02", "520.61.05", "580"),
    "12.1": ("cuda-toolkit-12-1", "525.60.13", "530.30.02", "580"),
    "12.4": ("cuda-toolkit-12-4", "525.60.13", "550.54.14", "580"),
    "12.6": ("cuda-toolkit-12-6", "525.60.13", "560.28.03", "580"),
    "12.8": ("cuda-toolkit-12-8", "525.60.13", "570.26", "580"),
    "12.9": ("cuda-toolkit-12-9", "525.60.13", "575.51.03", "580"),
    "13.0": ("cuda-toolkit-13-0", "580", "580.65.06", "580"),
    "13.2": ("cuda-toolkit-13-2", "580", "595.45.04", "595"),
}
UNCONFIRMED = {("2.14", "cu129")}


def test_data_covers_every_minor_from_1_13_to_2_15() -> None:
    assert [r.minor for r in load().torch] == list(RELEASES)


@pytest.mark.parametrize("minor", list(RELEASES))
def test_default_variant_per_release(minor: str) -> None:
    patch, default, _, (lo, hi), nccl = RELEASES[minor]
    plan = make_plan(PlanRequest(torch=patch))
    assert plan.variant == default
    assert plan.variant_is_default
    assert plan.requirement == f"torch=={patch}"
    assert plan.expected_build == f"{patch}+{default}"
    assert plan.index_url == f"https://download.pytorch.org/whl/{default}"
    assert (plan.python_min, plan.python_max) == (lo, hi)
    assert plan.nccl == nccl
    assert "PyPI default" in plan.variant_reason
    pkg, floor, ga, branch = CUDA[str(plan.cuda)]
    assert (plan.toolkit_package, plan.min_driver, plan.driver_ga) == (pkg, floor, ga)
    assert plan.driver_branch == branch
    assert plan.driver_flavor == "open"


@pytest.mark.parametrize(
    ("minor", "variant"),
    [(m, v) for m, row in RELEASES.items() for v in row[2]],
)
def test_each_published_variant(minor: str, variant: str) -> None:
    patch = RELEASES[minor][0]
    plan = make_plan(PlanRequest(torch=patch, variant=variant))
    cuda = f"{int(variant[2:4])}.{variant[4]}"
    pkg, floor, ga, branch = CUDA[cuda]
    assert plan.variant == variant
    assert plan.cuda == cuda
    assert plan.toolkit_package == pkg
    assert plan.toolkit_prefix == f"/usr/local/cuda-{cuda}"
    assert plan.min_driver == floor
    assert plan.driver_ga == ga
    assert plan.driver_branch == branch
    assert plan.variant_reason.startswith("requested")
    if (minor, variant) in UNCONFIRMED:
        assert any("unconfirmed" in n for n in plan.notes)


def test_cpu_variant_needs_no_driver_or_toolkit() -> None:
    plan = make_plan(PlanRequest(torch="2.13.0", variant="cpu", os="rocky9"))
    assert plan.variant == "cpu"
    assert plan.index_url == "https://download.pytorch.org/whl/cpu"
    assert plan.expected_build == "2.13.0+cpu"
    assert plan.cuda is plan.toolkit_package is plan.min_driver is plan.driver_branch is None
    assert plan.driver_flavor is None and plan.nccl is None
    assert plan.repo == "rhel9"


def test_new_user_driver_570_gets_cu128_with_reason() -> None:
    """The issue's acceptance example."""
    plan = make_plan(PlanRequest(torch="2.11.0", driver="570.86.15"))
    assert plan.variant == "cu128"
    assert not plan.variant_is_default
    assert "cu130 is excluded" in plan.variant_reason
    assert "driver >= 580" in plan.variant_reason
    assert "570.86.15" in plan.variant_reason
    assert plan.toolkit_package == "cuda-toolkit-12-8"


def test_driver_below_ga_prefers_variant_without_minor_compat() -> None:
    # 560.35.03 meets CUDA 12.6's GA driver but not 12.8's: cu126 is preferred to cu128.
    plan = make_plan(PlanRequest(torch="2.11.0", driver="560.35.03"))
    assert plan.variant == "cu126"


def test_volta_excluded_from_cu130_picks_cu126_proprietary() -> None:
    plan = make_plan(PlanRequest(torch="2.11.0", gpu_archs=("GV100",), os="rocky9"))
    assert plan.variant == "cu126"
    assert plan.driver_flavor == "proprietary"
    assert plan.driver_branch == "580" and plan.driver_branch_max == "580"
    assert plan.gpu_archs == ["sm_70"] and plan.gpu_families == ["Volta"]
    assert "sm_70 (Volta)" in plan.variant_reason


@pytest.mark.parametrize(
    ("archs", "flavor"),
    [
        (("sm_75",), "open"),
        (("GA100", "GH100"), "open"),
        (("sm_61",), "proprietary"),
        (("TU102", "GP100"), "proprietary"),
        (("12.0",), "open"),
    ],
)
def test_driver_flavor_by_architecture(archs: tuple[str, ...], flavor: str) -> None:
    plan = make_plan(
        PlanRequest(
            torch="2.13.0", variant="cu126" if flavor == "proprietary" else None, gpu_archs=archs
        )
    )
    assert plan.driver_flavor == flavor


def test_kepler_stays_on_branch_470_with_cu118() -> None:
    plan = make_plan(PlanRequest(torch="2.1.2", gpu_archs=("GK210",), driver="470.82.01"))
    assert plan.variant == "cu118"
    assert plan.driver_branch == "470"
    assert plan.driver_flavor == "proprietary"
    assert any("minor-version compatibility" in n for n in plan.notes)


def test_cu132_recommends_its_ga_branch() -> None:
    plan = make_plan(PlanRequest(torch="2.15.0"))
    assert plan.variant == "cu132"
    assert plan.driver_branch == "595"


@pytest.mark.parametrize(
    ("os_text", "repo", "major"),
    [
        ("rocky9", "rhel9", 9),
        ("el8", "rhel8", 8),
        ("rhel10", "rhel10", 10),
        ("AlmaLinux 9.4", "rhel9", 9),
        ("centos-stream10", "rhel10", 10),
        ("ol8", "rhel8", 8),
    ],
)
def test_os_to_repo(os_text: str, repo: str, major: int) -> None:
    plan = make_plan(PlanRequest(torch="2.13.0", os=os_text))
    assert (plan.repo, plan.el_major, plan.os) == (repo, major, f"el{major}")


def test_el7_allowed_only_for_torch_before_2_7_with_note() -> None:
    plan = make_plan(PlanRequest(torch="2.6.0", os="centos7"))
    assert plan.repo == "rhel7"
    assert plan.driver_branch == "550"  # NVIDIA's rhel7 repository ends at R550
    assert any("end of life" in n for n in plan.notes)


def _refusal(req: PlanRequest) -> str:
    with pytest.raises(PlanRefused) as info:
        make_plan(req)
    assert info.value.exit_code == EXIT_REFUSED
    assert isinstance(info.value, RefusedError)
    return str(info.value)


def test_refuse_forced_variant_needing_newer_driver() -> None:
    msg = _refusal(PlanRequest(torch="2.11.0", variant="cu130", driver="570.86.15"))
    assert msg.startswith("Refused: torch 2.11.0 with cu130 cannot work")
    assert "needs NVIDIA driver >= 580" in msg and "570.86.15" in msg
    assert "Nearest combinations that work: torch==2.11.0 with cu128" in msg
    assert "upgrade the driver to >= 580" in msg


def test_refuse_architecture_in_no_wheel() -> None:
    msg = _refusal(PlanRequest(torch="2.15.0", gpu_archs=("sm_70",)))
    assert "no CUDA wheel of torch 2.15.0 works" in msg
    assert "no code for sm_70 (Volta)" in msg
    assert "Nearest combinations that work: torch==2.14.1 with cu126" in msg


def test_refuse_el7_with_torch_2_7_or_newer() -> None:
    msg = _refusal(PlanRequest(torch="2.7.0", os="centos7"))
    assert "glibc >= 2.28" in msg and "glibc 2.17" in msg
    assert "torch==2.6.0 with cu124" in msg
    assert "move the node to EL8 or newer" in msg


@pytest.mark.parametrize(
    ("req", "fragment"),
    [
        (PlanRequest(torch="2.11"), "malformed; write the exact release as X.Y.Z"),
        (PlanRequest(torch="latest"), "malformed"),
        (PlanRequest(torch="2.16.0"), "not in gpufleet's compatibility data"),
        (PlanRequest(torch="1.12.1"), "not in gpufleet's compatibility data"),
        (PlanRequest(torch="2.11.3"), "not a published 2.11 release (known: 2.11.0)"),
        (PlanRequest(torch="2.13.0", variant="cu12"), "CUDA variant 'cu12' is malformed"),
        (PlanRequest(torch="2.13.0", driver="570"), None),
        (PlanRequest(torch="2.13.0", driver="five"), "driver version 'five' is malformed"),
        (PlanRequest(torch="2.13.0", python="three"), "Python version 'three' is malformed"),
        (PlanRequest(torch="2.13.0", os="ubuntu22"), "Enterprise Linux only"),
        (PlanRequest(torch="2.13.0", os="rocky6"), "unknown EL release"),
        (PlanRequest(torch="2.13.0", gpu_archs=("XX100",)), "unknown GPU codename"),
        (PlanRequest(torch="2.13.0", gpu_archs=("sm_4",)), "cannot read GPU architecture"),
    ],
)
def test_refuse_malformed_or_unknown(req: PlanRequest, fragment: str | None) -> None:
    if fragment is None:  # a bare branch number is a valid driver input
        make_plan(req)
        return
    assert fragment in _refusal(req)


def test_refuse_variant_not_published() -> None:
    msg = _refusal(PlanRequest(torch="2.15.0", variant="cu126"))
    assert "publishes no cu126 wheels (it has cu130, cu132 and cpu)" in msg
    assert "torch==2.14.1 with cu126" in msg
    msg = _refusal(PlanRequest(torch="2.12.0", variant="cu129"))
    assert "torch==2.12.1 with cu129" in msg


def test_refuse_python_outside_release_range() -> None:
    msg = _refusal(PlanRequest(torch="2.13.0", python="3.9"))
    assert "Python 3.10 to 3.14, not 3.9" in msg
    assert "torch==2.8.0" in msg


def test_refuse_installed_driver_too_new_for_old_gpus() -> None:
    msg = _refusal(PlanRequest(torch="2.11.0", gpu_archs=("sm_70",), driver="590.44.01"))
    assert "newer than Volta GPUs support (last branch 580)" in msg


def test_unconfirmed_variant_is_never_chosen_automatically() -> None:
    # 2.14 cu129 is unconfirmed: with a 575 driver the planner must take cu126, not cu129.
    plan = make_plan(PlanRequest(torch="2.14.1", driver="575.57.08"))
    assert plan.variant == "cu126"


def test_from_mapping_accepts_ansible_style_input() -> None:
    req = PlanRequest.from_mapping(
        {
            "torch": "2.13.0",
            "variant": "",
            "os": "Rocky9",
            "gpu_archs": "sm_80, sm_90",
            "driver": None,
            "python": 3.11,
        }
    )
    assert req == PlanRequest(
        torch="2.13.0", os="Rocky9", gpu_archs=("sm_80", "sm_90"), python="3.11"
    )
    with pytest.raises(RefusedError, match="torch version is required"):
        PlanRequest.from_mapping({"torch": ""})


def test_arch_specific_names_plan_like_their_capability() -> None:
    # sm_90a is what torch.cuda.get_arch_list() prints for Hopper builds; the planner and
    # the node check read it through the same gpuarch.covers / parse_arch.
    a = make_plan(PlanRequest(torch="2.11.0", gpu_archs=("sm_90a",))).to_dict()
    b = make_plan(PlanRequest(torch="2.11.0", gpu_archs=("sm_90",))).to_dict()
    assert a == b and a["gpu_archs"] == ["sm_90"]
