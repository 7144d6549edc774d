"""The input boundary (gpufleet.inputs.boundary, gpufleet.argtypes): unit cases and property tests.

The property tests push random strings (control characters, unicode, very long) through the
single-line validator and the renderers (.condarc, pip.conf, nccl.env, zone XML): whatever
passes the validator renders to a file that parses back to the intended structure.
"""

from __future__ import annotations

import argparse
import configparser
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet import argtypes
from gpufleet.inputs import boundary
from gpufleet.inputs.boundary import BoundaryError
from gpufleet.planning import network as netcfg

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"

CONTROL = [chr(c) for c in [*range(0, 32), 127, 0x85, 0x2028, 0x2029]]
ANY_TEXT = st.text(
    alphabet=st.one_of(st.sampled_from(CONTROL), st.characters()), min_size=0, max_size=2000
)
PROFILE = settings(max_examples=150, deadline=None)


# --------------------------------------------------------------------------- single_line


@PROFILE
@given(ANY_TEXT)
def test_single_line_accepts_exactly_one_printable_line(text: str) -> None:
    ok = bool(text) and len(text) <= boundary.MAX_VALUE_LEN and not any(c in text for c in CONTROL)
    ok = ok and not any(0x80 <= ord(c) <= 0x9F for c in text)
    if ok:
        assert boundary.single_line(text, "v") == text
    else:
        with pytest.raises(BoundaryError) as err:
            boundary.single_line(text, "some_var")
        assert "some_var=" in str(err.value) and "allowed:" in str(err.value)
        assert "\n" not in str(err.value), "the message itself is one line (repr)"


@pytest.mark.parametrize("value", ["a\n", "a\r", "\na", "a\x00b", "a\u2028b", "x" * 1025, ""])
def test_single_line_refuses_trailing_newline_and_friends(value: str) -> None:
    with pytest.raises(BoundaryError):
        boundary.single_line(value, "v")


@pytest.mark.parametrize("value", [None, True, [], {}, 1.5])
def test_single_line_refuses_non_strings(value: object) -> None:
    with pytest.raises(BoundaryError):
        boundary.single_line(value, "v")


# --------------------------------------------------------------------------- classes

OWNED_BAD = ["/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/tmp", "/dev/shm", "/var", "/root",
             "/boot", "/usr/lib/systemd", "/etc/ssh", "/tmp/x", "/var/tmp/env", "/opt", "/var/lib",
             "//usr//bin/", "/usr/./bin", "/opt/../etc", "opt/env", "/opt/env\n", "/root/env"]  # fmt: skip
OWNED_GOOD = ["/opt/gpufleet/env", "/var/lib/gpufleet", "/etc/gpufleet", "/srv/ml/env", "/opt/x"]


@pytest.mark.parametrize("path", OWNED_BAD)
def test_system_directories_are_refused(path: str) -> None:
    with pytest.raises(BoundaryError, match=r"torch_env_prefix=.*allowed: an absolute path"):
        boundary.check_owned_dir(path, "torch_env_prefix")


@pytest.mark.parametrize("path", OWNED_GOOD)
def test_own_directories_pass(path: str) -> None:
    assert boundary.check_owned_dir(path, "p") == path


@pytest.mark.parametrize(
    "spec",
    ["--nogpg", "--setopt=gpgcheck=no", "-y", "pkg --nogpg", "pkg;rm", "https://x/y.whl",
     "pkg\n--nogpg", "pkg @ file:///tmp/x", "", "pk g", "../x.rpm"],
)  # fmt: skip
def test_package_options_are_refused(spec: str) -> None:
    with pytest.raises(BoundaryError, match="allowed: a package spec"):
        boundary.check_package_spec(spec, "torch_env_extra_packages[0]")


@pytest.mark.parametrize(
    "spec",
    ["numpy", "numpy==2.1.0", "torchvision>=0.20,<0.22", "nvidia-driver-cuda",
     "kernel-devel-5.14.0-503.el9.x86_64", "python3.11-devel", "pkg[extra]==1.0", "nvidia-driver:580"],
)  # fmt: skip
def test_package_specs_pass(spec: str) -> None:
    assert boundary.check_package_spec(spec, "p") == spec


