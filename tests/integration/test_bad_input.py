"""Bad input is refused before any change, with a message that names the variable, the
value and what is allowed (issue 7, "Bad input").

CASES is the one table. Each case gives bad inventory or variable values and the three
things its message must name. How a case runs follows from what it gives:

- ``hosts`` (inventory cases): its own inventory file (the gpu_nodes hosts, with BASE_VARS
  as group vars), and the real ``playbooks/check_inventory.yml`` run on it: the play that
  provision.yml and verify.yml import first. The hosts are fake names on the local
  connection; the check needs no connection to them.
- ``vars`` only (variable cases): all in ONE ansible-playbook run on localhost, each case in
  its own block/rescue that includes ``playbooks/tasks/check_node.yml``, the per-node part
  of the check play (every role's check_inputs entry point: argument spec, then the value
  checks that need neither facts nor the plan), with the case's variables.
- ``os_release`` (OS cases): in the same run, the python_bootstrap role reads that file
  as the node's /etc/os-release (raw, read-only) and refuses the system before anything is
  installed.

"Before any change" is asserted: every PLAY RECAP line says changed=0, the failing task
is one of the validation tasks, and the directories the roles would write to (set to
sentinel paths under tmp_path) do not exist afterwards. No case runs a task that could
install anything: only the validation layer runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from playbook_runner import PROVISION_ROLES, ansible_env, run_playbook

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
CHECK_PLAY = REPO / "playbooks" / "check_inventory.yml"
CHECK_NODE = REPO / "playbooks" / "tasks" / "check_node.yml"
ALL_ROLES = [*PROVISION_ROLES, "verify"]

EL7 = 'NAME="CentOS Linux"\nID="centos"\nVERSION_ID="7"\nPRETTY_NAME="CentOS Linux 7 (Core)"\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n'
EL6 = 'NAME="CentOS Linux"\nID="centos"\nVERSION_ID="6"\n'


@dataclass(frozen=True)
class Case:
    """One bad input: what is given, and the variable, value and allowed words its message needs."""

    id: str
    vars: dict[str, Any]
    variable: str
    value: str
    allowed: str
    hosts: dict[str, dict[str, Any]] | None = None  # inventory case: the gpu_nodes hosts
    os_release: str | None = None  # OS case: the node's os-release
    argv: tuple[str, ...] | None = None  # command case: make or gpufleet, run in the repo
    rc: int = 2  # a command case's exit code: 2 refused, 1 a broken input file

    @property
    def words(self) -> tuple[str, str, str]:
        return (self.variable, self.value, self.allowed)


TWO_NODES: dict[str, dict[str, Any]] = {
    "node1": {"gpufleet_cluster_address": "10.0.0.1"},
    "node2": {"gpufleet_cluster_address": "10.0.0.2"},
}


def hosts(**changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """TWO_NODES with some hosts' variables replaced."""
    return {**TWO_NODES, **changes}


