"""gpufleet.core filters and the pure decisions behind them (OS branching, driver choice,
versionlock entries, preflight verdicts), data-driven, against the real planner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roles_driver_helpers import ansible_playbook, install_collection_finder

install_collection_finder()

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.gpufleet.core.plugins.filter import gpufleet as F  # noqa: E402
from ansible_collections.gpufleet.core.plugins.filter import verify as V  # noqa: E402

from gpufleet.planning import driver_choice as N  # noqa: E402
from gpufleet.planning import osinfo  # noqa: E402
from gpufleet.planning.planner import Plan, PlanRefused, PlanRequest, make_plan  # noqa: E402
from gpufleet.provisioning import preflight_probe as P  # noqa: E402

LSPCI = """\
3b:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 PCIe 40GB] [10de:20f1] (rev a1)
3b:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:1aef] (rev a1)
86:00.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 PCIe 32GB] [10de:1db6] (rev a1)
c1:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
"""


# --------------------------------------------------------------------------- OS branching
@pytest.mark.parametrize(
    ("dist", "major", "arch", "release", "os", "repo", "repo_arch", "supported"),
    [
        ("Rocky", "9", "x86_64", "Blue Onyx", "rocky9", "rhel9", "x86_64", True),
        ("AlmaLinux", "8", "aarch64", "", "almalinux8", "rhel8", "sbsa", True),
        ("CentOS", "10", "x86_64", "Stream", "centos10", "rhel10", "x86_64", True),
        ("RedHat", "10", "x86_64", "Coughlan", "rhel10", "rhel10", "x86_64", True),
        ("OracleLinux", "9", "x86_64", "", "ol9", "rhel9", "x86_64", True),
        ("rocky", "8.10", "x86_64", "Rocky Linux", "rocky8", "rhel8", "x86_64", True),  # os-release
        ("ol", "10.0", "x86_64", "Oracle Linux Server", "ol10", "rhel10", "x86_64", True),
        ("CentOS", "7", "x86_64", "Core", "centos7", "rhel7", "x86_64", False),
        ("Rocky", "9", "ppc64le", "", "rocky9", "rhel9", None, False),
        ("Debian", "12", "x86_64", "bookworm", None, "rhel12", "x86_64", False),
        ("Rocky", "11", "x86_64", "", "rocky11", "rhel11", "x86_64", False),
    ],
)
def test_el_target(
    dist: str,
    major: str,
    arch: str,
    release: str,
    os: str | None,
    repo: str,
    repo_arch: str | None,
    supported: bool,
) -> None:
    t = F.el_target_filter(dist, major, arch, release)
    assert (t["os"], t["repo"], t["repo_arch"], t["supported"]) == (os, repo, repo_arch, supported)
    assert bool(t["refusals"]) is not supported


def test_el10_is_compared_as_an_integer_not_a_string() -> None:
    # '10' < '8' as strings; the anchor role took the EL7 path on EL10 because of it.
    t = osinfo.el_target("Rocky", "10", "x86_64")
    assert t["el_major"] == 10 and t["supported"] and not t["is_el7"]
    assert N.driver_choice(_plan("open", "580"), t["el_major"])["method"] == "package"


def test_el7_refusal_gives_the_three_reasons() -> None:
    t = osinfo.el_target("CentOS", "7", "x86_64", "Core")
    assert t["is_el7"] and not t["supported"]
    text = " ".join(t["refusals"])
    for reason in ("end of life", "glibc >= 2.28", "ansible-core"):
        assert reason in text


def test_centos_stream_name() -> None:
    assert osinfo.el_target("CentOS", "9", "x86_64", "Stream")["name"] == "CentOS Stream"
    assert osinfo.el_target("centos", "10", "x86_64", "CentOS Stream")["name"] == "CentOS Stream"


# --------------------------------------------------------------------------- driver choice
def _plan(
    flavor: str | None,
    branch: str | None,
    *,
    bmax: str | None = None,
    archs: tuple[str, ...] = ("sm_80",),
    min_driver: str = "580",
) -> dict[str, Any]:
    """A whole plan dict (as the gpufleet_plan fact carries it) with the driver fields set."""
    base = make_plan(PlanRequest(torch="2.13.0", variant="cu130")).to_dict()
    return {
        **base,
        "driver_flavor": flavor,
        "driver_branch": branch,
        "driver_branch_max": bmax,
        "gpu_archs": list(archs),
        "min_driver": min_driver,
        "cuda": "13.0",
    }


CHOICES = [
    # el, plan, overrides, stream, packages, method, versionlock, dkms, gcc_cxx
    (9, _plan("open", "580"), {}, "580-open", ["nvidia-open"], "module", False, True, True),
    (8, _plan("open", "580"), {}, "580-open", ["nvidia-open"], "module", False, True, True),
    (
        9,
        _plan("open", "580"),
        {"branch": "latest"},
        "open-dkms",
        ["nvidia-open"],
        "module",
        False,
        True,
        True,
    ),
    (
        8,
        _plan("proprietary", "580", bmax="580", archs=("sm_60",), min_driver="525.60.13"),
        {},
        "580-dkms",
        ["cuda-drivers"],
        "module",
        False,
        True,
        False,
    ),
    (
        9,
        _plan("proprietary", "580", bmax="580", archs=("sm_70",), min_driver="525.60.13"),
        {"compute_only": True},
        "580-dkms",
        ["nvidia-driver-cuda"],
        "module",
        False,
        True,
        False,
    ),
    (
        9,
        _plan("open", "580"),
        {"flavor": "proprietary", "branch": "latest"},
        "latest-dkms",
        ["cuda-drivers"],
        "module",
        False,
        True,
        False,
    ),
    (
        9,
        _plan("open", "580"),
        {"packaging": "precompiled"},
        "580",
        ["cuda-drivers"],
        "module",
        False,
        False,
        False,
    ),
    (
        8,
        _plan("open", "580"),
        {"packaging": "precompiled", "branch": "latest"},
        "latest",
        ["cuda-drivers"],
        "module",
        False,
        False,
        False,
    ),
    (10, _plan("open", "580"), {}, None, ["nvidia-open-580.*"], "package", True, True, True),
    (
        10,
        _plan("open", "580"),
        {"compute_only": True},
        None,
        ["nvidia-driver-cuda-580.*", "kmod-nvidia-open-dkms-580.*"],
        "package",
        True,
        True,
        True,
    ),
    (
        10,
        _plan("proprietary", "580", bmax="580", archs=("sm_61",), min_driver="525.60.13"),
        {},
        None,
        ["cuda-drivers-580.*"],
        "package",
        True,
        True,
        False,
    ),
    (
        10,
        _plan("open", "580"),
        {"branch": "latest"},
        None,
        ["nvidia-open"],
        "package",
        False,
        True,
        True,
    ),
    (
        10,
        _plan("open", "580"),
        {"branch": "590"},
        None,
        ["nvidia-open-590.*"],
        "package",
        True,
        True,
        True,
    ),
    (
        9,
        _plan("open", "580"),
        {"packages": ["nvidia-open", "nvidia-fabricmanager"]},
        "580-open",
        ["nvidia-open", "nvidia-fabricmanager"],
        "module",
        False,
        True,
        True,
    ),
]


@pytest.mark.parametrize(
    ("el", "plan", "kw", "stream", "packages", "method", "versionlock", "dkms", "gcc"), CHOICES
)
def test_driver_choice(
    el: int,
    plan: dict[str, Any],
    kw: dict[str, Any],
    stream: str | None,
    packages: list[str],
    method: str,
    versionlock: bool,
    dkms: bool,
    gcc: bool,
) -> None:
    c = F.nvidia_driver_choice(plan, el, **kw)
    assert (c["stream"], c["packages"], c["method"]) == (stream, packages, method)
    assert (c["versionlock"], c["dkms"], c["gcc_cxx"]) == (versionlock, dkms, gcc)


@pytest.mark.parametrize(
    ("el", "plan", "kw", "variable", "words"),
    [
        (
            9,
            _plan("proprietary", "580", bmax="580", archs=("sm_60",)),
            {"flavor": "open"},
            "nvidia_driver_flavor",
            "pre-Turing",
        ),
        (9, _plan("open", "580"), {"flavor": "nouveau"}, "nvidia_driver_flavor", "choose open"),
        (
            9,
            _plan("proprietary", "580", bmax="580", archs=("sm_70",)),
            {"branch": "590"},
            "nvidia_driver_branch",
            "newer than 580",
        ),
        (
            9,
            _plan("proprietary", "580", bmax="580", archs=("sm_70",)),
            {"branch": "latest"},
            "nvidia_driver_branch",
            "pin nvidia_driver_branch",
        ),
        (
            9,
            _plan("open", "580", min_driver="580"),
            {"branch": "570"},
            "nvidia_driver_branch",
            "older than the driver the torch wheel needs",
        ),
        (9, _plan("open", "580"), {"branch": "58"}, "nvidia_driver_branch", "three digits"),
        (9, _plan("open", "580"), {"packaging": "rpm"}, "nvidia_driver_packaging", "dkms"),
        (
            10,
            _plan("open", "580"),
            {"packaging": "precompiled"},
            "nvidia_driver_packaging",
            "no precompiled",
        ),
    ],
)
def test_driver_choice_refusals_name_the_variable(
    el: int, plan: dict[str, Any], kw: dict[str, Any], variable: str, words: str
) -> None:
    with pytest.raises(N.ChoiceError) as exc:
        N.driver_choice(plan, el, **kw)
    assert exc.value.variable == variable and words in exc.value.message
    with pytest.raises(AnsibleFilterError, match=variable):
        F.nvidia_driver_choice(plan, el, **kw)
    assert F.nvidia_driver_choice(plan, el, errors="return", **kw)["error"]["variable"] == variable


@pytest.mark.parametrize(
    ("archs", "el", "stream", "flavor"),
    [
        (("sm_80",), 9, "580-open", "open"),
        (("sm_60",), 8, "580-dkms", "proprietary"),  # Pascal: cu126 wheel, proprietary, <= 580
        (("sm_90", "sm_75"), 9, "580-open", "open"),
    ],
)
def test_real_plan_feeds_the_choice(
    archs: tuple[str, ...], el: int, stream: str, flavor: str
) -> None:
    plan = F.plan_check({"torch": "2.13.0", "os": f"rocky{el}", "gpu_archs": list(archs)})["plan"]
    c = F.nvidia_driver_choice(plan, el)
    assert (c["stream"], c["flavor"]) == (stream, flavor)


# --------------------------------------------------------------------------- versionlock
def test_versionlock_entries_hold_installed_driver_packages_of_the_branch() -> None:
    choice = N.driver_choice(_plan("open", "580"), 10)
    rpms = [
        "nvidia-open 580.95.05",
        "kmod-nvidia-open-dkms 580.95.05",
        "libnvidia-ml 580.95.05",
        "cuda-drivers 580.95.05",
        "nvidia-persistenced 580.95.05",
        "kernel-core 6.12.0",
        "dkms 3.1.8",
        "cuda-toolkit-13-0 13.0.2",
    ]
    assert F.FilterModule().filters()["nvidia_versionlock_entries"](choice, rpms) == [
        "cuda-drivers-580.*",
        "kmod-nvidia-open-dkms-580.*",
        "libnvidia-ml-580.*",
        "nvidia-open-580.*",
        "nvidia-persistenced-580.*",
    ]
    assert N.versionlock_entries(N.driver_choice(_plan("open", "580"), 9), rpms) == []


def test_stale_versionlock_entries_before_and_after_a_switch() -> None:
    locklist = "# comment\nnvidia-open-580.*\nkmod-nvidia-latest-dkms-580.*\nnginx-1.24.*\n"
    # switching to 590: every 580 driver lock would block the install
    assert N.stale_versionlock_entries(locklist, "590") == [
        "nvidia-open-580.*",
        "kmod-nvidia-latest-dkms-580.*",
    ]
    # same branch before the install: nothing blocks
    assert N.stale_versionlock_entries(locklist, "580") == []
    # after a flavour switch: the proprietary kmod lock is no longer wanted
    assert N.stale_versionlock_entries(locklist, "580", ["nvidia-open-580.*"]) == [
        "kmod-nvidia-latest-dkms-580.*"
    ]
    # following the newest branch: all driver locks go
    assert "nginx-1.24.*" not in N.stale_versionlock_entries(locklist, "")


# --------------------------------------------------------------------------- planner filters
def test_plan_check_accepts_dict_or_kwargs_and_returns_the_plan_dict() -> None:
    a = F.plan_check({"torch": "2.13.0", "os": "rocky9", "gpu_archs": ["sm_80"], "variant": ""})
    b = F.plan_check("2.13.0", os="rocky9", gpu_archs="sm_80", driver="")
    assert a["refused"] is None and b["refused"] is None
    a, b = a["plan"], b["plan"]
    expected = make_plan(PlanRequest(torch="2.13.0", os="rocky9", gpu_archs=("sm_80",))).to_dict()
    assert a == b == expected
    for key in (
        "variant",
        "index_url",
        "toolkit_package",
        "toolkit_prefix",
        "driver_branch",
        "driver_branch_max",
        "driver_flavor",
        "min_driver",
        "el_major",
        "repo",
    ):
        assert key in a


def test_plan_check_refusal_carries_the_paragraph_verbatim() -> None:
    with pytest.raises(PlanRefused) as ref:
        make_plan(PlanRequest(torch="2.13.0", os="centos7"))
    assert "torch==2.6.0" in str(ref.value)  # the last versions that would work
    checked = F.plan_check({"torch": "2.13.0", "os": "centos7"})
    assert checked == {"plan": None, "refused": str(ref.value)}


@pytest.mark.parametrize(
    ("data", "kwargs", "words"),
    [
        ({"torch": "2.13.0", "cuda": "13.0"}, {}, "unknown input"),
        ({}, {"os": "rocky9"}, "torch version is required"),
        (42, {}, "input must be a dict"),
    ],
)
def test_plan_check_input_errors(data: Any, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(AnsibleFilterError, match=words):
        F.plan_check(data, **kwargs)


def test_gpus_from_lspci_keeps_gpus_only() -> None:
    gpus = F.gpus_from_lspci(LSPCI)
    assert [(g["pci"], g["arch"], g["family"]) for g in gpus] == [
        ("3b:00.0", "sm_80", "Ampere"),
        ("86:00.0", "sm_70", "Volta"),
    ]
    assert F.gpus_from_lspci(LSPCI.splitlines()) == gpus
    assert F.gpus_from_lspci("") == []


# --------------------------------------------------------------------------- preflight
def _obs(**kw: Any) -> dict[str, Any]:
    base = {
        "node": "gpu07",
        "target": osinfo.el_target("Rocky", "9", "x86_64"),
        "gpus": F.gpus_from_lspci(LSPCI),
        "allow_no_gpu": False,
        "gpu_archs_var": [],
        "kernel": "5.14.0-503.el9.x86_64",
        "kernel_devel": "available",
        "secure_boot": "disabled",
        "secure_boot_ok": False,
        "packaging": "dkms",
        "driver_required": True,
        "disks": [
            {
                "path": "/opt/gpufleet/env",
                "free_mb": 50000,
                "required_mb": 16384,
                "variable": "preflight_env_free_mb",
            }
        ],
    }
    base.update(kw)
    return base


def test_healthy_node_has_no_problems() -> None:
    assert P.preflight_problems(_obs()) == []


def test_failed_kernel_devel_query_quotes_dnf_and_is_not_called_missing() -> None:
    said = "Error: Repository 'gpufleet-base' is listed more than once in the configuration"
    (msg,) = P.preflight_problems(_obs(kernel_devel="error", kernel_devel_detail=said))
    assert msg.startswith("gpu07: the repository query for kernel-devel-5.14.0-503.el9.x86_64")
    assert "failed" in msg and "no kernel-devel" not in msg
    assert msg.endswith(f"(dnf said: {said})")
    (missing,) = P.preflight_problems(
        _obs(kernel_devel="missing", kernel_devel_detail="Warning: repo x skipped")
    )
    assert "no kernel-devel for the running kernel" in missing
    assert "(dnf said: Warning: repo x skipped)" in missing
    assert P.preflight_problems(_obs(kernel_devel="error", packaging="precompiled")) == []


@pytest.mark.parametrize(
    ("kw", "variable", "words"),
    [
        ({"gpus": []}, "gpufleet_allow_no_gpu", "no NVIDIA GPU"),
        ({"secure_boot": "enabled"}, "preflight_secure_boot_ok", "Secure Boot is enabled"),
        ({"kernel_devel": "missing"}, "gpufleet_base_repo_baseurl", "kernel-devel"),
        (
            {
                "disks": [
                    {
                        "path": "/usr/local",
                        "free_mb": 100,
                        "required_mb": 10240,
                        "variable": "preflight_toolkit_free_mb",
                    }
                ]
            },
            "preflight_toolkit_free_mb",
            "100 MiB free",
        ),
        (
            {"gpus": [{"pci": "01:00.0", "name": "Device 2bb1", "arch": None}]},
            "gpufleet_gpu_archs",
            "not known",
        ),
        (
            {"plan_error": "Refused: torch 2.15.0 ..."},
            "gpufleet_torch_version / gpufleet_cuda_variant / gpufleet_python_version",
            "planner refused",
        ),
        (
            {"choice_error": {"variable": "nvidia_driver_branch", "message": "too new"}},
            "nvidia_driver_branch",
            "too new",
        ),
        (
            {"target": osinfo.el_target("Debian", "12", "x86_64")},
            "ansible_distribution",
            "not Enterprise Linux",
        ),
    ],
)
def test_each_problem_names_node_variable_and_fix(
    kw: dict[str, Any], variable: str, words: str
) -> None:
    problems = P.preflight_problems(_obs(**kw))
    assert len(problems) == 1, problems
    msg = problems[0]
    assert msg.startswith("gpu07: ") and f"[{variable}]" in msg and words in msg
    assert "-> fix:" in msg


@pytest.mark.parametrize(
    "kw",
    [
        {"gpus": [], "allow_no_gpu": True},
        {"gpus": [], "gpu_archs_var": ["sm_80"]},
        {"secure_boot": "enabled", "secure_boot_ok": True},
        {"secure_boot": "enabled", "packaging": "precompiled"},
        {"kernel_devel": "missing", "packaging": "precompiled"},
        {"kernel_devel": "missing", "driver_required": False},
        {"secure_boot": "unsupported"},
    ],
)
def test_accepted_situations(kw: dict[str, Any]) -> None:
    assert P.preflight_problems(_obs(**kw)) == []


def test_several_problems_are_reported_together() -> None:
    problems = P.preflight_problems(_obs(gpus=[], secure_boot="enabled", kernel_devel="missing"))
    assert len(problems) == 3


def test_el7_gets_the_planner_answer() -> None:
    refused = F.plan_check({"torch": "2.13.0", "os": "centos7"})["refused"]
    problems = P.preflight_problems(
        {
            "node": "old01",
            "target": osinfo.el_target("CentOS", "7", "x86_64"),
            "plan_error": refused,
        }
    )
    assert len(problems) == 2
    assert "end of life" in problems[0]
    assert "torch==2.6.0" in problems[1] and problems[1].startswith("old01: ")


def test_disk_rows_from_the_probe_sections() -> None:
    sections = P.probe_sections(
        "noise before the first mark\n"
        "@@gpufleet-probe lspci\n01:00.0 3D controller [0302]: NVIDIA [10de:2330]\n"
        "@@gpufleet-probe df preflight_env_free_mb\n20480\n"
        "@@gpufleet-probe df v\n"
    )
    assert sections == {
        "lspci": "01:00.0 3D controller [0302]: NVIDIA [10de:2330]",
        "df preflight_env_free_mb": "20480",
        "df v": "",
    }
    rows = P.disk_rows(
        [
            {"path": "/opt", "required_mb": "16384", "variable": "preflight_env_free_mb"},
            {"path": "/x", "required_mb": 1, "variable": "v"},
            {"path": "/y", "required_mb": 1, "variable": "not_probed"},
        ],
        sections,
    )
    assert rows == [
        {
            "path": "/opt",
            "required_mb": 16384,
            "variable": "preflight_env_free_mb",
            "free_mb": 20480,
        },
        {"path": "/x", "required_mb": 1, "variable": "v", "free_mb": None},
        {"path": "/y", "required_mb": 1, "variable": "not_probed", "free_mb": None},
    ]


def test_bisect_filters_plan_rounds_from_the_history() -> None:
    f = V.FilterModule().filters()
    nodes = ["a", "b", "c", "d", "e"]
    assert f["bisect_groups"](nodes, []) == [["a", "b", "c"], ["d", "e"]]
    first = [{"nodes": ["a", "b", "c"], "passed": True}, {"nodes": ["d", "e"], "passed": False}]
    assert f["bisect_groups"](nodes, [first]) == [["d", "a"], ["e", "b"]]
    assert f["bisect_max_rounds"](nodes) == 4


@pytest.mark.parametrize("bad", ["node1", ["node1", 2], [None]])
def test_bisect_filters_refuse_what_is_not_a_list_of_names(bad: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="needs a list of node names"):
        V.FilterModule().filters()["bisect_groups"](bad)


def test_bisect_groups_resolves_by_its_fqcn_in_a_play(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n"
        "        msg: \"ROUND={{ ['n1', 'n2', 'n3', 'n4'] | gpufleet.core.bisect_groups([])"
        ' | to_json }}"\n'
    )
    run = ansible_playbook(play)
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(x for x in run.stdout.splitlines() if "ROUND=" in x)
    groups = json.loads(line.split("ROUND=", 1)[1].rstrip('"').replace('\\"', '"'))
    assert groups == [["n1", "n2"], ["n3", "n4"]]


# --------------------------------------------------------------------------- one source
@pytest.mark.parametrize(
    ("dist", "release", "os", "name"),
    [
        ("alma", "", "almalinux9", "AlmaLinux"),
        ("AlmaLinux", "", "almalinux9", "AlmaLinux"),
        ("oracle", "", "ol9", "Oracle Linux"),
        ("OracleLinux", "", "ol9", "Oracle Linux"),
        ("rockylinux", "", "rocky9", "Rocky Linux"),
        ("Rocky Linux", "", "rocky9", "Rocky Linux"),
        ("RedHat", "", "rhel9", "Red Hat Enterprise Linux"),
        ("CentOS", "Stream", "centos9", "CentOS Stream"),
    ],
)
def test_el_target_and_the_planner_read_one_name_table(
    dist: str, release: str, os: str, name: str
) -> None:
    # The roles classify the node with el_target, then hand its `os` to the planner:
    # both read osinfo.DISTRIBUTIONS, so every name one accepts the other accepts too.
    t = F.el_target_filter(dist, "9", "x86_64", release)
    assert t["supported"] and (t["os"], t["name"]) == (os, name)
    assert osinfo.parse_os(dist + "9").name == name
    assert str(osinfo.parse_os(t["os"])) == f"{name} 9"
    assert F.plan_check({"torch": "2.13.0", "os": t["os"]})["plan"]["os_name"] == f"{name} 9"


def test_supported_majors_and_el7_reasons_come_from_compat() -> None:
    from gpufleet.planning.compat import load

    assert osinfo.supported_majors() == (8, 9, 10)
    t = osinfo.el_target("CentOS", "7", "x86_64")
    assert load().el[7].why_unsupported in t["refusals"][0]


def test_driver_choice_reads_the_open_modules_floor_from_compat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from gpufleet.planning import compat

    plan = _plan("open", "580", archs=("sm_80",))
    assert N.driver_choice(plan, 9)["flavor"] == "open"
    data = compat.load()
    raised = dataclasses.replace(
        data, policy=dataclasses.replace(data.policy, open_modules_min_cc="8.6")
    )
    monkeypatch.setattr(compat, "load", lambda: raised)
    monkeypatch.setattr("gpufleet.planning.gpuarch.load", lambda: raised)
    monkeypatch.setattr("gpufleet.planning.driver_choice.load", lambda: raised)
    with pytest.raises(N.ChoiceError, match=r"support sm_86 \(compute capability 8.6\)"):
        N.driver_choice(plan, 9)
    assert N.driver_choice(_plan(None, "580", archs=("sm_80",)), 9)["flavor"] == "proprietary"


def test_driver_choice_takes_the_plan_object_or_its_dict() -> None:
    real = make_plan(PlanRequest(torch="2.13.0", os="rocky9", gpu_archs=("sm_90a",)))
    assert Plan.from_dict(real.to_dict()) == real
    assert N.driver_choice(real, 9) == F.nvidia_driver_choice(real.to_dict(), 9)
    with pytest.raises(AnsibleFilterError, match="not a gpufleet plan"):
        F.nvidia_driver_choice({"driver_flavor": "open"}, 9)


@pytest.mark.parametrize(
    "archs", ["sm_80,sm_90", "sm_80 sm_90", " sm_80, sm_90 ", ["sm_80", "sm_90"]]
)
def test_plan_check_and_plan_request_normalise_alike(archs: Any) -> None:
    direct = make_plan(PlanRequest.from_mapping({"torch": "2.13.0", "gpu_archs": archs}))
    assert F.plan_check("2.13.0", gpu_archs=archs)["plan"] == direct.to_dict()
    assert direct.gpu_archs == ["sm_80", "sm_90"]


def test_verify_tier_gives_the_steps_and_budget() -> None:
    quick = V.verify_tier("quick", "30m")
    assert (quick["cluster"], quick["budget_s"], quick["duration_s"]) == (False, 60, 0)
    burn = V.verify_tier("burnin", "2m")
    assert burn["burnin"] and burn["duration_s"] == 120 and burn["budget_s"] > 120


def test_verify_tier_refusals_name_the_variable() -> None:
    tier = V.FilterModule().filters()["verify_tier"]
    with pytest.raises(AnsibleFilterError, match="verify_burnin_duration='2x' is refused"):
        tier("burnin", "2x")
    with pytest.raises(AnsibleFilterError, match="verify_tier='fast'"):
        tier("fast")


def test_pair_kinds_name_each_pairs_file_and_its_first_node() -> None:
    rounds = V.pair_rounds(["a", "b", "c"])
    assert V.pair_kinds(rounds, "ibbw") == {"ibbw-1-0": ["a"], "ibbw-2-0": ["b"], "ibbw-3-0": ["c"]}


def test_nvidia_smi_problems_read_the_driver_version() -> None:
    smi = "0, NVIDIA H100 80GB HBM3, 580.95.05\n"
    assert F.nvidia_smi_problems(smi, "n1", "580.95.05", "580", "525.60.13") == []
    (msg,) = F.nvidia_smi_problems(smi, "n1", "590.44.01", None, None)
    assert "installed module is 590.44.01" in msg