@pytest.mark.parametrize("key", ["LD_PRELOAD", "PATH", "PYTHONPATH", "NCCL_LD_PRELOAD", "BASH_ENV",
                                 "nccl_debug", "NCCL_X\n", "TORCH_PYTHONPATH", "CUDA_LD_LIBRARY_PATH"])  # fmt: skip
def test_env_keys_outside_the_prefixes_are_refused(key: str) -> None:
    with pytest.raises(BoundaryError, match="NCCL_, GLOO_, TORCH_"):
        boundary.check_env_key(key, "cluster_network_nccl_extra_env key")


@pytest.mark.parametrize(
    "key", ["NCCL_IB_TIMEOUT", "GLOO_SOCKET_IFNAME", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "UCX_TLS"]
)
def test_env_keys_with_the_prefixes_pass(key: str) -> None:
    assert boundary.check_env_key(key, "k") == key


@pytest.mark.parametrize("net", ["0.0.0.0/0", "::/0", "10.0.0.0/8", "2001:db8::/32", "0.0.0.0/1"])
def test_wide_networks_need_the_opt_in(net: str) -> None:
    with pytest.raises(BoundaryError, match="cluster_network_allow_wide_sources: true"):
        boundary.check_network(
            net, "cluster_network_extra_sources[0]", False, "cluster_network_allow_wide_sources"
        )
    assert boundary.check_network(net, "x", True, "opt") == net


@pytest.mark.parametrize(
    "zone", ["libvirt", "docker", "public", "trusted", "Public", "gpufleet\n", "a/b", "x" * 18]
)
def test_foreign_zones_are_refused(zone: str) -> None:
    with pytest.raises(BoundaryError, match="cluster_network_zone="):
        boundary.check_zone(zone, "cluster_network_zone")


@pytest.mark.parametrize("group", ["root", "wheel", "adm", "docker", "Wheel", "0"])
def test_privileged_groups_are_refused(group: str) -> None:
    with pytest.raises(BoundaryError, match="torch_env_group="):
        boundary.check_group(group, "torch_env_group")


def test_existing_accounts_need_use_as_is() -> None:
    with pytest.raises(BoundaryError, match="torch_env_create_owner: false"):
        boundary.check_owner("alice", "torch_env_owner", existing=True, use_as_is=False)
    assert (
        boundary.check_owner("alice", "torch_env_owner", existing=True, use_as_is=True) == "alice"
    )
    with pytest.raises(BoundaryError, match="system accounts are never modified"):
        boundary.check_owner("daemon", "torch_env_owner", existing=False, use_as_is=False)
    assert (
        boundary.input_problems(
            {"torch_env_owner": "daemon", "torch_env_create_owner": False}, "torch_env"
        )
        == []
    )


@pytest.mark.parametrize(
    "fp", ["D42D0685", "610C7B14E068A878070DA4E99CD0A493D42D068Z", "0x" + "A" * 40, "A" * 41]
)
def test_malformed_fingerprints_are_refused(fp: str) -> None:
    with pytest.raises(BoundaryError, match="40 or 64 hexadecimal digits"):
        boundary.check_fingerprint(fp, "nvidia_driver_epel_gpgkey_fingerprint")


@pytest.mark.parametrize("url", ["http://mirror/simple", "ftp://x/", "mirror.local/simple", "https://a b/",
                                 "https://x/\nssl_verify: false", "javascript:alert(1)", "file://host/srv/wheels"])  # fmt: skip
def test_urls_refused(url: str) -> None:
    with pytest.raises(BoundaryError, match="allowed: an https:// URL"):
        boundary.check_url(url, "torch_env_pip_index_url")


def test_plain_http_needs_its_host_trusted() -> None:
    assert boundary.check_url("http://mirror:8080/simple", "u", ["mirror"])


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", True, "70000", -1, 1.5])
def test_numbers_finite_bounded_integers(value: object) -> None:
    with pytest.raises(BoundaryError, match=r"allowed: an integer 1-65535"):
        boundary.number(value, "verify_probe_port", 1, 65535)


@pytest.mark.parametrize(
    "run_id", ["latest", "LATEST", "..", "../x", "a b", "`id`", "$(id)", "a\n", "x" * 65, ".hidden"]
)
def test_run_ids(run_id: str) -> None:
    with pytest.raises(BoundaryError, match="verify_run_id="):
        boundary.check_run_id(run_id, "verify_run_id")


