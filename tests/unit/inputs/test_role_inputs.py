"""gpufleet.inputs.role_inputs: the value checks behind every role's check_inputs entry point, and
plugin_utils.rolefiles, the role files gpufleet.core.check_inputs reads once per process.
(The whole layer, argument specs included, runs through Ansible in
tests/integration/test_bad_input.py: 110+ bad inputs, each refused before any change.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from gpufleet.inputs import role_inputs as inputcheck
from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.plugin_utils import rolefiles  # noqa: E402

GOOD_VERSIONS = {
    "preflight_torch_version": "2.13.0",
    "preflight_cuda_variant": "",
    "preflight_python_version": "3.11",
}
GOOD_NETWORK = {
    "cluster_network_cidr": "10.0.0.0/24",
    "cluster_network_address": "",
    "cluster_network_group": "gpu_nodes",
}
GROUPS = {"all": ["n1"], "ungrouped": [], "gpu_nodes": ["n1"], "login": []}


def test_own_names_default_to_the_role_prefix_and_the_listed_extras() -> None:
    names = [
        "torch_env_a",
        "torch_envx",
        "gpufleet_slurm_node_name",
        "verify_iters",
        "slurm_health_x",
    ]
    assert inputcheck.own_names("torch_env", names) == ["torch_env_a"]
    assert inputcheck.own_names("verify", names) == ["gpufleet_slurm_node_name", "verify_iters"]
    assert inputcheck.own_names("slurm_health", names) == [
        "gpufleet_slurm_node_name",
        "slurm_health_x",
    ]


def test_good_versions_pass() -> None:
    assert inputcheck.preflight_version_problems(GOOD_VERSIONS, "n1") == []
    assert (
        inputcheck.preflight_version_problems(
            {**GOOD_VERSIONS, "preflight_cuda_variant": "cpu"}, "n1"
        )
        == []
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"preflight_torch_version": "2.x"}, ["n1: gpufleet_torch_version=2.x", "write X.Y.Z"]),
        ({"preflight_torch_version": 2.13}, ["gpufleet_torch_version=2.13 ", "write X.Y.Z"]),
        ({"preflight_cuda_variant": "gpu"}, ["gpufleet_cuda_variant=gpu", "cuXXX such as cu126"]),
        ({"preflight_python_version": "3"}, ["gpufleet_python_version=3 ", "write 3.X"]),
        ({"preflight_python_version": "3.11.2"}, ["gpufleet_python_version=3.11.2", "write 3.X"]),
    ],
)
def test_malformed_versions_are_named_and_the_planner_is_not_asked(
    change: dict[str, object], words: list[str]
) -> None:
    problems = inputcheck.preflight_version_problems({**GOOD_VERSIONS, **change}, "n1")
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0]
    assert "cannot work on any node" not in problems[0]


def test_versions_no_node_can_take_carry_the_planners_words() -> None:
    problems = inputcheck.preflight_version_problems(
        {**GOOD_VERSIONS, "preflight_cuda_variant": "cu118"}, "n1"
    )
    assert len(problems) == 1
    assert problems[0].startswith("n1: gpufleet_torch_version=2.13.0, gpufleet_cuda_variant=cu118")
    assert "cannot work on any node -> " in problems[0] and "cu126" in problems[0]
    empty = inputcheck.preflight_version_problems(
        {**GOOD_VERSIONS, "preflight_torch_version": "9.9.9"}, "n1"
    )
    assert 'gpufleet_cuda_variant="",' in empty[0], empty


def test_a_good_network_passes() -> None:
    assert inputcheck.cluster_network_problems(GOOD_NETWORK, "n1", GROUPS) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"cluster_network_cidr": "banana"}, ["n1: ", "cluster_network_cidr", "banana"]),
        ({"cluster_network_cidr": "10.0.0.1/24"}, ["cluster_network_cidr", "10.0.0.0/24"]),
        ({"cluster_network_address": "10.0.0"}, ["cluster_network_address", "IPv4 or IPv6"]),
        (
            {"cluster_network_group": "gpus"},
            ["cluster_network_group=gpus", "one of gpu_nodes, login"],
        ),
        ({"cluster_network_group": ["gpu_nodes"]}, ["cluster_network_group=['gpu_nodes']"]),
    ],
)
def test_a_bad_network_value_is_named(change: dict[str, object], words: list[str]) -> None:
    problems = inputcheck.cluster_network_problems({**GOOD_NETWORK, **change}, "n1", GROUPS)
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0], problems


def test_value_problems_joins_the_boundary_and_the_role_checks() -> None:
    values = {**GOOD_VERSIONS, "preflight_torch_version": "2.x", "preflight_env_free_mb": -1}
    problems = inputcheck.value_problems("preflight", values, "n1", GROUPS)
    assert any("preflight_env_free_mb=-1" in p for p in problems), problems
    assert any("write X.Y.Z" in p for p in problems), problems
    assert all(p.startswith("n1: ") for p in problems)
    # a role without extra checks: the boundary alone, on its own variables only
    assert inputcheck.value_problems("dcgm", {"preflight_env_free_mb": -1}, "n1", GROUPS) == []


# --- rolefiles -------------------------------------------------------------------------


def test_role_files_are_parsed_once_and_again_when_they_change(tmp_path: Path) -> None:
    f = tmp_path / "defaults" / "main.yml"
    f.parent.mkdir()
    f.write_text("a: 1\nb: '{{ a }}'\n", encoding="utf-8")
    first = rolefiles.load(f)
    assert first == {"a": 1, "b": "{{ a }}"}
    assert rolefiles.load(f) is first  # cached
    f.write_text("a: 2\nb: '{{ a }}'\n", encoding="utf-8")
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert rolefiles.load(f) == {"a": 2, "b": "{{ a }}"}
    assert rolefiles.load(tmp_path / "missing.yml") is None


def test_defaults_are_marked_as_templates_and_other_files_are_not(tmp_path: Path) -> None:
    from ansible.template import is_trusted_as_template

    f = tmp_path / "main.yml"
    f.write_text("x: '{{ y }}'\nl: ['{{ z }}']\n", encoding="utf-8")
    trusted = rolefiles.load(f, templates=True)
    assert rolefiles.load(f, templates=True) is trusted  # marked once, then cached
    assert is_trusted_as_template(trusted["x"]) and is_trusted_as_template(trusted["l"][0])
    assert not is_trusted_as_template(rolefiles.load(f)["x"])


def test_yaml_only_ansible_reads_is_left_to_its_loader(tmp_path: Path) -> None:
    f = tmp_path / "main.yml"
    f.write_text("x: !unsafe '{{ y }}'\n", encoding="utf-8")
    with pytest.raises(yaml.YAMLError):
        rolefiles.load(f)


def test_warm_parses_the_files_of_every_role(tmp_path: Path) -> None:
    repo_roles = Path(__file__).resolve().parents[3] / "roles"
    count = rolefiles.warm([repo_roles, tmp_path / "absent"])
    roles = [p for p in repo_roles.iterdir() if p.is_dir()]
    expected = sum((r / n).is_file() for r in roles for n in rolefiles.ROLE_FILES)
    assert count == expected and count >= 3 * (len(roles) - 1)
