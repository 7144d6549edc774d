"""The entry of python_bootstrap, preflight, nvidia_driver and cuda_toolkit when run as roles:
a missing plan is refused naming the role to run first, a CPU plan or a disabled install is a
clean no-op, and an unsupported OS is refused by the role itself. (Bad values of variables are
the one bad-input table's job: tests/integration/test_bad_input.py.)

One ansible-playbook run against localhost executes every case in its own block/rescue and
writes what each case ended with (the failure message, or NO-ERROR); the tests read that file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from roles_driver_helpers import ansible_playbook, write_results_task

PLAN = {
    "torch": "2.13.0",
    "variant": "cu130",
    "cuda": "13.0",
    "toolkit_package": "cuda-toolkit-13-0",
    "toolkit_prefix": "/usr/local/cuda-13.0",
    "min_driver": "580",
    "driver_branch": "580",
    "driver_branch_max": None,
    "driver_flavor": "open",
    "gpu_archs": ["sm_80"],
    "expected_build": "2.13.0+cu130",
}
CPU_PLAN = {
    **PLAN,
    "variant": "cpu",
    "cuda": None,
    "toolkit_package": None,
    "toolkit_prefix": None,
    "driver_branch": None,
    "driver_flavor": None,
}
EL7 = {
    "ID": "centos",
    "VERSION_ID": "7",
    "NAME": "CentOS Linux",
    "GPUFLEET_ARCH": "x86_64",
    "GPUFLEET_KERNEL": "3.10.0-1160.el7.x86_64",
}

# id: (role, vars, words that must all appear in the message; None = must succeed)
CASES: dict[str, tuple[str, dict[str, Any], list[str] | None]] = {
    "driver_needs_plan": (
        "nvidia_driver",
        {"gpufleet_plan": None},
        ["gpufleet_plan is not set", "preflight"],
    ),
    "driver_disabled_ok": ("nvidia_driver", {"nvidia_driver_install": False}, None),
    "driver_cpu_plan_ok": ("nvidia_driver", {"gpufleet_plan": CPU_PLAN}, None),
    "preflight_refuses_non_el": (
        "preflight",
        {},
        ["localhost:", "not Enterprise Linux", "[ansible_distribution]"],
    ),
    "preflight_refuses_el7": (
        "preflight",
        {"gpufleet_os_release": EL7},
        [
            "localhost:",
            "end of life",
            "glibc",
            "ansible-core",
            "torch==2.6.0",
            "[gpufleet_torch_version]",
        ],
    ),
    "toolkit_cpu_skips": ("cuda_toolkit", {"gpufleet_plan": CPU_PLAN}, None),
    "toolkit_needs_plan": ("cuda_toolkit", {"gpufleet_plan": None}, ["gpufleet_plan is not set"]),
    "bootstrap_refuses_non_el": (
        "python_bootstrap",
        {},
        ["localhost:", "not Enterprise Linux", "[ansible_distribution]"],
    ),
    "bootstrap_refuses_el7_with_planner_answer": (
        "python_bootstrap",
        {"python_bootstrap_os_release_file": "__EL7__"},
        ["end of life", "torch==2.6.0", "[gpufleet_torch_version]"],
    ),
    "bootstrap_non_el_untouched_on_request": (
        "python_bootstrap",
        {"python_bootstrap_refuse_unsupported": False},
        None,
    ),
}


def _play(out: Path) -> list[dict[str, Any]]:
    el7 = out.parent / "os-release-el7"
    el7.write_text('NAME="CentOS Linux"\nID="centos"\nVERSION_ID="7"\n', encoding="utf-8")
    tasks: list[dict[str, Any]] = [{"name": "start", "ansible.builtin.set_fact": {"r": {}}}]
    for cid, (role, vars_, _) in CASES.items():
        role_vars = {"gpufleet_plan": PLAN, **vars_}
        if role_vars.get("python_bootstrap_os_release_file") == "__EL7__":
            role_vars["python_bootstrap_os_release_file"] = str(el7)
        if role_vars["gpufleet_plan"] is None:
            del role_vars["gpufleet_plan"]
        tasks.append(
            {
                "name": f"case {cid}",
                "block": [
                    {
                        "name": f"{cid} role",
                        "ansible.builtin.include_role": {"name": role},
                        "vars": role_vars,
                    },
                    {
                        "name": f"{cid} ok",
                        "ansible.builtin.set_fact": {
                            "r": "{{ r | combine({'" + cid + "': 'NO-ERROR'}) }}"
                        },
                    },
                ],
                "rescue": [
                    {
                        "name": f"{cid} failed",
                        "ansible.builtin.set_fact": {
                            "r": "{{ r | combine({'" + cid + "': ansible_failed_result.msg "
                            "| default('?') | string}) }}"
                        },
                    },
                ],
            }
        )
    tasks.append(write_results_task(out))
    return [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("specs")
    out = tmp / "outcomes.json"
    play = tmp / "specs.yml"
    play.write_text(yaml.safe_dump(_play(out), sort_keys=False), encoding="utf-8")
    res = ansible_playbook(play, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    data: dict[str, str] = json.loads(out.read_text(encoding="utf-8"))
    return data


@pytest.mark.ansible
@pytest.mark.parametrize("cid", list(CASES))
def test_case(outcomes: dict[str, str], cid: str) -> None:
    _, _, words = CASES[cid]
    msg = outcomes[cid]
    if words is None:
        assert msg == "NO-ERROR"
    else:
        assert msg != "NO-ERROR", f"{cid}: bad input was accepted"
        for w in words:
            assert w in msg, f"{cid}: {w!r} not in {msg!r}"