@pytest.mark.parametrize("host", ["../../evil", "a/b", ".", "..", "x\n", ""])
def test_host_names_that_would_be_paths(host: str) -> None:
    with pytest.raises(BoundaryError):
        boundary.check_host_name(host, "inventory_hostname")


# --------------------------------------------------------------------------- role tables


def test_defaults_of_every_role_pass() -> None:
    """The shipped defaults (templated ones resolved the way the roles do) are accepted."""
    values: dict[str, dict[str, Any]] = {
        "torch_env": {
            "torch_env_prefix": "/opt/gpufleet/env", "torch_env_state_dir": "/var/lib/gpufleet",
            "torch_env_config_dir": "/etc/gpufleet", "torch_env_conda_root": "/opt/gpufleet/miniforge",
            "torch_env_owner": "gpufleet", "torch_env_group": "gpufleet", "torch_env_pip_index_url": "",
            "torch_env_pypi_index_url": "https://pypi.org/simple",
            "torch_env_pytorch_index_root": "https://download.pytorch.org/whl",
            "torch_env_miniforge_base_url": "https://github.com/conda-forge/miniforge/releases/download",
            "torch_env_conda_channels": ["conda-forge"], "torch_env_packages": ["numpy", "torchvision"],
            "torch_env_pip_timeout": 60, "torch_env_pip_retries": 3,
        },
        "cluster_network": {
            "cluster_network_cidr": "10.0.0.0/24", "cluster_network_zone": "gpufleet",
            "cluster_network_config_dir": "/etc/gpufleet", "cluster_network_port_range": "32768-60999",
            "cluster_network_ib_gid_index": -1, "cluster_network_rdzv_port": "29500",
            "cluster_network_nccl_extra_env": {"NCCL_IB_TIMEOUT": 22},
        },
        "nvidia_driver": {
            "nvidia_driver_cuda_repo_baseurl": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64",
            "nvidia_driver_cuda_repo_gpgkey_url": "",
            "nvidia_driver_cuda_repo_gpgkey_fingerprint": "610C7B14E068A878070DA4E99CD0A493D42D0685",
            "nvidia_driver_install_retries": 3, "nvidia_driver_reboot_timeout": 1200,
        },
        "verify": {"verify_probe_port": 29499, "verify_busbw_min": 0, "verify_run_id": "20260101T000000Z",
                   "verify_work_dir": "/var/lib/gpufleet/runs", "verify_suites_dir": "/var/lib/gpufleet/suites"},
        "cuda_toolkit": {"cuda_toolkit_extra_packages": ["cuda-nsight-systems-12-8"]},
        "slurm_health": {"slurm_health_textfile_dir": "/var/lib/node_exporter",
                         "slurm_health_drain_after": 2},
        "health_timer": {"health_timer_interval": "5min", "health_timer_timeout": 60,
                         "health_timer_textfile_dir": "/var/lib/node_exporter",
                         "health_timer_output": "/var/lib/gpufleet/health.json",
                         "health_timer_python": ""},
    }  # fmt: skip
    for role, vals in values.items():
        assert boundary.input_problems(vals, role) == [], role


def test_role_problems_name_host_variable_value_allowed() -> None:
    problems = boundary.input_problems(
        {"torch_env_conda_channels": ["conda-forge\nssl_verify: false"]}, "torch_env", "node1"
    )
    assert problems == [
        "node1: torch_env_conda_channels[0]='conda-forge\\nssl_verify: false' is refused -> "
        "allowed: a conda channel name (e.g. conda-forge) or an https:// URL"
    ]


# --------------------------------------------------------------------------- renderers


def render(role: str, template: str, **variables: Any) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLES / role / "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
    )
    env.filters["to_json"] = json.dumps
    env.filters["string"] = str
    env.filters["bool"] = lambda v: str(v).lower() in {"1", "true", "yes", "on"}
    env.filters["ternary"] = lambda c, a, b: a if c else b
    return env.get_template(template).render(ansible_managed="managed", **variables)


CHANNEL = st.one_of(ANY_TEXT, st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True))


