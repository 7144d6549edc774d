"""gpufleet.inputs.role_inputs: the value checks behind every role's check_inputs entry point, and
plugin_utils.rolefiles, the role files gpufleet.core.check_inputs reads once per process.
(The whole layer, argument specs included, runs through Ansible in
tests/integration/test_bad_input.py: 110+ bad inputs, each refused before any change.)"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from gpufleet.inputs import role_inputs as inputcheck
from gpufleet.inputs.boundary import Origin
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
REPO = Path(__file__).resolve().parents[3]
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


def test_the_cluster_address_is_the_boundarys() -> None:
    values = {**GOOD_NETWORK, "cluster_network_address": "10.0.0"}
    (problem,) = inputcheck.value_problems("cluster_network", values, "n1", GROUPS)
    assert problem.startswith("n1: cluster_network_address='10.0.0' is refused")
    assert "IPv4 or IPv6" in problem and "is not an IP address" in problem


# --- names as the user wrote them --------------------------------------------------------

DEFAULTS = {
    "gpufleet_cluster_cidr": "10.0.0.0/24",
    "gpufleet_state_dir": "/var/lib/gpufleet",
    "gpufleet_torch_version": "2.13.0",
    "cluster_network_cidr": "{{ gpufleet_cluster_cidr }}",
    "cluster_network_group": "gpu_nodes",
    "verify_work_dir": "{{ gpufleet_state_dir }}/runs",
    "verify_probe_port": 29499,
    "preflight_torch_version": "{{ gpufleet_torch_version }}",
    "torch_env_python_version": "{{ gpufleet_plan.python | default(gpufleet_python_version) }}",
}


def origins(given: Mapping[str, object], values: Mapping[str, object]) -> dict[str, Origin]:
    return inputcheck.origins_of(DEFAULTS, given, sorted(values), values.get)


def test_origins_come_from_the_role_defaults() -> None:
    values = {"cluster_network_cidr": "0.0.0.0/0", "verify_work_dir": "/tmp/runs",
              "verify_probe_port": 29499, "gpufleet_state_dir": "/tmp",
              "torch_env_python_version": "3.11"}  # fmt: skip
    found = origins({"gpufleet_cluster_cidr": "0.0.0.0/0", "gpufleet_state_dir": "/tmp"}, values)
    assert found["cluster_network_cidr"] == Origin(
        (("gpufleet_cluster_cidr", "0.0.0.0/0"),), exact=True
    )
    assert found["verify_work_dir"] == Origin((("gpufleet_state_dir", "/tmp"),))
    assert found["verify_probe_port"] == Origin()  # a plain default
    # gpufleet_plan is a fact, not a shared variable of the defaults
    assert found["torch_env_python_version"] == Origin()
    assert "gpufleet_state_dir" not in found  # not a role default here, set by the user


def test_a_role_variable_the_user_set_is_no_default() -> None:
    given = {
        "cluster_network_cidr": "0.0.0.0/0",
        "verify_work_dir": "{{ gpufleet_state_dir }}/runs",
    }
    found = origins(given, {"cluster_network_cidr": "0.0.0.0/0", "verify_work_dir": "/x/runs"})
    assert "cluster_network_cidr" not in found
    # a task inside the role sees its raw defaults: still the default
    assert found["verify_work_dir"].sources == (("gpufleet_state_dir", None),)


def test_a_refusal_names_the_shared_variable_that_fed_the_role_variable() -> None:
    values = {**GOOD_NETWORK, "cluster_network_cidr": "0.0.0.0/0"}
    fed = origins({}, values)
    problems = inputcheck.value_problems("cluster_network", values, "n1", GROUPS, fed)
    assert problems == [
        "n1: gpufleet_cluster_cidr='0.0.0.0/0' (feeds cluster_network_cidr) is refused -> "
        "allowed: a prefix of /16 or narrower: /0 opens the cluster ports (every port with "
        "restrict_ports false) to 4294967296 addresses; set "
        "cluster_network_allow_wide_sources: true to accept that"
    ]
    # set by the user: named as such
    mine = origins({"cluster_network_cidr": "0.0.0.0/0"}, values)
    (problem,) = inputcheck.value_problems("cluster_network", values, "n1", GROUPS, mine)
    assert problem.startswith("n1: cluster_network_cidr='0.0.0.0/0' is refused")


def test_a_derived_default_names_the_shared_variable_and_the_value_it_gave() -> None:
    values = {"verify_work_dir": "/tmp/runs"}
    fed = inputcheck.origins_of(
        DEFAULTS, {}, ["verify_work_dir"], {"gpufleet_state_dir": "/tmp"}.get
    )
    (problem,) = inputcheck.value_problems("verify", values, "n1", GROUPS, fed)
    assert problem.startswith(
        "n1: gpufleet_state_dir='/tmp' (feeds verify_work_dir='/tmp/runs') is refused"
    )


def test_version_and_network_checks_name_the_variable_as_written() -> None:
    values = {**GOOD_VERSIONS, "preflight_torch_version": "2.x"}
    fed = origins({}, values)
    (problem,) = inputcheck.preflight_version_problems(values, "n1", fed)
    assert problem.startswith("n1: gpufleet_torch_version=2.x (feeds preflight_torch_version)")
    (problem,) = inputcheck.preflight_version_problems(values, "n1", {})
    assert problem.startswith("n1: preflight_torch_version=2.x is not a torch release")
    net = {**GOOD_NETWORK, "cluster_network_cidr": "banana"}
    (problem,) = inputcheck.cluster_network_problems(net, "n1", GROUPS, origins({}, net))
    assert problem.startswith("n1: gpufleet_cluster_cidr (feeds cluster_network_cidr)='banana'")


def test_a_message_of_another_layer_is_renamed_once() -> None:
    from gpufleet.inputs import boundary

    fed = {"preflight_allow_no_gpu": boundary.Origin((("gpufleet_allow_no_gpu", "x"),), True)}
    msg = "argument 'preflight_allow_no_gpu' is of type str; preflight_allow_no_gpu_x stays"
    assert boundary.rename(msg, fed) == (
        "argument 'gpufleet_allow_no_gpu (feeds preflight_allow_no_gpu)' is of type str; "
        "preflight_allow_no_gpu_x stays"
    )


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


def _role_defaults(*roles: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for role in roles:
        out.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()))
    return out


def test_an_unknown_system_profile_is_refused_naming_the_host_variable() -> None:
    """gpufleet_system_profile (per host) feeds verify_system_profile: an unknown name is
    refused before any change, with the names gpufleet.node.profiles loads."""
    from gpufleet.node.profiles import load_profiles

    defaults = _role_defaults("gpufleet_common", "verify")
    assert defaults["gpufleet_system_profile"] == "auto"
    values = {"verify_system_profile": "dgx"}
    fed = inputcheck.origins_of(
        defaults, {"gpufleet_system_profile": "dgx"}, list(values), values.get
    )
    (problem,) = inputcheck.value_problems("verify", values, "n1", GROUPS, fed)
    assert problem.startswith(
        "n1: gpufleet_system_profile='dgx' (feeds verify_system_profile) is refused"
    )
    assert ", ".join(sorted(load_profiles())) in problem
    for good in ("auto", *load_profiles()):
        assert (
            inputcheck.value_problems("verify", {"verify_system_profile": good}, "n1", GROUPS) == []
        )
