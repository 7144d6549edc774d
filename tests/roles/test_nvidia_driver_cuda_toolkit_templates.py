"""Rendering of the CUDA repository file (nvidia_driver) and the CUDA profile script
(cuda_toolkit) with Ansible itself: the roles' own tasks compute the inputs, the roles'
templates are rendered into a temporary directory, and the results are parsed / sourced."""

from __future__ import annotations

import configparser
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from roles_driver_helpers import REPO, ansible_playbook

NVIDIA_FPR = "610C7B14E068A878070DA4E99CD0A493D42D0685"
PLAN = {
    "variant": "cu130",
    "cuda": "13.0",
    "toolkit_package": "cuda-toolkit-13-0",
    "toolkit_prefix": "/usr/local/cuda-13.0",
    "expected_build": "2.13.0+cu130",
}

REPO_CASES: dict[str, dict[str, Any]] = {
    "el9_default": {"gpufleet_target": {"el_major": 9, "repo_arch": "x86_64"}},
    "el8_sbsa": {"gpufleet_target": {"el_major": 8, "repo_arch": "sbsa"}},
    "el10_mirror": {
        "gpufleet_target": {"el_major": 10, "repo_arch": "x86_64"},
        "gpufleet_cuda_repo_baseurl": "http://mirror.lan:8080/cuda/repos///",
        "gpufleet_cuda_repo_gpgkey_url": "http://mirror.lan:8080/keys/testbed.asc",
        "gpufleet_cuda_repo_repo_gpgcheck": True,
    },
    # a private mirror's URL as users paste it: the credentials leave the URLs
    "el9_credentials": {
        "gpufleet_target": {"el_major": 9, "repo_arch": "x86_64"},
        "gpufleet_cuda_repo_baseurl": "https://site%40corp:s3cr%3At@mirror.lan/cuda/repos",
    },
}
PROFILE_CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "no_link": {"cuda_toolkit_link": False},
    "no_ld": {"cuda_toolkit_profile_ld_library_path": False},
}