@PROFILE
@given(st.lists(CHANNEL, min_size=1, max_size=4))
def test_condarc_parses_back_to_the_channels(channels: list[str]) -> None:
    try:
        for i, c in enumerate(channels):
            boundary.check_channel(c, f"torch_env_conda_channels[{i}]")
    except BoundaryError:
        return
    text = render(
        "torch_env", "condarc.j2", torch_env_conda_root="/opt/m", torch_env_conda_channels=channels,
        torch_env_conda_channel_alias="", torch_env_conda_custom_channels={},
        torch_env_conda_timeout=60, __torch_env_home="/home/g",
    )  # fmt: skip
    data = yaml.safe_load(text)
    assert data["channels"] == channels
    assert "ssl_verify" not in data and data["channel_priority"] == "strict"


URL = st.one_of(ANY_TEXT, st.builds(lambda s: "https://mirror.example/" + s, ANY_TEXT))


@PROFILE
@given(URL, st.lists(URL, max_size=3))
def test_pip_conf_parses_back_to_the_urls(index: str, links: list[str]) -> None:
    try:
        boundary.check_url(index, "torch_env_pip_index_url")
        for i, link in enumerate(links):
            boundary.check_url(link, f"torch_env_pip_find_links[{i}]", allow_path=True)
    except BoundaryError:
        return
    text = render(
        "torch_env", "pip.conf.j2", __torch_env_pip_purpose="t", __torch_env_pip_index=index,
        torch_env_pip_extra_index_urls=[], torch_env_pip_find_links=links,
        torch_env_pip_trusted_hosts=[], torch_env_pip_timeout=60, torch_env_pip_retries=3,
    )  # fmt: skip
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(text)
    assert cfg["global"]["index-url"] == index
    assert cfg["global"].get("find-links", "").split() == links
    assert "trusted-host" not in cfg["global"]


@PROFILE
@given(st.dictionaries(ANY_TEXT, st.one_of(ANY_TEXT, st.integers()), max_size=3))
def test_nccl_env_parses_back_to_the_mapping(extra: dict[str, Any]) -> None:
    problems = boundary.cluster_network_problems({"cluster_network_nccl_extra_env": extra})
    if problems:
        return
    lines = netcfg.env_file_lines(extra)
    parsed = dict(line.split("=", 1) for line in lines)
    assert parsed == {k: str(v) for k, v in extra.items()}
    # a shell sourcing it sets exactly these variables
    script = "set -a; . /dev/stdin; set +a; env -0"
    out = subprocess.run(
        ["env", "-i", "bash", "-c", script], input="\n".join(lines) + "\n",
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    env = dict(e.split("=", 1) for e in out.split("\0") if "=" in e)
    for k, v in extra.items():
        assert env[k] == str(v)
    assert "LD_PRELOAD" not in env


@PROFILE
@given(ANY_TEXT, st.lists(ANY_TEXT, max_size=3))
def test_zone_xml_parses_back(zone: str, sources: list[str]) -> None:
    values = {"cluster_network_zone": zone, "cluster_network_extra_sources": sources}
    if boundary.cluster_network_problems(values):
        return
    text = render(
        "cluster_network", "zone.xml.j2", cluster_network_restrict_ports=True,
        cluster_network_zone=zone, cluster_network_rdzv_port=29500,
        cluster_network_group="gpu_nodes", cluster_network_source_mode="addresses",
        cluster_network_cidr="10.0.0.0/24", __cluster_network_sources=sources,
        cluster_network_port_range="32768-60999",
    )  # fmt: skip
    root = ET.fromstring(text.split("\n", 1)[1].encode())
    assert root.get("target") is None
    assert root.findtext("short") == zone
    assert [s.get("address") for s in root.findall("source")] == sources


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["probe", "serve", "--port", "70000"], "--port"),
        (["probe", "serve", "--port", "0"], "--port"),
        (["probe", "serve", "--port", "80", "--duration", "-1"], "--duration"),
        (["probe", "serve", "--port", "80", "--duration", "nan"], "--duration"),
        (["probe", "connect", "--timeout", "-5"], "--timeout"),
        (["probe", "connect", "--timeout", "inf"], "--timeout"),
        (["probe", "connect", "--retries", "-1"], "--retries"),
        (["plan", "--torch", "2.x"], "--torch"),
        (["plan", "--torch", "2.11.0", "--driver", "banana"], "--driver"),
        (["plan", "--torch", "2.11.0", "--python", "3"], "--python"),
    ],
)
def test_cli_bad_argument_exit_2_one_line(argv: list[str], word: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "gpufleet", *argv], capture_output=True, text=True, check=False
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert f"argument {word}" in res.stderr.splitlines()[-1], res.stderr


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_matrix_update_readme_broken_path_exit_1(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "README.md"
    if kind == "directory":
        path.mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "gpufleet", "matrix", "--update-readme", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--update-readme" in lines[0] and str(path) in lines[0], res.stderr


@pytest.mark.parametrize(
    ("func", "value"),
    [(argtypes.hours, "-5"), (argtypes.hours, "nan"), (argtypes.driver_version, "banana"),
     (argtypes.driver_version, "580\n"), (argtypes.port, "70000"), (argtypes.wheel_variant, "gpu"),
     (argtypes.dotted_version("X.Y"), "12"), (argtypes.text, "a\nb")],
)  # fmt: skip
def test_argtypes_refuse(func: Any, value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="allowed:"):
        func(value)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--min-driver", "banana"),
        ("--xid-window-hours", "-5"),
        ("--expected-gpus", "-1"),
        ("--wheel-variant", "gpu"),
    ],
)
def test_checks_suite_refuses_bad_options_at_start(option: str, value: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "checks/pytest.ini", "checks", "-p", "no:cacheprovider",
         "--collect-only", "-q", f"{option}={value}"],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert res.returncode == 4, res.stdout + res.stderr
    assert option in res.stderr and "allowed:" in res.stderr
    assert "Traceback" not in res.stderr


