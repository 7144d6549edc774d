"""The value rules of every role variable, as data: which variable takes which rule.

- :data:`RANGES`: every number a role takes, with its bounds (the one range table: argument
  specs say ``type: int``; these say how much);
- :data:`VALUE_RULES`: variable name -> :class:`Rule` (a rule kind of
  :data:`gpufleet.inputs.boundary.KINDS` and its parameters; a ``list`` or ``mapping`` shape
  checks each item);
- :data:`RELATIONS`: rules over several variables (a key URL needs its fingerprint, two
  ports must differ, ...);
- :data:`ROLE_VARS`: which variables each role's check reads.

A parameter that ends in ``_from`` names another variable the rule reads (the trusted hosts
of a URL, the opt-in of a wide network). :func:`gpufleet.inputs.boundary.input_problems` is
the one checker that applies the tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.inputs import known

RANGES: dict[str, tuple[float, float, str]] = {
    "gpufleet_rdzv_port": (1, 65535, "TCP port"),
    "gpufleet_gpus_expected": (0, 64, "0 = not pinned"),
    "gpufleet_provision_max_fail_percentage": (0, 100, "percent of a batch; 100 = never stop"),
    # name: (lowest, highest, what it counts). Integers unless listed in REAL_RANGES.
    "python_bootstrap_timeout": (1, 3600, "seconds a raw dnf install may take"),
    "preflight_env_free_mb": (0, 10_000_000, "MiB; 0 disables the check"),
    "preflight_toolkit_free_mb": (0, 10_000_000, "MiB; 0 disables the check"),
    "preflight_repoquery_timeout": (1, 3600, "seconds"),
    "nvidia_driver_install_retries": (1, 100, "tries per transaction"),
    "nvidia_driver_install_delay": (0, 3600, "seconds between tries"),
    "nvidia_driver_reboot_timeout": (60, 86400, "seconds"),
    "nvidia_driver_smi_timeout": (1, 3600, "seconds"),
    "cuda_toolkit_install_retries": (1, 100, "tries per transaction"),
    "cuda_toolkit_install_delay": (0, 3600, "seconds between tries"),
    "infiniband_install_retries": (1, 100, "tries per transaction"),
    "infiniband_install_delay": (0, 3600, "seconds between tries"),
    "dcgm_install_retries": (1, 100, "tries per transaction"),
    "dcgm_install_delay": (0, 3600, "seconds between tries"),
    "dcgm_major": (3, 4, "DCGM major version"),
    "torch_env_pip_timeout": (1, 3600, "seconds"),
    "torch_env_pip_retries": (0, 100, "retries of one pip connection"),
    "torch_env_install_timeout": (1, 86400, "seconds"),
    "torch_env_conda_timeout": (1, 3600, "seconds"),
    "torch_env_download_timeout": (1, 86400, "seconds"),
    "cluster_network_rdzv_port": (1, 65535, "TCP port"),
    "cluster_network_ib_gid_index": (-1, 255, "-1 = not set"),
    "verify_gpus_per_node": (0, 64, "0 = one rank per visible GPU"),
    "verify_cpu_nproc": (1, 256, "ranks per node in CPU mode"),
    "verify_warmup": (0, 10000, "untimed iterations per size"),
    "verify_iters": (1, 100000, "timed iterations per size"),
    "verify_busbw_min": (0, 1e6, "GB/s; 0 = the expected-busbw table"),
    "verify_collective_timeout": (1, 86400, "seconds"),
    "verify_rdzv_timeout": (1, 86400, "seconds"),
    "verify_launch_timeout": (1, 86400, "seconds"),
    "verify_checks_timeout": (1, 86400, "seconds"),
    "verify_smoke_timeout": (1, 86400, "seconds"),
    "verify_probe_timeout": (1, 3600, "seconds per connect try"),
    "verify_probe_retries": (1, 1000, "tries per target"),
    "verify_probe_listen_s": (1, 86400, "seconds"),
    "verify_probe_start_grace": (1, 3600, "seconds"),
    "verify_probe_port": (1, 65535, "TCP port"),
    "verify_train_epochs": (1, 1000, "epochs of the training step"),
    "verify_train_per_rank": (1, 1_000_000, "samples per rank and epoch"),
    "verify_train_batch": (1, 65536, "samples per rank and step"),
    "verify_script_timeout": (1, 604800, "seconds"),
    "verify_lock_wait": (0, 86400, "seconds to wait for another run's node lock"),
    "verify_lock_stale_s": (60, 604800, "seconds after which a node lock is stale"),
    "verify_dcgm_level": (1, 4, "dcgmi diag -r level"),
    "verify_dcgm_timeout": (1, 86400, "seconds"),
    "verify_slurm_start_timeout": (1, 86400, "seconds a Slurm job may stay pending"),
    "verify_compute_budget": (1, 3600, "seconds per device and dtype"),
    "verify_compute_timeout": (1, 86400, "seconds"),
    "verify_sdc_repeats": (0, 100, "runs per device"),
    "verify_collectives_warmup": (0, 10000, "untimed iterations per size"),
    "verify_collectives_iters": (1, 100000, "timed iterations per size"),
    "verify_ib_port": (1, 65000, "TCP port of the first RDMA port's exchange"),
    "verify_ib_duration": (1, 600, "seconds"),
    "verify_ib_timeout": (1, 3600, "seconds"),
    "verify_dp_imbalance_max": (1, 100, "GPU-0 memory over the others' mean"),
    "slurm_health_timeout": (1, 55, "seconds; slurmd kills a HealthCheckProgram after 60"),
    "slurm_health_interval": (5, 86400, "seconds between health-check runs"),
    "slurm_health_drain_after": (1, 100, "failed passes in a row that drain the node"),
    "health_timer_timeout": (1, 3600, "seconds the checks of one pass may take"),
    "node_reboot_drain_timeout": (1, 604800, "seconds a drained node's jobs may take to end"),
    "node_reboot_poll_interval": (1, 300, "seconds between two looks at a node's jobs"),
    "node_reboot_timeout": (60, 7200, "seconds a node may take to come back"),
    "node_reboot_health_timeout": (1, 3600, "seconds the health pass may take"),
}
"""Every number a role takes, with its bounds (a test keeps every ``int`` of every argument
spec in this table, with its range in the description)."""

REAL_RANGES = frozenset({"verify_busbw_min", "verify_dp_imbalance_max"})
"""RANGES rows that take any finite number, not only integers."""


@dataclass(frozen=True)
class Rule:
    """How one variable's value is checked: ``kind`` (a key of boundary.KINDS) with its
    ``params``; ``shape`` "one" (the value), "list" (each item) or "mapping" (each value,
    and each key by ``keys``); ``skip_empty``: "" and null pass; ``when``: only while the
    variable named first has the value given second (or is unset)."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    shape: str = "one"
    skip_empty: bool = False
    when: tuple[str, object] | None = None
    keys: Rule | None = None