CASES: list[Case] = [
    # --- the inventory as a whole (cluster-level checks of the check play) -----------------
    Case("empty-gpu-nodes", {}, "gpu_nodes", "gpu_nodes=[]", "one or more hosts", hosts={}),
    Case(
        "duplicate-cluster-address",
        {},
        "gpufleet_cluster_address",
        "'10.0.0.1' is used by node1 and node2",
        "a distinct address per node",
        hosts=hosts(node2={"gpufleet_cluster_address": "10.0.0.1"}),
    ),
    Case(
        "duplicate-ansible-host",
        {},
        "ansible_host",
        "'192.168.1.10' is used by node1 and node2",
        "a distinct ansible_host per node",
        hosts={
            "node1": {"ansible_host": "192.168.1.10"},
            "node2": {"ansible_host": "192.168.1.10"},
        },
    ),
    Case(
        "master-not-in-gpu-nodes",
        {"gpufleet_master": "node9"},
        "gpufleet_master",
        "'node9'",
        "node1 or node2",
        hosts=TWO_NODES,
    ),
    Case(
        "cidr-prefix-33",
        {"gpufleet_cluster_cidr": "10.0.0.0/33"},
        "gpufleet_cluster_cidr",
        "'10.0.0.0/33'",
        "prefix 0-32 for IPv4",
        hosts=TWO_NODES,
    ),
    Case(
        "cidr-banana",
        {"gpufleet_cluster_cidr": "banana"},
        "gpufleet_cluster_cidr",
        "'banana'",
        "ADDRESS/PREFIX, e.g. 10.0.0.0/24",
        hosts=TWO_NODES,
    ),
    Case(
        "cidr-host-bits",
        {"gpufleet_cluster_cidr": "10.0.0.1/24"},
        "gpufleet_cluster_cidr",
        "'10.0.0.1/24'",
        "the network address 10.0.0.0/24",
        hosts=TWO_NODES,
    ),
    Case(
        "address-outside-cidr",
        {},
        "gpufleet_cluster_address",
        "'10.0.1.2'",
        "an address inside 10.0.0.0/24",
        hosts=hosts(node2={"gpufleet_cluster_address": "10.0.1.2"}),
    ),
    Case(
        "address-malformed",
        {},
        "gpufleet_cluster_address",
        "'10.0.0'",
        "IPv4 or IPv6 address",
        hosts=hosts(node2={"gpufleet_cluster_address": "10.0.0"}),
    ),
    Case(
        "cidr-differs-between-nodes",
        {},
        "gpufleet_cluster_cidr differs",
        "'10.0.0.0/16' on node2",
        "one value for the whole cluster",
        hosts=hosts(
            node2={"gpufleet_cluster_address": "10.0.0.2", "gpufleet_cluster_cidr": "10.0.0.0/16"}
        ),
    ),
    Case(
        "rdzv-port-zero",
        {"gpufleet_rdzv_port": 0},
        "gpufleet_rdzv_port",
        "=0",
        "an integer 1-65535",
        hosts=TWO_NODES,
    ),
    Case(
        "rdzv-port-70000",
        {"gpufleet_rdzv_port": 70000},
        "gpufleet_rdzv_port",
        "=70000",
        "an integer 1-65535",
        hosts=TWO_NODES,
    ),
    Case(
        "rdzv-port-str-for-int",
        {"gpufleet_rdzv_port": "http"},
        "gpufleet_rdzv_port",
        "'http'",
        "an integer 1-65535",
        hosts=TWO_NODES,
    ),
    Case(
        "node-variable-in-host-vars",
        {},
        "node2: nvidia_driver_install_retries",
        "=0",
        "an integer 1-100",
        hosts=hosts(
            node2={"gpufleet_cluster_address": "10.0.0.2", "nvidia_driver_install_retries": 0}
        ),
    ),
    Case(
        "provision-serial-word",
        {"gpufleet_provision_serial": "half"},
        "gpufleet_provision_serial=",
        "'half'",
        "a count of nodes (1-10000) or a percentage 1%-100%",
        hosts=TWO_NODES,
    ),
    Case(
        "provision-serial-150-percent",
        {"gpufleet_provision_serial": "150%"},
        "gpufleet_provision_serial=",
        "'150%'",
        "a count of nodes (1-10000) or a percentage 1%-100%",
        hosts=TWO_NODES,
    ),
    Case(
        "host-name-path",
        {},
        "gpu_nodes[",
        "'../../evil'",
        "no '/', not starting with '.'",
        hosts={
            "node1": {"gpufleet_cluster_address": "10.0.0.1"},
            "../../evil": {"gpufleet_cluster_address": "10.0.0.2"},
        },
    ),
    # --- versions (preflight's checks and the planner, for the versions alone) -------------
    Case(
        "torch-malformed",
        {"gpufleet_torch_version": "2.x"},
        "gpufleet_torch_version",
        "=2.x",
        "write X.Y.Z",
    ),
    Case(
        "torch-unknown",
        {"gpufleet_torch_version": "9.9.9"},
        "gpufleet_torch_version",
        "9.9.9",
        "it knows torch 1.13 to 2.15",
    ),
    Case(
        "variant-not-published-for-torch",
        {"gpufleet_torch_version": "2.13.0", "gpufleet_cuda_variant": "cu118"},
        "gpufleet_cuda_variant",
        "cu118",
        "it has cu126, cu129, cu130, cu132 and cpu",
    ),
    Case(
        "variant-malformed",
        {"gpufleet_cuda_variant": "gpu"},
        "gpufleet_cuda_variant",
        "=gpu",
        "cuXXX such as cu126",
    ),
    Case(
        "python-malformed",
        {"gpufleet_python_version": "3"},
        "gpufleet_python_version",
        "=3 ",
        "write 3.X",
    ),
    Case(
        "python-outside-torch-range",
        {"gpufleet_torch_version": "2.13.0", "gpufleet_python_version": "3.8"},
        "gpufleet_python_version",
        "not 3.8",
        "Python 3.10 to 3.14",
    ),
    Case(
        "driver-branch-malformed",
        {"nvidia_driver_branch": "abc"},
        "nvidia_driver_branch",
        "'abc'",
        "a driver branch 450-",
    ),
    # --- types and choices (argument specs) ------------------------------------------------
    Case(
        "env-manager-unknown",
        {"torch_env_manager": "pip"},
        "torch_env_manager",
        "got: pip",
        "one of: conda, venv",
    ),
    Case(
        "str-for-int",
        {"torch_env_pip_timeout": "soon"},
        "torch_env_pip_timeout",
        "'soon'",
        "convert to int",
    ),
    Case(
        "str-for-int-verify",
        {"verify_iters": "many"},
        "verify_iters",
        "'many'",
        "convert to int",
    ),
    Case(
        "non-bool-for-bool",
        {"cluster_network_restrict_ports": "maybe"},
        "cluster_network_restrict_ports",
        "'maybe'",
        "Valid booleans include",
    ),
    Case(
        "str-for-list-find-links",
        {"gpufleet_pip_find_links": "/srv/wheels"},
        "torch_env_pip_find_links",
        "'/srv/wheels'",
        "allowed: a list",
    ),
    Case(
        "str-for-list-ib-hca",
        {"cluster_network_ib_enable": True, "cluster_network_ib_hca": "mlx5_0"},
        "cluster_network_ib_hca",
        "'mlx5_0'",
        "allowed: a list",
    ),
    Case(
        "reboot-choice",
        {"nvidia_driver_reboot": "sometimes"},
        "nvidia_driver_reboot",
        "got: sometimes",
        "one of: auto, never",
    ),
    Case(
        "verify-dtype-unknown",
        {"verify_dtype": "float8"},
        "verify_dtype",
        "got: float8",
        "float32, float16, bfloat16, float64, int32, int64",
    ),
    # --- counts, timeouts, ports, paths (the roles' value checks) --------------------------
    Case("verify-iters-zero", {"verify_iters": 0}, "verify_iters", "=0", "an integer 1-100000"),
    Case(
        "verify-cpu-nproc-zero",
        {"verify_cpu_nproc": 0},
        "verify_cpu_nproc",
        "=0",
        "an integer 1-256",
    ),
    Case(
        "verify-gpus-per-node-negative",
        {"verify_gpus_per_node": -1},
        "verify_gpus_per_node",
        "=-1",
        "an integer 0-64",
    ),
    Case(
        "verify-collective-timeout-zero",
        {"verify_collective_timeout": 0},
        "verify_collective_timeout",
        "=0",
        "an integer 1-86400 (seconds)",
    ),
    Case(
        "verify-rdzv-timeout-negative",
        {"verify_rdzv_timeout": -5},
        "verify_rdzv_timeout",
        "=-5",
        "an integer 1-86400 (seconds)",
    ),
    Case(
        "verify-probe-retries-negative",
        {"verify_probe_retries": -1},
        "verify_probe_retries",
        "=-1",
        "an integer 1-1000",
    ),
    # --- the Slurm launcher and health check (docs/slurm.md) ---
    Case(
        "verify-slurm-partition-newline",
        {"verify_slurm_partition": "gpu\nx"},
        "verify_slurm_partition",
        "'gpu\\nx'",
        "a Slurm name",
    ),
    Case(
        "verify-slurm-gres-extra-option",
        {"verify_slurm_gres": "gpu:8 --wrap=id"},
        "verify_slurm_gres",
        "'gpu:8 --wrap=id'",
        "a GRES list such as gpu:8",
    ),
    Case(
        "verify-slurm-start-timeout-zero",
        {"verify_slurm_start_timeout": 0},
        "verify_slurm_start_timeout",
        "=0",
        "an integer 1-86400",
    ),
    Case(
        "verify-slurm-submit-host-path",
        {"verify_slurm_submit_host": "../x"},
        "verify_slurm_submit_host",
        "'../x'",
        "a host name",
    ),
    Case(
        "slurm-node-name-hostlist",
        {"gpufleet_slurm_node_name": "node[1-3]"},
        "gpufleet_slurm_node_name",
        "'node[1-3]'",
        "a Slurm name",
    ),
    # a shared variable checked by gpufleet_common's argument spec: the whole check play
    Case(
        "launcher-pbs",
        {"gpufleet_launcher": "pbs"},
        "gpufleet_launcher",
        "pbs",
        "ssh, slurm",
        hosts=TWO_NODES,
    ),
    Case(
        "slurm-health-wrapper-over-passwd",
        {"slurm_health_wrapper": "/etc/passwd"},
        "slurm_health_wrapper",
        "'/etc/passwd'",
        "a file named gpufleet*",
    ),
    Case(
        "slurm-health-edits-shadow",
        {"slurm_health_slurm_conf": "/etc/shadow"},
        "slurm_health_slurm_conf",
        "'/etc/shadow'",
        "the absolute path of slurm.conf",
    ),
    Case(
        "slurm-health-output-not-json",
        {"slurm_health_output": "/etc/crontab"},
        "slurm_health_output",
        "'/etc/crontab'",
        "a .json file",
    ),
    Case(
        "slurm-health-timeout-past-slurmd",
        {"slurm_health_timeout": 60},
        "slurm_health_timeout",
        "=60",
        "an integer 1-55",
    ),
    Case(
        "slurm-health-node-state-shell",
        {"slurm_health_node_state": "ANY;reboot"},
        "slurm_health_node_state",
        "'ANY;reboot'",
        "ANY, IDLE, ALLOC",
    ),
    Case(
        "verify-probe-port-70000",
        {"verify_probe_port": 70000},
        "verify_probe_port",
        "=70000",
        "an integer 1-65535",
    ),
    Case(
        "verify-sizes-malformed",
        {"verify_sizes": "64Q,1M"},
        "verify_sizes",
        "'64Q,1M'",
        'a comma list of sizes > 0 in bytes or with K, M, G, e.g. "4K,64K,1M,8M"',
    ),
    Case(
        "verify-run-id-path",
        {"verify_run_id": "../other"},
        "verify_run_id",
        "'../other'",
        "1-64 letters, digits, '.', '_' or '-'",
    ),
    Case(
        "torch-env-retries-negative",
        {"torch_env_pip_retries": -1},
        "torch_env_pip_retries",
        "=-1",
        "an integer 0-100",
    ),
    Case(
        "torch-env-prefix-relative",
        {"torch_env_prefix": "opt/env"},
        "torch_env_prefix",
        "'opt/env'",
        "an absolute path",
    ),
    Case(
        "toolkit-retries-zero",
        {"cuda_toolkit_install_retries": 0},
        "cuda_toolkit_install_retries",
        "=0",
        "an integer 1-100",
    ),
    # --- the input boundary (gpufleet.inputs.boundary, issue 12) ----------------------------------
    # newlines and control characters in values rendered into files
    *(
        Case(
            f"boundary-{cid}",
            {var: val},
            shown if shown.startswith("value of") else f"{shown}=",
            repr_,
            allowed,
        )
        for cid, var, shown, val, repr_, allowed in [
            (
                "conda-channel-newline",
                "torch_env_conda_channels",
                "torch_env_conda_channels[0]",
                ["conda-forge\nssl_verify: false"],
                "'conda-forge\\nssl_verify: false'",
                "a conda channel name",
            ),
            (
                "find-links-trusted-host",
                "torch_env_pip_find_links",
                "torch_env_pip_find_links[0]",
                ["https://m/w\ntrusted-host = evil"],
                "'https://m/w\\ntrusted-host = evil'",
                "an https:// URL",
            ),
            (
                "extra-index-cr",
                "torch_env_pip_extra_index_urls",
                "torch_env_pip_extra_index_urls[0]",
                ["https://m/s\r"],
                "'https://m/s\\r'",
                "an https:// URL",
            ),
            (
                "index-not-url",
                "torch_env_pip_index_url",
                "torch_env_pip_index_url",
                "mirror/simple",
                "'mirror/simple'",
                "an https:// URL",
            ),
            (
                "index-plain-http",
                "torch_env_pip_index_url",
                "torch_env_pip_index_url",
                "http://mirror/simple",
                "'http://mirror/simple'",
                "only with its host in the trusted hosts",
            ),
            (
                "miniforge-url-without-checksum",
                "torch_env_miniforge_url",
                "torch_env_miniforge_url",
                "https://m/Miniforge3.sh",
                "'https://m/Miniforge3.sh'",
                "torch_env_miniforge_sha256",
            ),
            (
                "miniforge-sha-short",
                "torch_env_miniforge_sha256",
                "torch_env_miniforge_sha256",
                "abc",
                "'abc'",
                "64 hexadecimal digits",
            ),
            (
                "channel-alias-newline",
                "torch_env_conda_channel_alias",
                "torch_env_conda_channel_alias",
                "https://m/\nssl_verify: false",
                "'https://m/\\nssl_verify: false'",
                "an https:// URL",
            ),
            (
                "custom-channel-newline",
                "torch_env_conda_custom_channels",
                "torch_env_conda_custom_channels['pytorch']",
                {"pytorch": "https://m\nx: y"},
                "'https://m\\nx: y'",
                "an https:// URL",
            ),
            (
                "trusted-host-newline",
                "torch_env_pip_trusted_hosts",
                "torch_env_pip_trusted_hosts[0]",
                ["m\nindex-url = http://evil"],
                "'m\\nindex-url = http://evil'",
                "a host name or address",
            ),
            (
                "nccl-value-newline",
                "cluster_network_nccl_extra_env",
                "cluster_network_nccl_extra_env['NCCL_IB_TIMEOUT']",
                {"NCCL_IB_TIMEOUT": "22\nLD_PRELOAD=/x"},
                "'22\\nLD_PRELOAD=/x'",
                "one word of A-Z a-z 0-9",
            ),
            (
                "interface-newline",
                "cluster_network_interface",
                "cluster_network_interface",
                "eth0\n",
                "'eth0\\n'",
                "an interface name",
            ),
            (
                "ib-hca-newline",
                "cluster_network_ib_hca",
                "cluster_network_ib_hca[0]",
                ["mlx5_0\nNCCL_X=1"],
                "'mlx5_0\\nNCCL_X=1'",
                "an HCA name such as mlx5_0",
            ),
            (
                "nccl-debug-newline",
                "cluster_network_nccl_debug",
                "value of cluster_network_nccl_debug",
                "INFO\nLD_PRELOAD=/x",
                "got: INFO\nLD_PRELOAD=/x",
                "must be one of: , VERSION",
            ),
            (
                "repo-baseurl-newline",
                "nvidia_driver_epel_baseurl",
                "nvidia_driver_epel_baseurl",
                "https://m/epel\ngpgcheck=0",
                "'https://m/epel\\ngpgcheck=0'",
                "an http(s):// URL (its packages are checked against the pinned GPG key)",
            ),
            (
                "run-id-trailing-newline",
                "verify_run_id",
                "verify_run_id",
                "run1\n",
                "'run1\\n'",
                "1-64 letters, digits, '.', '_' or '-'",
            ),
            # ownership: system directories, accounts and groups
            (
                "prefix-usr-bin",
                "torch_env_prefix",
                "torch_env_prefix",
                "/usr/bin",
                "'/usr/bin'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "prefix-usr-lib-child",
                "torch_env_prefix",
                "torch_env_prefix",
                "/usr/lib/env",
                "'/usr/lib/env'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "state-dir-etc",
                "torch_env_state_dir",
                "torch_env_state_dir",
                "/etc",
                "'/etc'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "state-dir-tmp-child",
                "torch_env_state_dir",
                "torch_env_state_dir",
                "/tmp/gpufleet",
                "'/tmp/gpufleet'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "config-dir-dev-shm",
                "torch_env_config_dir",
                "torch_env_config_dir",
                "/dev/shm",
                "'/dev/shm'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "config-dir-etc-ssh",
                "torch_env_config_dir",
                "torch_env_config_dir",
                "/etc/ssh",
                "'/etc/ssh'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "conda-root-var-lib",
                "torch_env_conda_root",
                "torch_env_conda_root",
                "/var/lib",
                "'/var/lib'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "network-config-dir-etc",
                "cluster_network_config_dir",
                "cluster_network_config_dir",
                "/etc",
                "'/etc'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "verify-work-dir-tmp",
                "verify_work_dir",
                "verify_work_dir",
                "/tmp",
                "'/tmp'",
                "an absolute path that gpufleet creates and owns",
            ),
            (
                "owner-daemon",
                "torch_env_owner",
                "torch_env_owner",
                "daemon",
                "'daemon'",
                "torch_env_create_owner: false",
            ),
            (
                "owner-nobody-created",
                "torch_env_owner",
                "torch_env_owner",
                "nobody",
                "'nobody'",
                "system accounts are never modified",
            ),
            (
                "group-wheel",
                "torch_env_group",
                "torch_env_group",
                "wheel",
                "'wheel'",
                "a group without privileges",
            ),
            (
                "group-root",
                "torch_env_group",
                "torch_env_group",
                "root",
                "'root'",
                "a group without privileges",
            ),
            (
                "group-docker",
                "torch_env_group",
                "torch_env_group",
                "docker",
                "'docker'",
                "a group without privileges",
            ),
            # security settings
            (
                "extra-source-world-v4",
                "cluster_network_extra_sources",
                "cluster_network_extra_sources[0]",
                ["0.0.0.0/0"],
                "'0.0.0.0/0'",
                "cluster_network_allow_wide_sources: true",
            ),
            (
                "extra-source-world-v6",
                "cluster_network_extra_sources",
                "cluster_network_extra_sources[0]",
                ["::/0"],
                "'::/0'",
                "cluster_network_allow_wide_sources: true",
            ),
            (
                "extra-source-slash-8",
                "cluster_network_extra_sources",
                "cluster_network_extra_sources[0]",
                ["10.0.0.0/8"],
                "'10.0.0.0/8'",
                "/16 or narrower",
            ),
            (
                "cluster-cidr-world",
                "cluster_network_cidr",
                "cluster_network_cidr",
                "0.0.0.0/0",
                "'0.0.0.0/0'",
                "cluster_network_allow_wide_sources: true",
            ),
            (
                "zone-libvirt",
                "cluster_network_zone",
                "cluster_network_zone",
                "libvirt",
                "'libvirt'",
                "a zone of gpufleet's own",
            ),
            (
                "zone-docker",
                "cluster_network_zone",
                "cluster_network_zone",
                "docker",
                "'docker'",
                "a zone of gpufleet's own",
            ),
            (
                "zone-public",
                "cluster_network_zone",
                "cluster_network_zone",
                "public",
                "'public'",
                "a zone of gpufleet's own",
            ),
            (
                "zone-trusted",
                "cluster_network_zone",
                "cluster_network_zone",
                "trusted",
                "'trusted'",
                "a zone of gpufleet's own",
            ),
            (
                "nccl-env-ld-preload",
                "cluster_network_nccl_extra_env",
                "cluster_network_nccl_extra_env key",
                {"LD_PRELOAD": "/tmp/x.so"},
                "'LD_PRELOAD'",
                "NCCL_, GLOO_, TORCH_, UCX_",
            ),
            (
                "nccl-env-path",
                "cluster_network_nccl_extra_env",
                "cluster_network_nccl_extra_env key",
                {"PATH": "/tmp"},
                "'PATH'",
                "NCCL_, GLOO_, TORCH_, UCX_",
            ),
            (
                "nccl-env-prefixed-preload",
                "cluster_network_nccl_extra_env",
                "cluster_network_nccl_extra_env key",
                {"NCCL_LD_PRELOAD": "/x"},
                "'NCCL_LD_PRELOAD'",
                "not a loader/path variable",
            ),
            (
                "env-packages-nogpg",
                "torch_env_extra_packages",
                "torch_env_extra_packages[0]",
                ["--nogpg"],
                "'--nogpg'",
                "a package spec",
            ),
            (
                "env-packages-index-option",
                "torch_env_packages",
                "torch_env_packages[0]",
                ["numpy --index-url=http://evil"],
                "'numpy --index-url=http://evil'",
                "a package spec",
            ),
            (
                "driver-packages-setopt",
                "nvidia_driver_packages",
                "nvidia_driver_packages[0]",
                ["--setopt=gpgcheck=no"],
                "'--setopt=gpgcheck=no'",
                "a package spec",
            ),
            (
                "driver-packages-spaced-option",
                "nvidia_driver_packages",
                "nvidia_driver_packages[0]",
                ["nvidia-driver --nogpgcheck"],
                "'nvidia-driver --nogpgcheck'",
                "a package spec",
            ),
            (
                "kernel-packages-option",
                "nvidia_driver_kernel_packages",
                "nvidia_driver_kernel_packages[0]",
                ["-y"],
                "'-y'",
                "a package spec",
            ),
            (
                "toolkit-packages-setopt",
                "cuda_toolkit_extra_packages",
                "cuda_toolkit_extra_packages[0]",
                ["--setopt=gpgcheck=0"],
                "'--setopt=gpgcheck=0'",
                "a package spec",
            ),
            (
                "toolkit-packages-url",
                "cuda_toolkit_extra_packages",
                "cuda_toolkit_extra_packages[0]",
                ["https://evil/x.rpm"],
                "'https://evil/x.rpm'",
                "a package spec",
            ),
            (
                "key-url-without-fingerprint",
                "nvidia_driver_epel_gpgkey_url",
                "nvidia_driver_epel_gpgkey_url",
                "https://m/RPM-GPG-KEY-EPEL-9",
                "'https://m/RPM-GPG-KEY-EPEL-9'",
                "nvidia_driver_epel_gpgkey_fingerprint",
            ),
            (
                "fingerprint-short-id",
                "nvidia_driver_cuda_repo_gpgkey_fingerprint",
                "nvidia_driver_cuda_repo_gpgkey_fingerprint",
                "D42D0685",
                "'D42D0685'",
                "40 or 64 hexadecimal digits",
            ),
            (
                "fingerprint-not-hex",
                "nvidia_driver_base_repo_gpgkey_fingerprint",
                "nvidia_driver_base_repo_gpgkey_fingerprint",
                "Z" * 40,
                "'" + "Z" * 40 + "'",
                "40 or 64 hexadecimal digits",
            ),
            # values refused late before: architectures, branches, numbers
            (
                "driver-branch-nonexistent",
                "nvidia_driver_branch",
                "nvidia_driver_branch",
                "999",
                "'999'",
                "a driver branch 450-",
            ),
            (
                "driver-branch-not-step",
                "nvidia_driver_branch",
                "nvidia_driver_branch",
                "571",
                "'571'",
                "in steps of 5",
            ),
            (
                "gpu-arch-unknown",
                "gpufleet_gpu_archs",
                "gpufleet_gpu_archs[0]",
                ["GZ100"],
                "'GZ100'",
                "a known GPU architecture",
            ),
            (
                "gpu-arch-garbage",
                "gpufleet_gpu_archs",
                "gpufleet_gpu_archs[0]",
                ["banana"],
                "'banana'",
                "a known GPU architecture",
            ),
            (
                "pip-timeout-huge",
                "torch_env_pip_timeout",
                "torch_env_pip_timeout",
                10**9,
                "1000000000",
                "an integer 1-3600",
            ),
            (
                "driver-retries-huge",
                "nvidia_driver_install_retries",
                "nvidia_driver_install_retries",
                1000,
                "1000",
                "an integer 1-100",
            ),
            (
                "reboot-timeout-huge",
                "nvidia_driver_reboot_timeout",
                "nvidia_driver_reboot_timeout",
                10**7,
                "10000000",
                "an integer 60-86400",
            ),
            (
                "toolkit-delay-huge",
                "cuda_toolkit_install_delay",
                "cuda_toolkit_install_delay",
                10**6,
                "1000000",
                "an integer 0-3600",
            ),
            ("busbw-nan", "verify_busbw_min", "verify_busbw_min", "nan", "'nan'", "a number 0-"),
            ("busbw-inf", "verify_busbw_min", "verify_busbw_min", "inf", "'inf'", "a number 0-"),
            (
                "iters-huge",
                "verify_iters",
                "verify_iters",
                10**9,
                "1000000000",
                "an integer 1-100000",
            ),
            (
                "probe-timeout-huge",
                "verify_probe_timeout",
                "verify_probe_timeout",
                10**6,
                "1000000",
                "an integer 1-3600",
            ),
            (
                "gid-index-huge",
                "cluster_network_ib_gid_index",
                "cluster_network_ib_gid_index",
                1000,
                "1000",
                "an integer -1-255",
            ),
            (
                "run-id-latest",
                "verify_run_id",
                "verify_run_id",
                "latest",
                "'latest'",
                "not one of bench, faults, latest",
            ),
        ]
    ),
    # --- argument specs and value checks of every role (one case per rule) -----------------
    *(
        Case(cid, {var: val}, shown, value, allowed)
        for cid, var, val, shown, value, allowed in [
            (
                "driver-flavor-choice",
                "nvidia_driver_flavor",
                "nouveau",
                "nvidia_driver_flavor",
                "got: nouveau",
                "open, proprietary",
            ),
            (
                "driver-packaging-choice",
                "nvidia_driver_packaging",
                "rpm",
                "nvidia_driver_packaging",
                "got: rpm",
                "one of: dkms, precompiled",
            ),
            (
                "driver-retries-str",
                "nvidia_driver_install_retries",
                "many",
                "nvidia_driver_install_retries",
                "'many'",
                "convert to int",
            ),
            (
                "driver-manage-epel-not-bool",
                "nvidia_driver_manage_epel",
                "perhaps",
                "nvidia_driver_manage_epel",
                "'perhaps'",
                "Valid booleans include",
            ),
            (
                "driver-packages-mapping",
                "nvidia_driver_packages",
                {"a": 1},
                "nvidia_driver_packages",
                "of type dict",
                "convert to list",
            ),
            (
                "driver-repo-gpgcheck-not-bool",
                "gpufleet_cuda_repo_repo_gpgcheck",
                "sure",
                "nvidia_driver_cuda_repo_repo_gpgcheck",
                "'sure'",
                "Valid booleans include",
            ),
            (
                "driver-branch-two-digits",
                "nvidia_driver_branch",
                "58",
                "nvidia_driver_branch",
                "'58'",
                "a driver branch 450-",
            ),
            (
                "preflight-free-mb-str",
                "preflight_env_free_mb",
                "lots",
                "preflight_env_free_mb",
                "'lots'",
                "convert to int",
            ),
            (
                "preflight-allow-no-gpu-not-bool",
                "gpufleet_allow_no_gpu",
                "perhaps",
                "preflight_allow_no_gpu",
                "'perhaps'",
                "Valid booleans include",
            ),
            (
                "preflight-installed-driver-choice",
                "preflight_plan_installed_driver",
                "often",
                "preflight_plan_installed_driver",
                "got: often",
                "one of: auto, always, never",
            ),
            (
                "preflight-archs-mapping",
                "gpufleet_gpu_archs",
                {"sm": 80},
                "preflight_gpu_archs",
                "of type dict",
                "convert to list",
            ),
            (
                "toolkit-install-not-bool",
                "cuda_toolkit_install",
                "yes please",
                "cuda_toolkit_install",
                "'yes please'",
                "Valid booleans include",
            ),
            (
                "toolkit-extra-mapping",
                "cuda_toolkit_extra_packages",
                {"a": 1},
                "cuda_toolkit_extra_packages",
                "of type dict",
                "convert to list",
            ),
            (
                "bootstrap-timeout-str",
                "python_bootstrap_timeout",
                "long",
                "python_bootstrap_timeout",
                "'long'",
                "convert to int",
            ),
            (
                "bootstrap-install-not-bool",
                "python_bootstrap_install",
                "maybe",
                "python_bootstrap_install",
                "'maybe'",
                "Valid booleans include",
            ),
            (
                "env-create-owner-not-bool",
                "torch_env_create_owner",
                "maybe",
                "torch_env_create_owner",
                "'maybe'",
                "Valid booleans include",
            ),
            (
                "env-on-mismatch-choice",
                "torch_env_on_mismatch",
                "ignore",
                "torch_env_on_mismatch",
                "got: ignore",
                "one of:",
            ),
            (
                "env-find-links-str",
                "torch_env_pip_find_links",
                "/srv/w",
                "torch_env_pip_find_links",
                "'/srv/w'",
                "allowed: a list",
            ),
            (
                "env-prefix-system-dir",
                "torch_env_prefix",
                "/opt",
                "torch_env_prefix=",
                "'/opt'",
                "system directories such as /usr",
            ),
            (
                "env-channel-alias-not-url",
                "torch_env_conda_channel_alias",
                "mirror/conda",
                "torch_env_conda_channel_alias=",
                "'mirror/conda'",
                "https:// URL",
            ),
            (
                "net-port-range-order",
                "cluster_network_port_range",
                "60999-32768",
                "cluster_network_port_range",
                "60999-32768",
                "LOW-HIGH",
            ),
            (
                "net-source-mode-choice",
                "cluster_network_source_mode",
                "all",
                "cluster_network_source_mode",
                "got: all",
                "one of: addresses, cidr",
            ),
            (
                "net-firewall-choice",
                "cluster_network_firewall",
                "iptables",
                "cluster_network_firewall",
                "got: iptables",
                "one of:",
            ),
            (
                "net-interface-space",
                "cluster_network_interface",
                "eth 0",
                "cluster_network_interface=",
                "'eth 0'",
                "interface name",
            ),
            (
                "net-extra-source-host-name",
                "cluster_network_extra_sources",
                ["login01"],
                "cluster_network_extra_sources[0]=",
                "'login01'",
                "an address or ADDRESS/PREFIX",
            ),
            (
                "net-extra-env-space",
                "cluster_network_nccl_extra_env",
                {"NCCL_X": "a b"},
                "cluster_network_nccl_extra_env",
                "a b",
                "allowed:",
            ),
            (
                "net-nccl-debug-choice",
                "cluster_network_nccl_debug",
                "LOUD",
                "cluster_network_nccl_debug",
                "LOUD",
                "WARN, INFO",
            ),
        ]
    ),
    Case(
        "net-ib-enable-without-hca",
        {"cluster_network_ib_enable": True},
        "cluster_network_ib_hca",
        "[]",
        "HCA",
    ),
    # --- HGX / InfiniBand / DCGM variables (issue 16) -------------------------------------
    Case(
        "fabricmanager-choice",
        {"nvidia_driver_fabricmanager": "sometimes"},
        "nvidia_driver_fabricmanager",
        "got: sometimes",
        "one of: auto, always, never",
    ),
    Case(
        "nvlsm-choice",
        {"nvidia_driver_nvlsm": "yes-please"},
        "nvidia_driver_nvlsm",
        "got: yes-please",
        "one of: auto, always, never",
    ),
    Case(
        "fabricmanager-packages-str",
        {"nvidia_driver_fabricmanager_packages": "nvidia-fabricmanager"},
        "nvidia_driver_fabricmanager_packages",
        "nvidia-fabricmanager",
        "list",
    ),
    Case(
        "preflight-check-fabricmanager-bool",
        {"preflight_check_fabricmanager": "perhaps"},
        "preflight_check_fabricmanager",
        "'perhaps'",
        "Valid booleans include",
    ),
    Case(
        "infiniband-install-choice",
        {"infiniband_install": "sometimes"},
        "infiniband_install",
        "got: sometimes",
        "one of: auto, always, never",
    ),
    Case(
        "infiniband-peermem-choice",
        {"infiniband_peermem": "maybe"},
        "infiniband_peermem",
        "got: maybe",
        "one of: auto, always, never",
    ),
    Case(
        "ib-hca-from-ports-bool",
        {"cluster_network_ib_hca_from_ports": "perhaps"},
        "cluster_network_ib_hca_from_ports",
        "'perhaps'",
        "Valid booleans include",
    ),
    Case(
        "dcgm-install-bool",
        {"dcgm_install": "perhaps"},
        "dcgm_install",
        "'perhaps'",
        "Valid booleans include",
    ),
    Case("dcgm-major-choice", {"dcgm_major": 5}, "dcgm_major", "got: 5", "one of: 3, 4"),
    Case(
        "verify-dcgm-bool",
        {"verify_dcgm": "perhaps"},
        "verify_dcgm",
        "'perhaps'",
        "Valid booleans include",
    ),
    Case(
        "verify-dcgm-level-choice",
        {"verify_dcgm_level": 7},
        "verify_dcgm_level",
        "got: 7",
        "one of: 1, 2, 3, 4",
    ),
    Case(
        "verify-dcgm-timeout-zero",
        {"verify_dcgm_timeout": 0},
        "verify_dcgm_timeout",
        "=0",
        "an integer 1-86400 (seconds)",
    ),
    *(
        Case(f"boundary-{cid}", {var: val}, f"{shown}=", repr_, allowed)
        for cid, var, shown, val, repr_, allowed in [
            (
                "fabricmanager-package-option",
                "nvidia_driver_fabricmanager_packages",
                "nvidia_driver_fabricmanager_packages[0]",
                ["nvidia-fabricmanager --nogpgcheck"],
                "'nvidia-fabricmanager --nogpgcheck'",
                "a package name of A-Z a-z 0-9 . _ + -",
            ),
            (
                "nvlsm-package-glob",
                "nvidia_driver_nvlsm_packages",
                "nvidia_driver_nvlsm_packages[0]",
                ["nvlsm-*"],
                "'nvlsm-*'",
                "no version, no options",
            ),
            (
                "preflight-cuda-repo-ftp",
                "preflight_cuda_repo_baseurl",
                "preflight_cuda_repo_baseurl",
                "ftp://mirror/cuda",
                "'ftp://mirror/cuda'",
                "an http(s):// URL",
            ),
            (
                "infiniband-packages-option",
                "infiniband_packages",
                "infiniband_packages[0]",
                ["-y"],
                "'-y'",
                "a package spec",
            ),
            (
                "doca-packages-url",
                "infiniband_doca_packages",
                "infiniband_doca_packages[0]",
                ["https://evil/doca.rpm"],
                "'https://evil/doca.rpm'",
                "a package spec",
            ),
            (
                "doca-repo-ftp",
                "infiniband_doca_repo_baseurl",
                "infiniband_doca_repo_baseurl",
                "ftp://mirror/doca",
                "'ftp://mirror/doca'",
                "an http(s):// URL",
            ),
            (
                "doca-key-without-fingerprint",
                "infiniband_doca_repo_gpgkey_url",
                "infiniband_doca_repo_gpgkey_url",
                "https://m/doca.pub",
                "'https://m/doca.pub'",
                "infiniband_doca_repo_gpgkey_fingerprint",
            ),
            (
                "doca-fingerprint-short",
                "infiniband_doca_repo_gpgkey_fingerprint",
                "infiniband_doca_repo_gpgkey_fingerprint",
                "D42D0685",
                "'D42D0685'",
                "40 or 64 hexadecimal digits",
            ),
            (
                "infiniband-sysfs-root-dotdot",
                "infiniband_sysfs_root",
                "infiniband_sysfs_root",
                "/sys/class/../../etc",
                "'/sys/class/../../etc'",
                "an absolute path without '..'",
            ),
            (
                "infiniband-retries-huge",
                "infiniband_install_retries",
                "infiniband_install_retries",
                1000,
                "1000",
                "an integer 1-100",
            ),
            (
                "infiniband-delay-huge",
                "infiniband_install_delay",
                "infiniband_install_delay",
                10**6,
                "1000000",
                "an integer 0-3600",
            ),
            (
                "ib-sysfs-root-relative",
                "cluster_network_ib_sysfs_root",
                "cluster_network_ib_sysfs_root",
                "sys/class/infiniband",
                "'sys/class/infiniband'",
                "an absolute path without '..'",
            ),
            (
                "dcgm-packages-option",
                "dcgm_packages",
                "dcgm_packages[0]",
                ["--setopt=gpgcheck=0"],
                "'--setopt=gpgcheck=0'",
                "a package spec",
            ),
            (
                "dcgm-retries-zero",
                "dcgm_install_retries",
                "dcgm_install_retries",
                0,
                "0",
                "an integer 1-100",
            ),
            (
                "dcgm-delay-huge",
                "dcgm_install_delay",
                "dcgm_install_delay",
                10**6,
                "1000000",
                "an integer 0-3600",
            ),
        ]
    ),
    Case(
        "doca-mirror-without-packages",
        {
            "infiniband_doca_repo_baseurl": "https://mirror/doca",
            "infiniband_doca_repo_gpgkey_url": "https://mirror/doca.pub",
            "infiniband_doca_repo_gpgkey_fingerprint": "610C7B14E068A878070DA4E99CD0A493D42D0685",
        },
        "infiniband_doca_packages=",
        "[]",
        "the role names no DOCA-OFED package itself",
    ),
    Case(
        "doca-mirror-without-key",
        {"infiniband_doca_repo_baseurl": "https://mirror/doca", "infiniband_doca_packages": ["x"]},
        "infiniband_doca_repo_gpgkey_url=",
        "''",
        "gpgcheck needs the mirror's key",
    ),
    # --- unsupported systems (python_bootstrap, before fact gathering) ---------------------
    Case(
        "os-el7", {}, "[ansible_distribution]", "CentOS 7 is refused", "EL 8/9/10", os_release=EL7
    ),
    Case(
        "os-ubuntu",
        {},
        "[ansible_distribution]",
        "ubuntu 22.04 is not Enterprise Linux",
        "Oracle Linux 8, 9 and 10",
        os_release=UBUNTU,
    ),
    Case(
        "os-el6",
        {},
        "[ansible_distribution]",
        "CentOS 6 is not supported",
        "EL 8, 9, 10",
        os_release=EL6,
    ),
]