# --------------------------------------------------------------------------- signed repositories
FPR = "0123456789ABCDEF0123456789ABCDEF01234567"


@pytest.mark.parametrize("repo", ["cuda_repo", "epel", "base_repo"])
def test_a_plain_http_mirror_is_allowed_for_a_signed_repository(repo: str) -> None:
    # A site mirror (the testbed's too) often serves dnf repositories over plain http:
    # gpgcheck with the pinned key checks every package, so the URL scheme is not the guard.
    values = {
        f"nvidia_driver_{repo}_baseurl": "http://10.213.0.1:8213/cuda",
        f"nvidia_driver_{repo}_gpgkey_url": "http://10.213.0.1:8213/keys/KEY",
        f"nvidia_driver_{repo}_gpgkey_fingerprint": FPR,
    }
    assert boundary.input_problems(values, "nvidia_driver") == []


def test_a_signed_repository_key_url_still_needs_its_fingerprint() -> None:
    values = {"nvidia_driver_base_repo_gpgkey_url": "http://10.213.0.1:8213/keys/KEY"}
    (problem,) = boundary.input_problems(values, "nvidia_driver", "node1")
    assert problem.startswith("node1: nvidia_driver_base_repo_gpgkey_url=")
    assert "never imported unpinned" in problem


def test_plain_http_is_still_refused_for_an_unsigned_pip_index() -> None:
    problems = boundary.input_problems(
        {"torch_env_pip_index_url": "http://10.213.0.1:8213/pypi/simple/"}, "torch_env"
    )
    assert any("torch_env_pip_index_url" in p and "trusted hosts" in p for p in problems)


@pytest.mark.parametrize(
    "url",
    ["ftp://user:s3cr3t-t0ken@nexus.example/simple", "https://s3cr3t-t0ken@nexus.example/x\n"],
)
def test_a_refusal_never_quotes_the_credentials_of_a_url(url: str) -> None:
    problems = boundary.input_problems({"torch_env_pip_index_url": url}, "torch_env")
    assert problems and not any("s3cr3t" in p for p in problems)
    assert any("torch_env_pip_index_url=" in p and "***@nexus.example" in p for p in problems)


@pytest.mark.parametrize("url", ["file:///opt/pypi/simple", "file://localhost/srv/wheels/"])
def test_a_local_file_index_is_allowed(url: str) -> None:
    # an air-gapped site serves wheels from a local directory: no network, nothing to trust
    assert boundary.input_problems({"torch_env_pip_index_url": url}, "torch_env") == []


