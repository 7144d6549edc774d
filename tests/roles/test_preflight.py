"""The whole preflight role on a node that looks like Rocky 9 (os-release file and facts from a
test module), with scripted dnf/rpm on PATH for the kernel-devel query. One ansible-playbook
run executes every case in a block/rescue; a last run repeats the good case in check mode."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from roles_driver_helpers import FAKES, ansible_playbook, fake_pm, pkg, write_results_task

KERNEL = "5.14.0-503.el9.x86_64"
OS_RELEASE = 'NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.5"\n'
GOOD = {"gpufleet_allow_no_gpu": True}
HUGE = {**GOOD, "preflight_env_free_mb": 9999999, "preflight_toolkit_free_mb": 9999999}

# id: (vars, words in the failure message; None = must pass)
CASES: dict[str, tuple[dict[str, Any], list[str] | None]] = {
    "no_gpu_refused": ({}, ["[gpufleet_allow_no_gpu]", "no NVIDIA GPU"]),
    "no_gpu_allowed": (GOOD, None),
    "kernel_devel_missing": (
        {**GOOD, "__test_kernel": "5.14.0-1.el9.x86_64"},
        ["[gpufleet_base_repo_baseurl]", "kernel-devel", "5.14.0-1.el9.x86_64"],
    ),
    # nvidia_driver wrote gpufleet-base.repo (the fake state has it): the probe must not
    # clash with it (issue 17: every rerun after an interrupted provision failed here)
    "kernel_devel_from_mirror_next_to_role_repo": (
        {**GOOD, "gpufleet_base_repo_baseurl": "http://mirror.example/baseos"},
        None,
    ),
    "kernel_devel_query_error_quoted": (
        {**GOOD, "gpufleet_base_repo_baseurl": "http://unreachable.example/baseos"},
        [
            "[gpufleet_base_repo_baseurl]",
            "query for kernel-devel-" + KERNEL + " failed",
            "dnf said: Error: Failed to download metadata",
        ],
    ),
    "open_on_pascal_refused": (
        {**GOOD, "gpufleet_gpu_archs": ["sm_60"], "nvidia_driver_flavor": "open"},
        ["[nvidia_driver_flavor]", "pre-Turing"],
    ),
    "branch_above_max_refused": (
        {**GOOD, "gpufleet_gpu_archs": ["sm_70"], "nvidia_driver_branch": "590"},
        ["[nvidia_driver_branch]", "newer than 580"],
    ),
    "planner_refusal_verbatim": (
        {**GOOD, "gpufleet_torch_version": "2.15.0", "gpufleet_gpu_archs": ["sm_60"]},
        ["the planner refused this node: Refused:", "[gpufleet_torch_version"],
    ),
    "disk_too_small": (
        {**GOOD, "preflight_env_free_mb": 9999999},
        ["[preflight_env_free_mb]", "MiB free"],
    ),
    "precompiled_el9_ok": ({**GOOD, "nvidia_driver_packaging": "precompiled"}, None),
    # free space counts only what is still to be installed (issue 17): the env holds the
    # planned torch build and the toolkit package is installed -> no space needed
    "noop_repair_needs_no_space": (
        {**HUGE, "__test_env": "2.13.0+cu130"},
        None,
    ),
    "other_torch_build_still_needs_space": (
        {**HUGE, "__test_env": "2.12.0+cu130"},
        ["[preflight_env_free_mb]", "MiB free"],
    ),
}


def _facts(kernel: str) -> dict[str, str]:
    return {
        "distribution": "Rocky",
        "distribution_major_version": "9",
        "distribution_version": "9.5",
        "distribution_release": "Blue Onyx",
        "architecture": "x86_64",
        "kernel": kernel,
        "os_family": "RedHat",
    }


def _play(tmp: Path, bindir: Path, state: Path, cases: dict[str, Any], out: Path) -> Path:
    osr = tmp / "os-release"
    osr.write_text(OS_RELEASE, encoding="utf-8")
    tasks: list[dict[str, Any]] = [{"name": "start", "ansible.builtin.set_fact": {"r": {}}}]
    for cid, (case_vars, _) in cases.items():
        vars_ = dict(case_vars)
        kernel = vars_.pop("__test_kernel", KERNEL)
        torch_build = vars_.pop("__test_env", None)
        if torch_build:  # an env that holds this torch build (metadata only)
            env = tmp / f"env-{cid}"
            (env / "lib/python3.11/site-packages" / f"torch-{torch_build}.dist-info").mkdir(
                parents=True
            )
            (env / "bin").mkdir()
            (env / "bin/python").symlink_to(os.path.realpath(sys.executable))
            vars_["preflight_env_prefix"] = str(env)
        tasks.append(
            {
                "name": f"case {cid}",
                "block": [
                    {"name": f"{cid} facts", "gpufleet_test_facts": {"facts": _facts(kernel)}},
                    {"name": f"{cid} forget", "ansible.builtin.set_fact": {"gpufleet_plan": None}},
                    {
                        "name": f"{cid} role",
                        "ansible.builtin.include_role": {"name": "preflight"},
                        "vars": {"python_bootstrap_os_release_file": str(osr), **vars_},
                    },
                    {
                        "name": f"{cid} ok",
                        "ansible.builtin.set_fact": {
                            "r": "{{ r | combine({'" + cid + "': {'ok': gpufleet_plan}}) }}"
                        },
                    },
                ],
                "rescue": [
                    {
                        "name": f"{cid} failed",
                        "ansible.builtin.set_fact": {
                            "r": "{{ r | combine({'"
                            + cid
                            + "': {'failed': ansible_failed_result.msg "
                            "| default('?') | string}}) }}"
                        },
                    },
                ],
            }
        )
    tasks.append(write_results_task(out, check_mode=False))
    play = tmp / f"{out.stem}.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "environment": {
                        "PATH": f"{bindir}:{os.environ['PATH']}",
                        "FAKE_PM_STATE": str(state),
                    },
                    "tasks": tasks,
                }
            ],
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return play


def _env(bindir: Path) -> dict[str, str]:
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "ANSIBLE_LIBRARY": str(FAKES / "library")}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("preflight")
    kd = pkg(
        "kernel-devel", "5.14.0", release="503.el9", provides=[f"kernel-devel-uname-r = {KERNEL}"]
    )
    toolkit = pkg("cuda-toolkit-13-0", "13.0.2")
    bindir, state = fake_pm(
        tmp, {"available": [kd], "installed": [toolkit], "repos": {"gpufleet-base": True}}
    )
    out = tmp / "outcomes.json"
    res = ansible_playbook(_play(tmp, bindir, state, CASES, out), env=_env(bindir), timeout=900)
    assert res.returncode == 0, res.stdout[-5000:]
    data: dict[str, dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return data


@pytest.mark.ansible
@pytest.mark.slow
@pytest.mark.parametrize("cid", list(CASES))
def test_preflight_case(outcomes: dict[str, dict[str, Any]], cid: str) -> None:
    _, words = CASES[cid]
    got = outcomes[cid]
    if words is None:
        assert "ok" in got, got
    else:
        assert "failed" in got, f"{cid}: accepted: {got}"
        msg = got["failed"]
        for w in words:
            assert w in msg, f"{cid}: {w!r} not in {msg!r}"
        assert msg.startswith("localhost: ")
        assert all(line.startswith("localhost: ") for line in msg.splitlines())


@pytest.mark.ansible
@pytest.mark.slow
def test_preflight_sets_the_plan_from_the_planner(outcomes: dict[str, dict[str, Any]]) -> None:
    plan = outcomes["no_gpu_allowed"]["ok"]
    assert plan["torch"] == "2.13.0" and plan["variant"] == "cu130"
    assert plan["toolkit_package"] == "cuda-toolkit-13-0" and plan["el_major"] == 9
    assert plan["os"] == "el9" and plan["repo"] == "rhel9"


@pytest.mark.ansible
@pytest.mark.slow
def test_preflight_in_check_mode_changes_nothing(tmp_path: Path) -> None:
    kd = pkg(
        "kernel-devel", "5.14.0", release="503.el9", provides=[f"kernel-devel-uname-r = {KERNEL}"]
    )
    bindir, state = fake_pm(tmp_path, {"available": [kd]})
    out = tmp_path / "check.json"
    play = _play(tmp_path, bindir, state, {"good": (GOOD, None)}, out)
    res = ansible_playbook(play, "--check", env=_env(bindir))
    assert res.returncode == 0, res.stdout[-5000:]
    assert "ok" in json.loads(out.read_text(encoding="utf-8"))["good"]
    m = re.search(r"changed=(\d+)", res.stdout)
    assert m and m.group(1) == "1"  # only the test's own result file (check_mode: false)