@dataclass(frozen=True)
class Relation:
    """A rule over several variables: ``kind`` (a key of boundary.RELATION_KINDS) and its
    ``params``; it belongs to the role of the first variable it names (``params["var"]``)."""

    kind: str
    params: Mapping[str, Any]


def _rule(kind: str, **params: Any) -> Rule:
    return Rule(kind, params)


def _line(max_len: int, pattern: str, allowed: str, **options: Any) -> Rule:
    return Rule("line", {"max_len": max_len, "pattern": pattern, "allowed": allowed}, **options)


def _optional(kind: str, **params: Any) -> Rule:
    return Rule(kind, params, skip_empty=True)


def _each(kind: str, **params: Any) -> Rule:
    return Rule(kind, params, shape="list")


_TRUSTED = "torch_env_pip_trusted_hosts"
_WIDE = "cluster_network_allow_wide_sources"
_HEALTH_STATES = (
    r"(ALLOC|ANY|CYCLE|IDLE|MIXED|NONDRAINED_IDLE)(,(ALLOC|ANY|CYCLE|IDLE|MIXED|NONDRAINED_IDLE))*"
)
_HEX64 = _line(64, r"[0-9a-fA-F]{64}", "64 hexadecimal digits", skip_empty=True)


def _signed_repo(repo: str) -> dict[str, Rule]:
    """``<repo>_baseurl``, ``_gpgkey_url`` and ``_gpgkey_fingerprint`` of a signed dnf
    repository (its key URL needs the fingerprint: :data:`RELATIONS`)."""
    return {
        f"{repo}_baseurl": _optional("url", signed=True),
        f"{repo}_gpgkey_url": _optional("url", signed=True),
        f"{repo}_gpgkey_fingerprint": _optional("fingerprint"),
    }