def _play(out: Path) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    tmpl = REPO / "roles/nvidia_driver/templates/cuda.repo.j2"
    for cid, vars_ in REPO_CASES.items():
        tasks += [
            {
                "name": f"{cid} facts",
                "ansible.builtin.include_role": {
                    "name": "nvidia_driver",
                    "tasks_from": "cuda_repo_facts.yml",
                    "public": True,
                },
                "vars": vars_,
            },
            {
                "name": f"{cid} render",
                "ansible.builtin.template": {
                    "src": str(tmpl),
                    "dest": str(out / f"{cid}.repo"),
                    "mode": "0644",
                },
                "vars": vars_,
            },
        ]
    for cid, vars_ in PROFILE_CASES.items():
        tasks.append(
            {
                "name": f"profile {cid}",
                "ansible.builtin.include_role": {
                    "name": "cuda_toolkit",
                    "tasks_from": "profile.yml",
                },
                "vars": {
                    "gpufleet_plan": PLAN,
                    **vars_,
                    "__cuda_toolkit_profile_path": str(out / f"{cid}.sh"),
                },
            }
        )
    return [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    play = out / "play.yml"
    play.write_text(yaml.safe_dump(_play(out), sort_keys=False), encoding="utf-8")
    res = ansible_playbook(play)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    return out


def _repo(rendered: Path, cid: str) -> configparser.SectionProxy:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(rendered / f"{cid}.repo")
    (section,) = cp.sections()
    return cp[section]


@pytest.mark.ansible
def test_repo_file_el9_default(rendered: Path) -> None:
    r = _repo(rendered, "el9_default")
    assert r.name == "cuda-rhel9-x86_64"
    base = "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64"
    assert r["baseurl"] == base
    assert r["gpgkey"] == f"{base}/D42D0685.pub"
    assert (r["gpgcheck"], r["repo_gpgcheck"], r["enabled"]) == ("1", "0", "1")


@pytest.mark.ansible
def test_repo_file_aarch64_uses_sbsa(rendered: Path) -> None:
    r = _repo(rendered, "el8_sbsa")
    assert r.name == "cuda-rhel8-sbsa"
    assert r["baseurl"].endswith("/rhel8/sbsa")


@pytest.mark.ansible
def test_repo_file_mirror_and_key_variables(rendered: Path) -> None:
    r = _repo(rendered, "el10_mirror")
    assert r.name == "cuda-rhel10-x86_64"
    assert r["baseurl"] == "http://mirror.lan:8080/cuda/repos/rhel10/x86_64"
    assert r["gpgkey"] == "http://mirror.lan:8080/keys/testbed.asc"
    assert (r["gpgcheck"], r["repo_gpgcheck"]) == ("1", "1")


@pytest.mark.ansible
def test_repo_file_credentials_are_options_not_url_parts(rendered: Path) -> None:
    r = _repo(rendered, "el9_credentials")
    assert r["baseurl"] == "https://mirror.lan/cuda/repos/rhel9/x86_64"
    assert (r["username"], r["password"]) == ("site@corp", "s3cr:t")  # percent-decoded
    # the key is fetched with the credentials into a local file (signing_key.yml)
    assert r["gpgkey"] == "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-gpufleet-cuda"
    assert "s3cr" not in r["baseurl"] + r["gpgkey"]


@pytest.mark.ansible
def test_repo_files_never_disable_gpgcheck(rendered: Path) -> None:
    for cid in REPO_CASES:
        text = (rendered / f"{cid}.repo").read_text(encoding="utf-8")
        assert "gpgcheck=0" not in text.replace("repo_gpgcheck=0", "")


def _source(script: Path) -> dict[str, str]:
    cmd = (
        f"set -eu; PATH=/usr/bin:/bin; unset LD_LIBRARY_PATH; . {script}; . {script}; "
        'printf \'{"PATH":"%s","LD":"%s","CUDA_HOME":"%s"}\' "$PATH" "${LD_LIBRARY_PATH:-}" '
        '"$CUDA_HOME"'
    )
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout
    data: dict[str, str] = json.loads(out)
    return data


@pytest.mark.ansible
def test_profile_script_bin_and_lib64_once(rendered: Path) -> None:
    env = _source(rendered / "default.sh")
    assert env["PATH"] == "/usr/local/cuda/bin:/usr/bin:/bin"  # sourced twice, added once
    assert env["LD"] == "/usr/local/cuda/lib64"
    assert env["CUDA_HOME"] == "/usr/local/cuda"
    text = (rendered / "default.sh").read_text(encoding="utf-8")
    assert "/lib:" not in text and 'cuda/lib"' not in text  # lib64, not lib


@pytest.mark.ansible
def test_profile_script_without_link_uses_the_prefix(rendered: Path) -> None:
    env = _source(rendered / "no_link.sh")
    assert env["PATH"].startswith("/usr/local/cuda-13.0/bin:")
    assert env["LD"] == "/usr/local/cuda-13.0/lib64"


@pytest.mark.ansible
def test_profile_script_can_leave_ld_library_path_alone(rendered: Path) -> None:
    env = _source(rendered / "no_ld.sh")
    assert env["LD"] == ""
    assert "LD_LIBRARY_PATH" not in (rendered / "no_ld.sh").read_text(encoding="utf-8")


def test_default_fingerprint_is_nvidias_d42d0685_key() -> None:
    defaults = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert (
        "gpufleet_cuda_repo_gpgkey_fingerprint"
        in defaults["nvidia_driver_cuda_repo_gpgkey_fingerprint"]
    )
    shared = yaml.safe_load((REPO / "roles/gpufleet_common/defaults/main.yml").read_text())
    assert shared["gpufleet_cuda_repo_gpgkey_fingerprint"] == NVIDIA_FPR
    assert NVIDIA_FPR.endswith("D42D0685") and len(NVIDIA_FPR) == 40