@pytest.mark.parametrize(
    "url", ["file://mirror.example/simple", "file://u:p@/x", "file:relative", "https:///x"]
)
def test_a_remote_or_relative_file_url_and_a_hostless_url_are_refused(url: str) -> None:
    (problem,) = boundary.input_problems({"torch_env_pip_index_url": url}, "torch_env")
    assert problem.startswith("torch_env_pip_index_url=") and "file:/// URL" in problem


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"verify_iters": 0}, ["verify_iters=0 is refused", "an integer 1-100000"]),
        ({"verify_cpu_nproc": 0}, ["verify_cpu_nproc=0", "an integer 1-256"]),
        ({"verify_gpus_per_node": -1}, ["verify_gpus_per_node=-1", "an integer 0-64"]),
        ({"verify_probe_retries": -1}, ["verify_probe_retries=-1", "an integer 1-1000"]),
        ({"verify_rdzv_timeout": 0}, ["verify_rdzv_timeout=0", "1-86400 (seconds)"]),
        ({"verify_probe_port": 70000}, ["verify_probe_port=70000", "1-65535"]),
        ({"verify_busbw_min": -1.5}, ["verify_busbw_min=-1.5", "a number 0-1000000"]),
        ({"verify_sizes": "64Q"}, ["verify_sizes='64Q' is refused", "4K,64K,1M,8M"]),
        ({"verify_sizes": "1M,0"}, ["verify_sizes='1M,0'", "sizes > 0"]),
        ({"verify_sizes": ["1M"]}, ["verify_sizes=['1M'] is refused"]),
        ({"verify_run_id": "../x"}, ["verify_run_id='../x' is refused", "not one of"]),
    ],
)
def test_verify_settings(settings: dict[str, object], words: list[str]) -> None:
    (msg,) = boundary.input_problems(settings, "verify", "n1")
    assert msg.startswith("n1: ")
    for w in words:
        assert w in msg, msg


def test_verify_defaults_are_fine() -> None:
    import yaml

    defaults = yaml.safe_load((REPO / "roles/verify/defaults/main.yml").read_text())
    plain = {k: v for k, v in defaults.items() if "{{" not in str(v)}
    assert "verify_iters" in plain and "verify_sizes" in plain
    assert boundary.input_problems(plain, "verify") == []
    assert (
        boundary.input_problems({"verify_sizes": "4K,256K", "verify_run_id": "t1"}, "verify") == []
    )


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"cluster_network_port_range": "60999-32768"}, ["cluster_network_port_range='60999-32768'", "LOW < HIGH"]),
        ({"cluster_network_port_range": "80-9000"}, ["1024 <= LOW"]),
        ({"cluster_network_restrict_ports": True, "cluster_network_port_range": "32768-60999",
          "cluster_network_rdzv_port": 40000}, ["cluster_network_rdzv_port=40000", "outside"]),
        ({"cluster_network_ib_enable": True, "cluster_network_ib_hca": []}, ["cluster_network_ib_hca=[]", "HCA names"]),
        ({"torch_env_manager": "conda", "torch_env_prefix": "/opt/conda/", "torch_env_conda_root": "/opt/conda"},
         ["torch_env_prefix='/opt/conda/'", "other than torch_env_conda_root"]),
        ({"torch_env_python_version": "3"}, ["torch_env_python_version='3'", "3.X"]),
        ({"python_bootstrap_interpreter": "python3"}, ["python_bootstrap_interpreter='python3'", "absolute path"]),
        ({"python_bootstrap_timeout": 0}, ["python_bootstrap_timeout=0", "an integer 1-3600"]),
        ({"preflight_env_free_mb": -1}, ["preflight_env_free_mb=-1", "0 disables"]),
    ],
)  # fmt: skip
def test_rules_that_were_role_asserts(values: dict[str, object], words: list[str]) -> None:
    role = next(r for r in boundary.ROLE_CHECKS if next(iter(values)).startswith(r + "_"))
    problems = boundary.input_problems(values, role)
    assert len(problems) == 1, problems
    for w in words:
        assert w in problems[0], problems[0]


def test_every_integer_of_every_argument_spec_has_a_range() -> None:
    """A new `type: int` variable without bounds would accept 10**9 or -1: the one range
    table (boundary.RANGES) must name it."""
    import yaml

    missing = []
    for spec in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            for name, opt in (entry.get("options") or {}).items():
                if opt.get("type") not in ("int", "float"):
                    continue
                if name not in boundary.RANGES:
                    missing.append(f"{spec.parts[-3]}: {name} has no row in boundary.RANGES")
                    continue
                lo, hi, _ = boundary.RANGES[name]
                documented = f"Range {boundary.bound(lo)}-{boundary.bound(hi)}."
                text = opt.get("description", "")
                if isinstance(text, list):  # a spec description may be a list of paragraphs
                    text = " ".join(text)
                if documented not in text:
                    missing.append(f"{spec.parts[-3]}: {name} description lacks {documented!r}")
    assert not missing, missing