_REPOS = ("nvidia_driver_cuda_repo", "nvidia_driver_epel", "nvidia_driver_base_repo",
          "infiniband_doca_repo")  # fmt: skip
_ENV_URLS = ("torch_env_pip_index_url", "torch_env_pypi_index_url", "torch_env_pytorch_index_root",
             "torch_env_miniforge_base_url", "torch_env_miniforge_url",
             "torch_env_conda_channel_alias")  # fmt: skip
_SLURM_NAMES = ("verify_slurm_partition", "verify_slurm_account", "verify_slurm_qos",
                "verify_slurm_reservation", "gpufleet_slurm_node_name")  # fmt: skip

VALUE_RULES: dict[str, Rule] = {
    # --- python_bootstrap
    "python_bootstrap_interpreter": _optional("abs_path"),
    "python_bootstrap_os_release_file": _optional("abs_path"),
    # --- torch_env
    "torch_env_prefix": _rule("owned_dir"),
    "torch_env_state_dir": _rule("owned_dir"),
    "torch_env_config_dir": _rule("owned_dir"),
    "torch_env_conda_root": _rule("owned_dir"),
    "torch_env_owner": _rule("owner", create_flag="torch_env_create_owner"),
    "torch_env_group": _rule("group", owner_from="torch_env_owner"),
    "torch_env_pip_trusted_hosts": _line(
        255,
        r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?",
        "a host name or address (optional :port)",
        shape="list",
    ),
    **{name: _optional("url", trusted_from=_TRUSTED) for name in _ENV_URLS},
    "torch_env_pip_extra_index_urls": _each("url", trusted_from=_TRUSTED),
    "torch_env_pip_find_links": _each("url", trusted_from=_TRUSTED, allow_path=True),
    "torch_env_conda_channels": _each("channel"),
    "torch_env_conda_custom_channels": Rule(
        "url",
        {"trusted_from": _TRUSTED},
        shape="mapping",
        keys=_line(128, r"[A-Za-z0-9][A-Za-z0-9._-]*", "a channel name of A-Z a-z 0-9 . _ -"),
    ),
    "torch_env_packages": _each("package_spec"),
    "torch_env_extra_packages": _each("package_spec"),
    "torch_env_miniforge_sha256": _HEX64,
    "torch_env_python_version": _line(5, r"3\.[0-9]{1,2}", "3.X, e.g. 3.11"),
    "torch_env_python": _optional("abs_path"),
    # --- cluster_network
    "cluster_network_cidr": _rule("network", opt_in=_WIDE),
    "cluster_network_extra_sources": _each("network", opt_in=_WIDE),
    "cluster_network_address": Rule(
        "address", {"cidr_from": "cluster_network_cidr"}, skip_empty=True
    ),
    "cluster_network_master": _optional("host_name"),
    "cluster_network_zone": Rule("zone", when=("cluster_network_firewall", "firewalld")),
    "cluster_network_config_dir": _rule("owned_dir"),
    "cluster_network_interface": _line(
        15,
        r"[A-Za-z0-9_.:@-]+",
        "an interface name (at most 15 characters of A-Z a-z 0-9 _ . : @ -)",
        skip_empty=True,
    ),
    "cluster_network_port_range": _rule("port_range"),
    "cluster_network_rdzv_port": _rule("port"),
    "cluster_network_nccl_debug": _line(
        16, r"VERSION|WARN|INFO|TRACE|ABORT", "VERSION, WARN, INFO, TRACE or ABORT", skip_empty=True
    ),
    "cluster_network_ib_hca": _line(
        64, r"\^?=?[A-Za-z0-9_]+(:[0-9]+)?", "an HCA name such as mlx5_0 or mlx5_0:1", shape="list"
    ),
    "cluster_network_ib_sysfs_root": _rule("read_path"),
    "cluster_network_nccl_extra_env": Rule("env_value", shape="mapping", keys=_rule("env_key")),
    # --- nvidia_driver and infiniband
    "nvidia_driver_branch": _optional("driver_branch"),
    **{name: rule for repo in _REPOS for name, rule in _signed_repo(repo).items()},
    "nvidia_driver_packages": _each("package_spec"),
    "nvidia_driver_kernel_packages": _each("package_spec"),
    "nvidia_driver_fabricmanager_packages": _each("package_name"),
    "nvidia_driver_nvlsm_packages": _each("package_name"),
    # files gpufleet reads on the controller (and names in the node's reboot message)
    "nvidia_driver_controller_machine_id_paths": _each("read_path"),
    "nvidia_driver_crb_repo": _line(
        64, r"[A-Za-z0-9._:-]+", "a repository id of A-Z a-z 0-9 . _ : -", skip_empty=True
    ),
    "infiniband_packages": _each("package_spec"),
    "infiniband_doca_packages": _each("package_spec"),
    "infiniband_sysfs_root": _rule("read_path"),
    # --- dcgm, cuda_toolkit
    "dcgm_packages": _each("package_spec"),
    "cuda_toolkit_extra_packages": _each("package_spec"),
    # --- verify
    "verify_sizes": _optional("sizes", largest=known.MAX_ALLREDUCE_SIZE),
    "verify_pair_sizes": _optional("sizes", largest=known.MAX_ALLREDUCE_SIZE),
    "verify_collectives_sizes": _optional("sizes", largest=known.MAX_ALLREDUCE_SIZE),
    "verify_burnin_duration": _rule("duration"),
    "verify_compute_shapes": _optional("matmul_shapes"),
    "verify_compute_dtypes": _line(
        64,
        r"(bfloat16|float16|float32)(,(bfloat16|float16|float32))*",
        "a comma list of bfloat16, float16, float32",
        skip_empty=True,
    ),
    "verify_run_id": _optional("run_id"),
    "verify_work_dir": _rule("owned_dir"),
    "verify_suites_dir": _rule("owned_dir"),
    "verify_probe_port": _rule("port"),
    "gpufleet_rdzv_port": _rule("port"),
    **{name: _optional("slurm_name") for name in _SLURM_NAMES},
    "verify_slurm_gres": _optional("slurm_gres"),
    "verify_slurm_submit_host": _optional("host_name"),
    "verify_system_profile": _rule("system_profile", dir_from="gpufleet_profiles_dir"),
    "gpufleet_profiles_dir": _optional("profiles_dir"),
    # --- preflight
    "preflight_gpu_archs": _each("gpu_arch"),
    "preflight_cuda_repo_baseurl": _optional("url", signed=True),
    # --- slurm_health
    "slurm_health_wrapper": _rule(
        "named_file",
        pattern=r"gpufleet[A-Za-z0-9._-]*",
        allowed="an absolute path to a file named gpufleet*, "
        "e.g. /usr/local/sbin/gpufleet-healthcheck",
    ),
    "slurm_health_output": _rule(
        "named_file",
        pattern=r"[A-Za-z0-9_][A-Za-z0-9._-]*\.json",
        allowed="an absolute path to a .json file",
    ),
    "slurm_health_slurm_conf": _rule(
        "named_file",
        pattern=r"slurm\.conf",
        allowed="the absolute path of slurm.conf, e.g. /etc/slurm/slurm.conf",
    ),
    "slurm_health_python": _optional("abs_path"),
    "slurm_health_textfile_dir": _optional("write_dir"),
    "slurm_health_node_state": _line(
        64,
        _HEALTH_STATES,
        "ANY, IDLE, ALLOC, MIXED or NONDRAINED_IDLE, a comma list, optionally with CYCLE",
    ),
    # --- health_timer
    "health_timer_interval": _rule("timespan", lowest=10, highest=7 * 86400),
    "health_timer_textfile_dir": _optional("write_dir"),
    "health_timer_python": _optional("abs_path"),
    "health_timer_output": _rule(
        "named_file",
        pattern=r"[A-Za-z0-9_][A-Za-z0-9._-]*\.json",
        allowed="an absolute path to a .json file",
    ),
    # --- node_reboot
    "node_reboot_python": _optional("abs_path"),
    "node_reboot_reason": _line(
        100,
        r"[A-Za-z0-9][A-Za-z0-9 ,.:;()/+_-]*",
        "one line of up to 100 letters, digits, spaces and ,.:;()/+_- (no quotes or '=')",
    ),
    # --- provision.yml's play (not a role)
    "gpufleet_provision_serial": _rule("serial"),
    # --- rolling_reboot.yml's play (not a role): SERIAL of make rolling-reboot
    "node_reboot_serial": _rule("serial"),
    "gpu_nodes": _each("host_name"),
}
"""Variable -> its value rule. Numbers take their RANGES row (a ``port`` rule checks the row
first); every string value, and every string item, also passes the whitespace rule (no
leading or trailing blanks: ``"node1 "`` names another host, path or account)."""