OUTCOMES = "bad-input-outcomes"
# --- make variables and CLI arguments (command cases: run as users run them) ---------------
MARK = "/tmp/gpufleet-bad-input-pwned"  # a command substitution that ran would create it
MAKE = ("make", "--no-print-directory", "-C", str(REPO))
GF = (sys.executable, "-m", "gpufleet")
CHECKS = (sys.executable, "-m", "pytest", "-c", "checks/pytest.ini", "checks",
          "-p", "no:cacheprovider", "--collect-only", "-q")  # fmt: skip
CASES += [
    Case("make-run-id-backticks", {}, "RUN_ID", f"'x`touch {MARK}`'", "1-64 letters",
         argv=(*MAKE, "verify", "INVENTORY=/nonexistent", f"RUN_ID=x`touch {MARK}`")),
    Case("make-run-id-dollar-paren", {}, "RUN_ID", f"'x$(touch {MARK})'", "1-64 letters",
         argv=(*MAKE, "verify", "INVENTORY=/nonexistent", f"RUN_ID=x$(touch {MARK})")),
    Case("make-run-id-space", {}, "RUN_ID", "'a b'", "1-64 letters",
         argv=(*MAKE, "verify", "INVENTORY=/nonexistent", "RUN_ID=a b")),
    Case("make-run-id-latest", {}, "RUN_ID", "'latest'", "is reserved",
         argv=(*MAKE, "verify", "INVENTORY=/nonexistent", "RUN_ID=latest")),
    Case("make-verify-args-unclosed-quote", {}, "VERIFY_ARGS", """'-e "x=1'""", "quoted with",
         argv=(*MAKE, "verify", "INVENTORY=/nonexistent", 'VERIFY_ARGS=-e "x=1')),
    Case("make-inventory-shell-text", {}, "gpu_nodes", "gpu_nodes=[]", "one or more hosts",
         argv=(*MAKE, "verify", f"INVENTORY=/nonexistent; touch {MARK}")),
    Case("make-check-require-gpu-word", {}, "REQUIRE_GPU", "'maybe'", "1, true, yes, on, y",
         argv=(*MAKE, "check", "REQUIRE_GPU=maybe")),
    Case("make-check-args-unclosed-quote", {}, "CHECKS_ARGS", '"--node \'x"', "quoted with",
         argv=(*MAKE, "check", "CHECKS_ARGS=--node 'x")),
    Case("make-run-script-missing", {}, "SCRIPT", f"'/nonexistent/`touch {MARK}`.py'",
         "an existing file", argv=(*MAKE, "run", f"SCRIPT=/nonexistent/`touch {MARK}`.py")),
    Case("make-verify-launcher-pbs", {}, "LAUNCHER", "'pbs'", "ssh or slurm",
         argv=(*MAKE, "verify", "INVENTORY=/nonexistent", "LAUNCHER=pbs")),
    Case("make-run-launcher-pbs", {}, "LAUNCHER", "'pbs'", "ssh or slurm",
         argv=(*MAKE, "run", "SCRIPT=README.md", "LAUNCHER=pbs")),
    Case("cli-verify-launcher-pbs", {}, "--launcher", "'pbs'", "choose from",
         argv=(*GF, "verify", "--launcher", "pbs")),
    Case("cli-slurm-submit-partition-shell", {}, "partition", "'a;b'", "a Slurm name",
         argv=(*GF, "slurm", "submit", "--job-name", "x", "--nodelist", "n1", "--timeout", "10",
               "--output", "/nonexistent/o", "--record", "/nonexistent/r.json",
               "--partition", "a;b", "--", "true")),
    Case("cli-health-timeout-negative", {}, "--timeout", "'-1'", "a number > 0",
         argv=(*GF, "health", "--timeout", "-1")),
    Case("cli-matrix-readme-missing", {}, "--update-readme", "/nonexistent/README.md",
         "No such file", argv=(*GF, "matrix", "--update-readme", "/nonexistent/README.md"), rc=1),
    Case("cli-matrix-readme-directory", {}, "--update-readme", "/tmp", "Is a directory",
         argv=(*GF, "matrix", "--update-readme", "/tmp"), rc=1),
    Case("cli-probe-port-70000", {}, "--port", "'70000'", "an integer 1-65535",
         argv=(*GF, "probe", "serve", "--port", "70000")),
    Case("cli-probe-negative-timeout", {}, "--timeout", "'-5'", "a number > 0",
         argv=(*GF, "probe", "connect", "--timeout", "-5", "n=127.0.0.1:1")),
    Case("cli-plan-torch-word", {}, "--torch", "'2.x'", "X.Y.Z",
         argv=(*GF, "plan", "--torch", "2.x")),
    Case("cli-verify-negative-lock-wait", {}, "--lock-wait", "'-1'", "a number >= 0",
         argv=(*GF, "verify", "--lock-wait", "-1")),
    Case("cli-runid-path", {}, "RUN_ID", "'../x'", "1-64 letters",
         argv=(*GF, "runid", "--reports", "/nonexistent/reports", "--", "../x")),
    Case("checks-min-driver-word", {}, "--min-driver", "'banana'", "allowed:",
         argv=(*CHECKS, "--min-driver", "banana"), rc=4),
    Case("checks-xid-window-negative", {}, "--xid-window-hours", "'-5'", "allowed:",
         argv=(*CHECKS, "--xid-window-hours", "-5"), rc=4),
]  # fmt: skip
COMMAND_CASES = [c for c in CASES if c.argv is not None]

