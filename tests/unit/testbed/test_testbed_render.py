"""Unit tests of the testbed's pure renderers (no root, no network, no testbed tools)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "testbed"))

from tbctl import config, monitor, render

# Pure helpers: these run everywhere (no `testbed` marker); tests/integration/test_testbed.py
# holds the integration tests that need root and a running testbed.

KERNEL = "6.18.44-fc-v669"


def parse_os_release(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.mark.parametrize(
    ("key", "distro_id", "major"),
    [("alma8", "almalinux", 8), ("rocky9", "rocky", 9), ("centos10", "centos", 10)],
)
def test_os_release_names_the_el_release(key: str, distro_id: str, major: int) -> None:
    rel = config.RELEASES[key]
    fields = {k: v.strip('"') for k, v in parse_os_release(render.os_release(rel)).items()}
    assert fields["ID"] == distro_id
    assert fields["VERSION_ID"].split(".")[0] == str(major)
    assert "rhel" in fields["ID_LIKE"]
    assert fields["PLATFORM_ID"] == f"platform:el{major}"
    files = render.release_files(rel)
    assert files["/etc/redhat-release"] == files[rel.release_file]
    assert f"release {rel.version_id}" in files["/etc/redhat-release"]


def test_default_mix_cycles_el8_el9_el10() -> None:
    nodes = config.make_nodes(4)
    assert [n.release.major for n in nodes] == [8, 9, 10, 8]
    assert [n.address for n in nodes] == [
        "10.213.0.11",
        "10.213.0.12",
        "10.213.0.13",
        "10.213.0.14",
    ]
    assert nodes[0].netns == "gftb-node1"
    with pytest.raises(ValueError, match="NODES=0"):
        config.make_nodes(0)
    with pytest.raises(ValueError, match="unknown EL release"):
        config.parse_mix("alma8,fedora40")
    assert config.parse_mix("rocky9") == ("rocky9",)


def test_sanitized_kernel_versions() -> None:
    assert render.sanitize_rpm_version(KERNEL) == ("6.18.44", "fc_v669")
    assert render.uname_r_evr(KERNEL) == "6.18.44-fc_v669"
    # a real EL kernel release is one V-R and stays exact
    assert render.uname_r_evr("5.14.0-570.el9.x86_64") == "5.14.0-570.el9.x86_64"


def test_catalog_has_the_real_names_and_no_nvidia_smi() -> None:
    pkgs = {p.name: p for p in render.catalog(KERNEL, 9)}
    for name in (
        "nvidia-open",
        "kmod-nvidia-open-dkms",
        "kmod-nvidia-latest-dkms",
        "nvidia-driver",
        "nvidia-driver-cuda",
        "nvidia-driver-libs",
        "nvidia-kmod-common",
        "nvidia-persistenced",
        "cuda-drivers",
        "dkms",
        "kernel-devel",
        "kernel-devel-matched",
        "kernel-headers",
        "gcc-c++",
        "cuda-toolkit-13-0",
        "cuda-toolkit-12-8",
        "cuda-toolkit-12-6",
    ):
        assert name in pkgs, name
    every_file = [f for p in render.catalog(KERNEL, 9) for f in p.files]
    assert not [f for f in every_file if f.endswith("nvidia-smi")]
    assert not [f for f in every_file if "libcuda" in f or "libnvidia-ml" in f]
    kd = pkgs["kernel-devel"]
    assert f"kernel-devel-{KERNEL}" in kd.provides
    assert "/usr/lib/modprobe.d/nvidia.conf" in pkgs["nvidia-kmod-common"].files
    assert (
        "blacklist nouveau"
        in pkgs["nvidia-kmod-common"].files["/usr/lib/modprobe.d/nvidia.conf"][1]
    )
    assert (
        "/usr/lib/systemd/system/nvidia-persistenced.service" in pkgs["nvidia-persistenced"].files
    )
    assert "/usr/local/cuda-13.0/bin/nvcc" in pkgs["cuda-toolkit-13-0"].files
    nvcc = pkgs["cuda-toolkit-13-0"].files["/usr/local/cuda-13.0/bin/nvcc"][1]
    assert "release 13.0" in nvcc
    assert "STAND-IN" in nvcc


def test_spec_disables_automatic_requires_and_keeps_epoch() -> None:
    pkg = next(
        p
        for p in render.catalog(KERNEL, 8)
        if p.name == "nvidia-open" and p.version.startswith("580")
    )
    text = render.spec(pkg)
    assert "AutoReqProv: no" in text
    assert "Epoch: 3" in text
    assert "Requires: kmod-nvidia-open-dkms = 3:580.95.05" in text
    assert pkg.nevra(".el8") == "nvidia-open-3:580.95.05-1.el8.x86_64"


def test_modules_yaml_streams_profiles_and_artifacts() -> None:
    cuda = [p for p in render.catalog(KERNEL, 9) if p.repo == "cuda"]
    docs = list(yaml.safe_load_all(render.modules_yaml(cuda, ".el9")))
    streams = {d["data"]["stream"]: d["data"] for d in docs if d["document"] == "modulemd"}
    for s in ("open-dkms", "latest-dkms", "latest", "580-open", "580-dkms", "575-open", "575-dkms"):
        assert s in streams, s
        assert set(streams[s]["profiles"]) == {"default", "ks", "fm", "src"}
        assert streams[s]["name"] == "nvidia-driver"
    assert "nvidia-open-3:580.95.05-1.el9.x86_64" in streams["580-open"]["artifacts"]["rpms"]
    assert not [a for a in streams["580-open"]["artifacts"]["rpms"] if "575." in a]
    assert (
        "kmod-nvidia-latest-dkms-3:575.57.08-1.el9.x86_64"
        in streams["latest-dkms"]["artifacts"]["rpms"]
    )
    assert streams["580-open"]["profiles"]["default"]["rpms"] == ["nvidia-open"]
    assert streams["580-dkms"]["profiles"]["default"]["rpms"] == ["cuda-drivers"]
    assert not [a for a in streams["open-dkms"]["artifacts"]["rpms"] if "toolkit" in a]
    defaults = [d for d in docs if d["document"] == "modulemd-defaults"]
    assert defaults[0]["data"]["stream"] == "latest-dkms"


def test_inventory_points_at_the_nodes_and_mirrors() -> None:
    nodes = config.make_nodes(3)
    hosts = yaml.safe_load(render.hosts_text(nodes, "/k/id", "/k/known_hosts"))
    group = hosts["all"]["children"]["gpu_nodes"]["hosts"]
    assert group["node2"]["ansible_host"] == "10.213.0.12"
    assert group["node2"]["gpufleet_cluster_address"] == "10.213.0.12"
    v = hosts["all"]["vars"]
    assert v["ansible_python_interpreter"] == "/usr/bin/python3.11"
    assert "UserKnownHostsFile=/k/known_hosts" in v["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in v["ansible_ssh_common_args"]
    m = render.MirrorInfo(
        "http://10.213.0.1:8213", "ABCDEF12.pub", "F" * 40, "10.213.0.1", "10.213.0.0/24"
    )
    gv = yaml.safe_load(render.group_vars_text(m))
    assert gv["gpufleet_cuda_repo_baseurl"] == "http://10.213.0.1:8213/cuda"
    assert gv["gpufleet_cuda_repo_gpgkey_url"].endswith("/x86_64/ABCDEF12.pub")
    assert gv["gpufleet_pip_index_url"] == "http://10.213.0.1:8213/pypi/simple/"
    assert gv["gpufleet_pip_trusted_hosts"] == ["10.213.0.1"]
    assert gv["torch_env_manager"] == "venv"
    assert gv["gpufleet_allow_no_gpu"] is True
    assert gv["gpufleet_require_gpu"] is False
    assert gv["nvidia_driver_manage_crb"] is False


def test_simple_index_is_pep503() -> None:
    pages = render.simple_index(
        {"torch": [("torch-2.13.0+cpu-cp311.whl", "ab" * 32)]}, "../../files"
    )
    assert '<a href="torch/">torch</a>' in pages["index.html"]
    assert 'href="../../files/torch-2.13.0+cpu-cp311.whl#sha256=' in pages["torch/index.html"]
    assert "#sha256=" + "ab" * 32 in pages["torch/index.html"]
    assert render.wheel_project("typing_extensions-4.16.0-py3-none-any.whl") == (
        "typing-extensions"
    )


def test_sshd_config_listens_on_the_node_only() -> None:
    text = render.sshd_config("10.213.0.11")
    assert "ListenAddress 10.213.0.11:22" in text
    assert "PasswordAuthentication no" in text


def test_hosts_file_lists_every_node_and_the_mirror() -> None:
    from tbctl import nodes

    text = nodes.hosts_file(config.make_nodes(3))
    assert "10.213.0.13 node3\n" in text
    assert "10.213.0.1 testbed-mirror\n" in text
    assert "127.0.1.1" not in text  # gloo must resolve a node's name to its cluster address


# --------------------------------------------------------------------------- HGX (issue 16)


def test_hgx_stand_ins_one_fabric_manager_per_driver_version() -> None:
    pkgs = render.catalog(KERNEL, 9)
    fm = {p.version: p for p in pkgs if p.name == "nvidia-fabricmanager"}
    assert sorted(fm) == sorted(render.DRIVER_BRANCHES.values())
    for version, p in fm.items():
        assert p.repo == "cuda" and p.epoch is None
        assert "/usr/lib/systemd/system/nvidia-fabricmanager.service" in p.files
        assert f"version is : {version}" in p.files["/usr/bin/nv-fabricmanager"][1]
        assert "AutoReqProv: no" in render.spec(p)
        assert f"{render.driver_branch_of(version)}-open" in p.streams
    names = {p.name: p for p in pkgs}
    assert names["nvlsm"].repo == "cuda" and not names["nvlsm"].streams  # not modular
    for n in ("rdma-core", "libibverbs-utils", "infiniband-diags"):
        assert names[n].repo == "base"
    dcgm = names["datacenter-gpu-manager-4-cuda13"]
    assert "/usr/lib/systemd/system/nvidia-dcgm.service" in dcgm.files


def test_fm_profile_adds_fabric_manager_to_the_default_profile() -> None:
    cuda = [p for p in render.catalog(KERNEL, 8) if p.repo == "cuda"]
    docs = list(yaml.safe_load_all(render.modules_yaml(cuda, ".el8")))
    streams = {d["data"]["stream"]: d["data"] for d in docs if d["document"] == "modulemd"}
    s = streams["575-open"]
    assert s["profiles"]["fm"]["rpms"] == ["nvidia-fabricmanager", "nvidia-open"]
    assert "nvidia-fabricmanager-0:575.57.08-1.el8.x86_64" in s["artifacts"]["rpms"]
    assert not [a for a in s["artifacts"]["rpms"] if "580." in a]


def test_hgx_pose_lspci_and_sysfs_tree() -> None:
    from gpufleet.node import ib_ports as ibports
    from gpufleet.provisioning import fabric_packages as fabricpkg

    listing = render.hgx_lspci("h100")
    assert fabricpkg.nvswitches_from_lspci(listing) == [f"0000:0{i}:00.0" for i in range(5, 9)]
    files = render.hgx_files("b200")
    assert files["/usr/local/sbin/lspci"][1] == 0o755
    root = render.HGX_IB_ROOT
    lines = [
        f"{path.removeprefix(root + '/')}\t{text.strip()}"
        for path, (text, _) in files.items()
        if path.startswith(root)
    ]
    raw = ibports.raw_from_listing("\n".join(lines))
    assert ibports.nccl_ib_hca(raw) == ["mlx5_0:1", "mlx5_1:1"]
    hv = render.hgx_host_vars("b200")
    assert hv["gpufleet_gpu_archs"] == ["sm_100"]
    assert fabricpkg.fabric_needs(fabricpkg.nvswitches_from_lspci(render.hgx_lspci("b200")),
                                  hv["gpufleet_gpu_archs"])["nvlsm"] is True  # fmt: skip


def test_hgx_knob_parsing_and_inventory() -> None:
    assert config.parse_hgx("node1=b200, node3=h100") == {1: "b200", 3: "h100"}
    assert config.parse_hgx("") == {}
    for bad in ("node1", "node1=a100", "x=b200"):
        with pytest.raises(ValueError, match="TESTBED_HGX"):
            config.parse_hgx(bad)
    with pytest.raises(ValueError, match="NODES=2"):
        config.make_nodes(2, config.DEFAULT_MIX, {3: "h100"})
    nodes = config.make_nodes(3, config.DEFAULT_MIX, {1: "b200"})
    hosts = render.inventory_hosts(nodes, "k", "kh")["all"]["children"]["gpu_nodes"]["hosts"]
    assert hosts["node1"]["testbed_hgx"] == "b200"
    assert hosts["node1"]["infiniband_sysfs_root"] == render.HGX_IB_ROOT
    assert "testbed_hgx" not in hosts["node2"]


def test_slurm_conf_describes_every_node_and_one_controller() -> None:
    from tbctl import slurm

    node_list = config.make_nodes(3)
    conf = slurm.slurm_conf(node_list, cpus=2)
    lines = dict(
        line.split("=", 1)
        for line in conf.splitlines()
        if "=" in line and " " not in line.split("=", 1)[0]
    )
    assert lines["SlurmctldHost"] == "node1(10.213.0.11)"
    assert lines["AuthType"] == "auth/munge"
    assert lines["ProctrackType"] == "proctrack/linuxproc"  # no cgroups in the nodes
    nodes_lines = [ln for ln in conf.splitlines() if ln.startswith("NodeName=")]
    assert nodes_lines == [
        f"NodeName=node{i} NodeAddr=10.213.0.1{i} CPUs=2 State=UNKNOWN" for i in (1, 2, 3)
    ]
    assert "PartitionName=gpufleet Nodes=ALL Default=YES" in conf
    # gpufleet's role adds the HealthCheck lines; the site's file starts without them
    assert "HealthCheck" not in conf
    lo, hi = slurm.SRUN_PORTS
    assert f"SrunPortRange={lo}-{hi}" in conf
    opened = [a[-1] for a in slurm.firewall_argv() if a[1] == "--permanent"]
    assert opened == ["--add-port=6817-6818/tcp", f"--add-port={lo}-{hi}/tcp"]


def test_the_inventory_turns_on_the_health_check_only_with_slurm() -> None:
    info = render.MirrorInfo(
        "http://10.213.0.1:8213", "k.pub", "F" * 40, "10.213.0.1", "10.213.0.0/24"
    )
    assert "gpufleet_slurm_health" not in render.inventory_group_vars(info)
    with_slurm = render.inventory_group_vars(
        render.MirrorInfo(
            "http://10.213.0.1:8213", "k.pub", "F" * 40, "10.213.0.1", "10.213.0.0/24", slurm=True
        )
    )
    assert with_slurm["gpufleet_slurm_health"] is True
    assert with_slurm["slurm_health_edit_slurm_conf"] is True


def test_gpu_pose_parsing_and_inventory() -> None:
    assert config.parse_gpu("node2, node3") == {2, 3}
    assert config.parse_gpu("") == set()
    for bad in ("2", "node", "node0", "gpu2", "node2=h100"):
        with pytest.raises(ValueError, match="TESTBED_GPU"):
            config.parse_gpu(bad)
    with pytest.raises(ValueError, match="TESTBED_GPU names node4, but NODES=3"):
        config.make_nodes(3, gpu={4})
    with pytest.raises(ValueError, match="node1 is in TESTBED_HGX and TESTBED_GPU"):
        config.make_nodes(3, config.DEFAULT_MIX, {1: "h100"}, {1, 2})
    nodes = config.make_nodes(3, gpu={2})
    assert [n.gpu for n in nodes] == [False, True, False]
    hosts = render.inventory_hosts(nodes, "k", "kh")["all"]["children"]["gpu_nodes"]["hosts"]
    assert hosts["node2"]["testbed_gpu"] is True and "testbed_gpu" not in hosts["node1"]


def test_gpu_pose_pci_list_is_what_preflight_reads_as_h100_gpus() -> None:
    from gpufleet.planning import gpuarch

    gpus = gpuarch.parse_lspci(render.gpu_lspci())
    assert [g.pci for g in gpus] == [bus for bus, _ in render.GPU_PCI]
    assert {g.cc for g in gpus} == {(9, 0)}
    files = render.gpu_files()
    assert files[render.HGX_LSPCI_FILE][0] == render.gpu_lspci()
    assert {"/usr/local/sbin/lspci", "/usr/local/bin/nvidia-smi", "/usr/local/sbin/modinfo"} <= set(
        files
    )


def test_every_scriptlet_interpreter_is_provided_in_each_el_catalog() -> None:
    """rpmbuild makes a package with %post require /bin/sh; the node's RPM database is empty
    (Debian root), so the catalog must provide it or dnf refuses the driver."""
    for major in (8, 9, 10):
        pkgs = render.catalog(KERNEL, major)
        with_scripts = [p for p in pkgs if p.post or p.postun]
        assert with_scripts, major
        assert any("/bin/sh" in p.provides for p in pkgs), major
        for p in with_scripts:
            text = render.spec(p)
            assert "\n%post\n" in text and "\n%postun\n" in text, p.name


def test_stand_in_dkms_builds_for_each_kernel_tree_and_erase_only_removes(tmp_path: Path) -> None:
    """The %post/%postun bodies, run with / moved under tmp_path (sed on the absolute paths)."""
    import subprocess

    def run(body: str, *args: str) -> None:
        script = body.replace("/usr/src/", f"{tmp_path}/usr/src/").replace(
            "/lib/modules/", f"{tmp_path}/lib/modules/"
        )
        subprocess.run(["sh", "-c", script, "sh", *args], check=True)

    for k in ("6.1.0-a", "6.2.0-b"):
        (tmp_path / f"usr/src/kernels/{k}").mkdir(parents=True)
    (tmp_path / "usr/src/kernels/6.1.0-a/Makefile").write_text("")  # only 6.1 has a tree
    run(render.dkms_post("580.95.05"))
    built = tmp_path / "lib/modules/6.1.0-a/extra/nvidia.ko.xz"
    assert built.read_text() == "version=580.95.05\nvermagic=6.1.0-a\n"
    assert not (tmp_path / "lib/modules/6.2.0-b").exists()
    run(render.DKMS_POSTUN, "1")  # an upgrade or downgrade keeps the new package's module
    assert built.exists()
    run(render.DKMS_POSTUN, "0")  # erased
    assert not built.exists()


def test_the_inventory_turns_on_the_health_timer_only_with_the_monitor() -> None:
    base = ("http://10.213.0.1:8213", "k.pub", "F" * 40, "10.213.0.1", "10.213.0.0/24")
    assert "gpufleet_health_timer" not in render.inventory_group_vars(render.MirrorInfo(*base))
    on = render.inventory_group_vars(render.MirrorInfo(*base, monitor=True))
    assert on["gpufleet_health_timer"] is True
    # gpufleet writes where Debian's node_exporter reads, and the node_exporter the testbed
    # starts reads there
    assert on["gpufleet_health_textfile_dir"] == config.NODE_TEXTFILE_DIR
    assert f"--collector.textfile.directory={config.NODE_TEXTFILE_DIR}" in monitor.exporter_args(
        "10.213.0.12"
    )
    assert on["health_timer_interval"] == "15s"


def test_prometheus_scrapes_every_node_by_name_with_the_shipped_rules(tmp_path: Path) -> None:
    rules = tmp_path / "gpufleet.rules.yml"
    nodes = config.make_nodes(3)
    text = monitor.prometheus_config(
        [(n.name, f"{n.address}:{monitor.EXPORTER_PORT}") for n in nodes], rules, 5
    )
    conf = yaml.safe_load(text)
    assert conf["rule_files"] == [str(rules)]
    assert conf["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    (job,) = conf["scrape_configs"]
    assert {(c["labels"]["node"], c["targets"][0]) for c in job["static_configs"]} == {
        ("node1", "10.213.0.11:9100"), ("node2", "10.213.0.12:9100"), ("node3", "10.213.0.13:9100"),
    }  # fmt: skip
    args = monitor.exporter_args("10.213.0.12")
    assert args.startswith('ARGS="--web.listen-address=10.213.0.12:9100 ')  # the node's address
    opened = [a[-1] for a in monitor.firewall_argv() if a[1] == "--permanent"]
    assert opened == ["--add-port=9100/tcp"]