def _key_needs_fingerprint(repo: str) -> Relation:
    return Relation(
        "needs",
        {
            "var": f"{repo}_gpgkey_url",
            "needs": f"{repo}_gpgkey_fingerprint",
            "name": "var",
            "allowed": f"a key URL together with {repo}_gpgkey_fingerprint (the key's full "
            "fingerprint): keys are never imported unpinned",
        },
    )


_DOCA = "infiniband_doca_repo"

RELATIONS: tuple[Relation, ...] = (
    Relation(
        "needs",
        {
            "var": "torch_env_miniforge_url",
            "needs": "torch_env_miniforge_sha256",
            "name": "var",
            "allowed": "a Miniforge URL together with torch_env_miniforge_sha256 "
            "(its SHA-256, 64 hex digits)",
        },
    ),
    Relation(
        "differs",
        {
            "var": "torch_env_prefix",
            "other": "torch_env_conda_root",
            "when": ("torch_env_manager", "conda"),
            "allowed": "a directory other than torch_env_conda_root (the conda base itself)",
        },
    ),
    Relation(
        "port_outside_range",
        {
            "var": "cluster_network_rdzv_port",
            "range": "cluster_network_port_range",
            "when_true": "cluster_network_restrict_ports",
        },
    ),
    Relation(
        "needs",
        {
            "var": "cluster_network_ib_enable",
            "test": "true",
            "needs": "cluster_network_ib_hca",
            "name": "needs",
            "allowed": "a list of HCA names such as [mlx5_0, mlx5_1:1] when "
            "cluster_network_ib_enable is true",
        },
    ),
    Relation(
        "needs",
        {
            "var": "health_timer_install",
            "test": "true",
            "needs": "health_timer_textfile_dir",
            "name": "needs",
            "allowed": "node_exporter's textfile directory (an absolute path) when the health "
            "timer is on: each pass writes gpufleet.prom there",
        },
    ),
    *(_key_needs_fingerprint(repo) for repo in _REPOS),
    Relation(
        "needs",
        {
            "var": f"{_DOCA}_baseurl",
            "needs": "infiniband_doca_packages",
            "name": "needs",
            "allowed": f"the packages to install from {_DOCA}_baseurl (a list of package specs): "
            "the role names no DOCA-OFED package itself",
        },
    ),
    Relation(
        "needs",
        {
            "var": f"{_DOCA}_baseurl",
            "needs": f"{_DOCA}_gpgkey_url",
            "name": "needs",
            "allowed": f"the signing key of {_DOCA}_baseurl together with "
            f"{_DOCA}_gpgkey_fingerprint: gpgcheck needs the mirror's key",
        },
    ),
    # Every port gpufleet listens on is its own: the master's rendezvous listener and the
    # probe's (verify) cannot share one.
    Relation("distinct_ports", {"var": "gpufleet_rdzv_port", "ports": ("verify_probe_port",)}),
)
"""Rules over several variables, in the order their refusals are listed."""