# --------------------------------------------------------------------------- issue 29 item 3


@pytest.mark.parametrize("sizes", ["999999G", "1M,65G", "70000M", "68719476737"])
def test_an_allreduce_size_beyond_any_nodes_memory_is_refused(sizes: str) -> None:
    (problem,) = boundary.input_problems({"verify_sizes": sizes}, "verify")
    assert problem.startswith(f"verify_sizes={sizes!r} is refused")
    assert "sizes of at most 64G each" in problem and "memory" in problem


def test_the_largest_allreduce_size_passes() -> None:
    assert boundary.input_problems({"verify_sizes": "4K,64G"}, "verify") == []
    assert boundary.input_problems({"verify_sizes": "68719476736"}, "verify") == []


@pytest.mark.parametrize(
    "var", ["verify_probe_port", "cluster_network_rdzv_port", "gpufleet_rdzv_port"]
)
@pytest.mark.parametrize(
    ("port", "words"),
    [(22, "22 is the port of SSH"), (111, "rpcbind"), (7, "a privileged port"), (6817, "slurmctld"),
     (443, "HTTPS"), (1, "a privileged port")],
)  # fmt: skip
def test_no_port_variable_takes_a_service_port(var: str, port: int, words: str) -> None:
    role = "verify" if var != "cluster_network_rdzv_port" else "cluster_network"
    (problem,) = boundary.input_problems({var: port}, role)
    assert problem.startswith(f"{var}={port} is refused")
    assert "a port 1024-65535 that no service of the nodes uses" in problem
    assert words in problem, problem


def test_the_rendezvous_and_probe_ports_must_differ() -> None:
    values = {"gpufleet_rdzv_port": 29499, "verify_probe_port": "29499"}
    (problem,) = boundary.input_problems(values, "verify", "n1")
    assert problem.startswith("n1: gpufleet_rdzv_port=29499 is refused")
    assert "other than verify_probe_port=29499" in problem
    # the one the user set is named (the rendezvous port kept its default)
    origins = {"gpufleet_rdzv_port": boundary.Origin()}
    (problem,) = boundary.input_problems(values, "verify", "n1", origins)
    assert problem.startswith("n1: verify_probe_port='29499' is refused")
    assert boundary.input_problems({**values, "verify_probe_port": 29498}, "verify") == []


@pytest.mark.parametrize(
    ("address", "why"),
    [("fe80::1%eth0", "has a zone"), ("fd00::1%1", "has a zone"), ("fe80::1", "link-local"),
     ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"), ("10.0.0.0", "network address"),
     ("10.0.0.255", "broadcast address"), ("10.0.0.1/24", "not an IP address")],
)  # fmt: skip
def test_cluster_address_forms(address: str, why: str) -> None:
    values = {"cluster_network_address": address, "cluster_network_cidr": "10.0.0.0/24"}
    (problem,) = boundary.input_problems(values, "cluster_network")
    assert problem.startswith(f"cluster_network_address={address!r} is refused"), problem
    assert why in problem, problem


@pytest.mark.parametrize(
    ("var", "value"),
    [("cluster_network_master", "node1 "), ("torch_env_pip_index_url", " https://m/simple"),
     ("verify_work_dir", "/var/lib/gpufleet/runs "), ("verify_slurm_partition", "gpu "),
     ("torch_env_conda_channels", ["conda-forge "]), ("nvidia_driver_branch", "580 "),
     ("cluster_network_nccl_extra_env", {"NCCL_DEBUG_SUBSYS": "INIT "})],
)  # fmt: skip
def test_blanks_around_a_value_are_refused(var: str, value: object) -> None:
    role = next(r for r in boundary.ROLES if re.match(boundary.ROLE_VARS.get(r, f"^{r}_"), var))
    (problem,) = boundary.input_problems({var: value}, role)
    assert problem.startswith(var), problem