INVENTORY_CASES = [c for c in CASES if c.hosts is not None]
# Global variables of inventory/group_vars and the role that checks them first.
GLOBAL_READERS = {
    "gpufleet_torch_version": "preflight",
    "gpufleet_cuda_variant": "preflight",
    "gpufleet_python_version": "preflight",
    "gpufleet_pip_find_links": "torch_env",
    "gpufleet_gpu_archs": "preflight",
    "gpufleet_allow_no_gpu": "preflight",
    "gpufleet_cuda_repo_repo_gpgcheck": "nvidia_driver",
    "gpufleet_slurm_node_name": "verify",
    "gpufleet_launcher": "verify",
}
NODE_CASES = [c for c in CASES if c.hosts is None and c.argv is None]


# --------------------------------------------------------------------------- running


def sentinels(root: Path) -> dict[str, str]:
    """Where the roles would write: paths under ``root`` that must stay absent."""
    return {
        "gpufleet_env_prefix": str(root / "opt" / "env"),
        "gpufleet_state_dir": str(root / "var" / "gpufleet"),
        "gpufleet_config_dir": str(root / "etc" / "gpufleet"),
        "torch_env_conda_root": str(root / "opt" / "miniforge"),
        "cluster_network_firewalld_dir": str(root / "etc" / "firewalld"),
        "verify_work_dir": str(root / "runs"),
        "verify_suites_dir": str(root / "suites"),
        "verify_report_dir": str(root / "reports"),
    }