HTTPS_ONLY = "gpufleet_credentials_https_only"
"""The shared setting every URL rule reads: credentials over https only (default true)."""

ROLE_VARS: dict[str, str] = {
    **{
        role: rf"^({role}_|{HTTPS_ONLY}$)"
        for role in ("python_bootstrap", "torch_env", "nvidia_driver", "infiniband", "preflight")
    },
    "slurm_health": r"^(slurm_health_|gpufleet_slurm_node_name$)",
    "health_timer": r"^health_timer_",
    "verify": r"^(verify_|gpufleet_slurm_node_name$|gpufleet_rdzv_port$|gpufleet_profiles_dir$)",
    "provision": r"^(gpufleet_provision_serial|gpufleet_provision_max_fail_percentage|gpu_nodes)$",
    "node_reboot": r"^(node_reboot_(?!serial$)|gpufleet_slurm_node_name$)",
    "rolling_reboot": r"^(node_reboot_serial|gpu_nodes)$",
}
"""The variables a role's check reads, as a pattern (default: ``^<role>_``)."""

ROLES: tuple[str, ...] = (
    "python_bootstrap", "torch_env", "cluster_network", "nvidia_driver", "cuda_toolkit",
    "infiniband", "dcgm", "slurm_health", "health_timer", "node_reboot", "verify", "preflight",
    "provision", "rolling_reboot",
)  # fmt: skip
"""The checks :func:`gpufleet.inputs.boundary.input_problems` knows (roles, and provision.yml's
play)."""