def test_the_whitespace_hint_masks_credentials() -> None:
    from gpufleet.inputs import rules

    with pytest.raises(BoundaryError) as err:
        rules.no_blank_ends("https://u:s3cr3t@m.example/simple ", "v")
    assert "s3cr3t" not in str(err.value)
    assert "did you mean 'https://***@m.example/simple'" in str(err.value)


def test_every_rule_names_a_known_kind_and_role() -> None:
    for var, rule in boundary.VALUE_RULES.items():
        assert rule.kind in boundary.KINDS, var
        assert rule.keys is None or rule.keys.kind in boundary.KINDS, var
        assert any(boundary.role_rules(r) and var in dict(boundary.role_rules(r))
                   for r in boundary.ROLES), f"{var} belongs to no role"  # fmt: skip
    for relation in boundary.RELATIONS:
        assert relation.kind in boundary.RELATION_KINDS
        assert any(relation in boundary.role_relations(r) for r in boundary.ROLES), relation


@pytest.mark.parametrize(
    "paths",
    [["etc/machine-id"], ["/etc/../root/.ssh/id_rsa"], ["/etc/machine-id\n/tmp/x"], [""],
     ["/etc/machine-id", "relative"]],
)  # fmt: skip
def test_controller_machine_id_paths_are_absolute_read_paths(paths: list[str]) -> None:
    # read on the controller to decide whether a node is the controller (never rebooted)
    values = {"nvidia_driver_controller_machine_id_paths": paths}
    (problem,) = boundary.input_problems(values, "nvidia_driver")
    assert problem.startswith("nvidia_driver_controller_machine_id_paths"), problem


def test_controller_machine_id_paths_default_is_accepted() -> None:
    values = {
        "nvidia_driver_controller_machine_id_paths": ["/etc/machine-id", "/var/lib/dbus/machine-id"]
    }
    assert boundary.input_problems(values, "nvidia_driver") == []


# --------------------------------------------------------------------------- health between runs


@pytest.mark.parametrize(
    "path", ["var/lib/node_exporter", "/var/lib/../../etc", "/", "/var", "./x", "", "/a dir/x"]
)
def test_a_textfile_directory_relative_with_dotdot_or_top_level_is_refused(path: str) -> None:
    with pytest.raises(BoundaryError, match=r"an absolute directory path without '\.\.'"):
        boundary.check_write_dir(path, "health_timer_textfile_dir")


@pytest.mark.parametrize(
    ("path", "normal"),
    [("/var/lib/node_exporter", "/var/lib/node_exporter"),
     ("/var/lib/prometheus/node-exporter/", "/var/lib/prometheus/node-exporter")],
)  # fmt: skip
def test_textfile_directories_pass_normalised(path: str, normal: str) -> None:
    assert boundary.check_write_dir(path, "x") == normal


@pytest.mark.parametrize("span", ["0", "5", "9s", "8 days", "5 mins", "soon", "5min;reboot", True])
def test_timer_intervals_outside_10s_to_7d_or_not_a_span_are_refused(span: object) -> None:
    with pytest.raises(BoundaryError, match=r"a systemd time span .* from 10 s to 604800 s"):
        boundary.check_timespan(span, "health_timer_interval", 10, 7 * 86400)


def test_the_timer_rules_of_the_role_name_the_variable() -> None:
    problems = boundary.input_problems(
        {"health_timer_interval": "0", "health_timer_textfile_dir": "x/y",
         "health_timer_timeout": 0},
        "health_timer",
        "node1",
    )  # fmt: skip
    assert len(problems) == 3, problems
    assert any("health_timer_interval" in p and "'0'" in p for p in problems)
    assert any("health_timer_textfile_dir" in p and "'x/y'" in p for p in problems)
    assert any("health_timer_timeout" in p and "1-3600" in p for p in problems)
    drain = boundary.input_problems({"slurm_health_drain_after": 0}, "slurm_health", "node1")
    assert len(drain) == 1 and "slurm_health_drain_after" in drain[0] and "1-100" in drain[0]


def test_the_timer_needs_a_textfile_directory_only_when_it_is_on() -> None:
    on = {"health_timer_install": True, "health_timer_textfile_dir": ""}
    (problem,) = boundary.input_problems(on, "health_timer", "node1")
    assert "health_timer_textfile_dir" in problem and "textfile directory" in problem
    assert boundary.input_problems({**on, "health_timer_install": False}, "health_timer") == []