def base_vars(root: Path) -> dict[str, Any]:
    """Group variables of a valid cluster (every case changes one thing)."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_cluster_cidr": "10.0.0.0/24",
        "gpufleet_rdzv_port": 29500,
        "gpufleet_torch_version": "2.13.0",
        **sentinels(root),
    }


def playbook(inventory: Path, play: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return run_playbook(
        play, inventory=inventory, env=ansible_env(json_results=True), timeout=timeout
    )


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    text = stdout.split("PLAY RECAP", 1)[-1]
    out = {}
    for m in re.finditer(r"^(\S+)\s+:\s+(ok=.*)$", text, flags=re.MULTILINE):
        out[m.group(1)] = {k: int(v) for k, v in (p.split("=") for p in m.group(2).split())}
    return out


def failures(stdout: str) -> list[tuple[str, str]]:
    """(task name, message) of every ``fatal:`` result (json result format)."""
    task, out = "", []
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK [") : line.rindex("]")]
        elif line.startswith("fatal: [") and "=> {" in line:
            result = json.loads(line.split("=> ", 1)[1])
            out.append((task, str(result.get("msg", ""))))
    return out


@dataclass
class InventoryRun:
    rc: int
    stdout: str
    recap: dict[str, dict[str, int]]
    failures: list[tuple[str, str]]
    sentinel_root: Path
    extra: dict[str, Any] = field(default_factory=dict)


def run_inventory_case(
    root: Path, case_hosts: dict[str, Any], group_vars: dict[str, Any]
) -> InventoryRun:
    root.mkdir(parents=True)
    inventory = root / "hosts.json"
    group = {"hosts": case_hosts, "vars": {**base_vars(root / "node"), **group_vars}}
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": group}}}), encoding="utf-8")
    res = playbook(inventory, CHECK_PLAY)
    return InventoryRun(
        res.returncode,
        res.stdout + res.stderr,
        recap(res.stdout),
        failures(res.stdout),
        root / "node",
    )


# slow: further values of a rule that another inventory case checks in make test (each
# inventory case is one ansible-playbook run)
SLOW_INVENTORY = {
    "cidr-prefix-33", "cidr-host-bits", "address-malformed", "rdzv-port-zero",
    "rdzv-port-str-for-int",
}  # fmt: skip


def selected_inventory_cases(session: pytest.Session) -> set[str]:
    """Ids of the test_inventory_case cases this pytest run selected (after -m / -k)."""
    return {
        case.id
        for item in session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_inventory_case"
        and isinstance(case := item.callspec.params["case"], Case)
    }


@pytest.fixture(scope="module")
def inventory_runs(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, InventoryRun]:
    """Every selected inventory case (and a good inventory, id "_good"), two at a time."""
    tmp = tmp_path_factory.mktemp("inventories")
    selected = selected_inventory_cases(request.session)
    jobs = {c.id: (c.hosts or {}, c.vars) for c in INVENTORY_CASES if c.id in selected}
    jobs["_good"] = (TWO_NODES, {})
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            cid: pool.submit(run_inventory_case, tmp / cid, h, v) for cid, (h, v) in jobs.items()
        }
        return {cid: f.result() for cid, f in futures.items()}


def roles_of(case: Case) -> list[str]:
    """The roles whose check_inputs read the case's variables (all roles for no variable).

    The check play runs every role for every node; a case runs only the roles its
    variables belong to, which keeps the one run of all cases short.
    """
    if not case.vars:
        return ALL_ROLES
    wanted = set()
    for var in case.vars:
        role = GLOBAL_READERS.get(var) or next(r for r in ALL_ROLES if var.startswith(r + "_"))
        wanted.add(role)
    return [r for r in ALL_ROLES if r in wanted]


def _node_play(root: Path) -> list[dict[str, Any]]:
    """One play on localhost: every node case in its own block/rescue (plus "_good")."""
    record = (
        "{{ r | combine({'%s': {'task': ansible_failed_task.name | default('?'), 'msg': "
        "([ansible_failed_result.msg | default('')] + (ansible_failed_result.results | default([])"
        " | selectattr('failed', 'defined') | selectattr('failed') | map(attribute='msg')"
        " | list)) | join(' | ')}}) }}"
    )
    base = {**base_vars(root), "gpufleet_cluster_address": "10.0.0.1"}
    del base["ansible_connection"], base["ansible_python_interpreter"]
    tasks: list[dict[str, Any]] = [{"name": "start", "ansible.builtin.set_fact": {"r": {}}}]
    cases = [*NODE_CASES, Case("_good", {}, "", "", "")]
    for case in cases:
        if case.os_release is not None:
            release = root.parent / f"os-release-{case.id}"
            release.write_text(case.os_release, encoding="utf-8")
            step = {
                "name": f"{case.id}: python_bootstrap reads the os-release",
                "ansible.builtin.include_role": {"name": "python_bootstrap"},
                "vars": {
                    **base,
                    "python_bootstrap_os_release_file": str(release),
                    # never install, even if the refusal were missing
                    "python_bootstrap_interpreter": sys.executable,
                    "python_bootstrap_install": False,
                    **case.vars,
                },
            }
        else:
            step = {
                "name": f"{case.id}: the check play's node checks",
                "ansible.builtin.include_tasks": str(CHECK_NODE),
                "vars": {**base, "gpufleet_check_roles": roles_of(case), **case.vars},
            }
        ok = {"r": "{{ r | combine({'" + case.id + "': {'task': '', 'msg': 'NO-ERROR'}}) }}"}
        tasks.append(
            {
                "name": f"case {case.id}",
                "block": [step, {"name": f"{case.id} passed", "ansible.builtin.set_fact": ok}],
                "rescue": [
                    {
                        "name": f"{case.id} refused",
                        "ansible.builtin.set_fact": {"r": record % case.id},
                    }
                ],
            }
        )
    # printed, not written to a file: the run must report changed=0
    tasks.append({"name": "outcomes", "ansible.builtin.debug": {"msg": {OUTCOMES: "{{ r }}"}}})
    return [{"hosts": "gpu_nodes", "gather_facts": False, "tasks": tasks}]


@pytest.fixture(scope="module")
def node_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """(outcomes {case id: {task, msg}}, output, sentinel root) of the one run of node cases."""
    tmp = tmp_path_factory.mktemp("nodes")
    root = tmp / "node"
    play = tmp / "play.yml"
    play.write_text(yaml.safe_dump(_node_play(root), sort_keys=False), encoding="utf-8")
    inventory = tmp / "hosts.json"
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"localhost": localhost}}}}}),
        encoding="utf-8",
    )
    res = playbook(inventory, play, timeout=600)
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-4000:]
    start = res.stdout.index("=> ", res.stdout.index("TASK [outcomes]")) + len("=> ")
    result, _ = json.JSONDecoder().raw_decode(res.stdout, start)
    outcomes: dict[str, Any] = result["msg"][OUTCOMES]
    return outcomes, text, root


def validation_tasks() -> set[str]:
    """Names of the tasks that make up the validation layer (check play, check_inputs)."""
    names = {t["name"] for play in yaml.safe_load(CHECK_PLAY.read_text()) for t in play["tasks"]}
    files = [CHECK_NODE, *REPO.glob("roles/*/tasks/check_inputs.yml")]
    for path in files:
        names |= {t["name"] for t in yaml.safe_load(path.read_text()) or []}
    # python_bootstrap refuses unsupported systems with preflight's refuse.yml
    names |= {
        t["name"] for t in yaml.safe_load((REPO / "roles/preflight/tasks/refuse.yml").read_text())
    }
    return names


def in_validation(task: str, names: set[str]) -> bool:
    if "Validating arguments against arg spec 'check_inputs'" in task:
        return True
    # the shared variables' spec: gpufleet_common runs as the first check_inputs' dependency
    if task.startswith("gpufleet_common : Validating arguments against arg spec 'main'"):
        return True
    return task.split(" : ", 1)[-1] in names


# --------------------------------------------------------------------------- the tests


def test_the_table() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(CASES) >= 110
    for c in CASES:
        assert all(c.words), f"{c.id}: name the variable, the value and what is allowed"


@pytest.mark.xdist_group("bad-input-inventory")
def test_good_inventory_passes(inventory_runs: dict[str, InventoryRun]) -> None:
    run = inventory_runs["_good"]
    assert run.rc == 0, run.stdout[-3000:]
    assert set(run.recap) == {"node1", "node2"}, "the recap shows the nodes only"
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in run.recap.values())


@pytest.mark.xdist_group("bad-input-variables")
def test_good_variables_pass(node_run: tuple[dict[str, Any], str, Path]) -> None:
    outcomes, _, _ = node_run
    assert outcomes["_good"]["msg"] == "NO-ERROR"


@pytest.mark.xdist_group("bad-input-inventory")
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.id in SLOW_INVENTORY else [])
        for c in INVENTORY_CASES
    ],
)
def test_inventory_case(inventory_runs: dict[str, InventoryRun], case: Case) -> None:
    run = inventory_runs[case.id]
    assert run.rc != 0, f"{case.id}: bad inventory accepted:\n{run.stdout[-3000:]}"
    assert run.failures, run.stdout[-3000:]
    names = validation_tasks()
    for task, _ in run.failures:
        assert in_validation(task, names), f"{case.id}: failed outside the check play: {task}"
    msg = "\n".join(m for _, m in run.failures)
    for word in case.words:
        assert word in msg, f"{case.id}: {word!r} not in {msg!r}"
    assert run.recap, run.stdout[-3000:]
    assert all(r["changed"] == 0 for r in run.recap.values()), run.recap
    assert not run.sentinel_root.exists(), f"{case.id}: something was written"


@pytest.mark.xdist_group("bad-input-variables")
@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: c.id)
def test_variable_case(node_run: tuple[dict[str, Any], str, Path], case: Case) -> None:
    outcomes, _, _ = node_run
    outcome = outcomes[case.id]
    msg = outcome["msg"]
    assert msg != "NO-ERROR", f"{case.id}: bad input was accepted"
    assert in_validation(outcome["task"], validation_tasks()), outcome["task"]
    for word in case.words:
        assert word in msg, f"{case.id}: {word!r} not in {msg!r}"


@pytest.mark.xdist_group("bad-input-variables")
def test_variable_cases_change_nothing(node_run: tuple[dict[str, Any], str, Path]) -> None:
    _, text, root = node_run
    counters = recap(text)
    assert counters["localhost"]["changed"] == 0, counters
    assert counters["localhost"]["rescued"] == len(NODE_CASES), counters
    assert not root.exists(), "a refused input must not write anything"


def test_the_playbooks_check_first() -> None:
    """provision.yml and verify.yml import the check play before anything else."""
    for name in ("provision.yml", "verify.yml"):
        first = yaml.safe_load((REPO / "playbooks" / name).read_text())[0]
        assert first["ansible.builtin.import_playbook"] == "check_inventory.yml", name
    provision = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())[0]
    assert set(provision["vars"]["gpufleet_check_roles"]) == set(ALL_ROLES) - {"verify"}


@pytest.mark.xdist_group("bad-input-commands")
@pytest.mark.parametrize("case", COMMAND_CASES, ids=lambda c: c.id)
def test_command_case(case: Case) -> None:
    """A bad make variable or CLI argument: refused with its exit code (make: 2 for any
    failed recipe; pytest: 4 for a bad option), one message naming it, its value and what
    is allowed, no traceback, no command run from the value, no run folder left claimed."""
    assert case.argv is not None
    Path(MARK).unlink(missing_ok=True)
    env = {**ansible_env(), "PYTHONPATH": str(REPO / "src"), "PYTHON": sys.executable}
    res = subprocess.run(case.argv, cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    out = res.stdout + res.stderr
    expected = 2 if case.argv[0] == "make" else case.rc
    assert res.returncode == expected, f"{case.id}: rc {res.returncode}\n{out[-3000:]}"
    for word in case.words:
        assert word in out, f"{case.id}: {word!r} not in:\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    assert not Path(MARK).exists(), f"{case.id}: a command in the value ran"
    # a claimed run folder (gpufleet verify names it) is given back: nothing ran
    for rid in re.findall(r">> verify run (\S+)", out):
        assert not (REPO / "reports" / rid).exists(), f"{case.id}: reports/{rid} left behind"
