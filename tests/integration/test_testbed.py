"""Integration tests of the simulated EL cluster: they bring the testbed up (3 nodes unless
TESTBED_TEST_NODES says otherwise), talk to the nodes over real SSH, and end with
`testbed down`, checking that nothing is left behind.

They need root and the host tools of `make testbed-deps`; a cold run builds the base root
filesystem with debootstrap (Debian mirror, ~2.5 min) and downloads wheels once. They take
over any testbed that is already up and tear it down at the end.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "testbed"))

from tbctl import config, nodes  # noqa: E402
from tbctl.sh import processes  # noqa: E402

import testbed_lib  # noqa: E402
from testbed_lib import ssh  # noqa: E402

# the first `up` may build the base rootfs (debootstrap)
pytestmark = testbed_lib.cluster_marks(timeout=1800)

N_NODES = int(os.environ.get("TESTBED_TEST_NODES", "3"))
# a cold `up` (debootstrap) within the module's 1800 s
tbctl = functools.partial(testbed_lib.tbctl, timeout=1200)


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[config.Node]]:
    up = tbctl("up", "--nodes", str(N_NODES))
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"inventory: {config.INVENTORY_DIR / 'hosts.yml'}" in up.stdout
    yield config.make_nodes(N_NODES)
    tbctl("down")


def el_node(cluster: list[config.Node], majors: tuple[int, ...]) -> config.Node:
    for n in cluster:
        if n.release.major in majors:
            return n
    pytest.skip(f"no node of EL {majors} in this testbed")
    raise AssertionError  # unreachable


def test_each_node_answers_ssh_with_its_own_name_and_address(cluster: list[config.Node]) -> None:
    for n in cluster:
        r = ssh(n, "hostname; ip -4 -o addr show dev eth0; cat /etc/redhat-release")
        assert r.returncode == 0, f"{n.name}: {r.stderr}"
        lines = r.stdout.splitlines()
        assert lines[0] == n.name
        assert f"inet {n.address}/24" in lines[1]
        assert lines[2] == n.release.release_line


def test_up_again_keeps_the_running_nodes(cluster: list[config.Node]) -> None:
    before = {n.name: nodes.init_pid(n) for n in cluster}
    again = tbctl("up", "--nodes", str(N_NODES))
    assert again.returncode == 0, again.stdout + again.stderr
    assert {n.name: nodes.init_pid(n) for n in cluster} == before
    assert "already running" in again.stdout


def test_ansible_facts_say_el_with_dnf(cluster: list[config.Node], tmp_path: Path) -> None:
    ansible = Path(sys.executable).with_name("ansible")
    if not ansible.exists():
        pytest.skip("ansible is not installed in this venv (make setup)")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    r = subprocess.run(
        [
            str(ansible),
            "-i",
            str(config.INVENTORY_DIR),
            "gpu_nodes",
            "-m",
            "setup",
            "-a",
            "gather_subset=!all,!min,distribution,pkg_mgr",
            "--tree",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for n in cluster:
        facts = json.loads((tmp_path / n.name).read_text())["ansible_facts"]
        assert facts["ansible_os_family"] == "RedHat", (n.name, facts)
        assert facts["ansible_distribution_major_version"] == str(n.release.major)
        assert facts["ansible_pkg_mgr"] == "dnf"
        want = {"almalinux": "AlmaLinux", "rocky": "Rocky", "centos": "CentOS"}
        assert facts["ansible_distribution"] == want[n.release.distro_id]


def _repo(node: config.Node, repo_id: str, path: str = "", repo_gpgcheck: int = 1) -> str:
    """Shell that writes /etc/yum.repos.d/<repo_id>.repo for ``path`` of the testbed mirror
    (default: the node's CUDA repository), signed by the testbed key."""
    url = config.mirror_url()
    baseurl = f"{url}/{path or f'cuda/rhel{node.release.major}/x86_64'}"
    key = f"{url}/keys/RPM-GPG-KEY-gpufleet-testbed"
    return (
        f"printf '[{repo_id}]\\nname={repo_id}\\nbaseurl={baseurl}\\nenabled=1\\n"
        f"gpgcheck=1\\nrepo_gpgcheck={repo_gpgcheck}\\ngpgkey={key}\\n' "
        f"> /etc/yum.repos.d/{repo_id}.repo"
    )


def test_dnf_installs_a_signed_standin_with_gpgcheck(cluster: list[config.Node]) -> None:
    for n in cluster:
        rid = "gftb-test-cuda"
        r = ssh(
            n,
            _repo(n, rid) + " && "
            f"dnf -y --disablerepo='*' --enablerepo={rid} install cuda-toolkit-12-8 && "
            "/usr/local/cuda-12.8/bin/nvcc --version && rpm -q cuda-toolkit-12-8 && "
            f"dnf -y --disablerepo='*' remove cuda-toolkit-12-8; rm -f /etc/yum.repos.d/{rid}.repo",
        )
        assert r.returncode == 0, f"{n.name}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        assert "Cuda compilation tools, release 12.8" in r.stdout
        assert "STAND-IN" in r.stdout


def test_dnf_understands_the_nvidia_driver_module(cluster: list[config.Node]) -> None:
    n = el_node(cluster, (8, 9))
    rid = "gftb-test-mod"
    r = ssh(
        n,
        _repo(n, rid) + " && "
        f"dnf -y --disablerepo='*' --enablerepo={rid} module list nvidia-driver; "
        f"rm -f /etc/yum.repos.d/{rid}.repo",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for stream in ("open-dkms", "latest-dkms", "580-open", "575-dkms"):
        assert stream in r.stdout, r.stdout


def test_a_package_signed_with_another_key_is_refused(cluster: list[config.Node]) -> None:
    n = cluster[0]
    rid = "gftb-test-foreign"
    # the repo's own metadata is signed by the foreign key too: only check the packages here
    r = ssh(
        n,
        _repo(n, rid, "foreign", repo_gpgcheck=0) + " && "
        f"dnf -y --disablerepo='*' --enablerepo={rid} install gpufleet-foreign-test; "
        f"echo rc=$?; rpm -q gpufleet-foreign-test; rm -f /etc/yum.repos.d/{rid}.repo",
    )
    assert "rc=0" not in r.stdout, r.stdout
    assert "package gpufleet-foreign-test is not installed" in r.stdout, r.stdout
    out = (r.stdout + r.stderr).lower()
    assert "gpg" in out or "key" in out, out


def test_firewalld_answers_in_each_node(cluster: list[config.Node]) -> None:
    for n in cluster:
        r = ssh(n, "firewall-cmd --state && systemctl is-active firewalld sshd")
        assert r.returncode == 0, f"{n.name}: {r.stdout} {r.stderr}"
        assert r.stdout.split() == ["running", "active", "active"]


def test_up_with_other_node_counts_removes_and_adds_nodes(cluster: list[config.Node]) -> None:
    if len(cluster) < 2:
        pytest.skip("needs at least 2 nodes")
    one = tbctl("up", "--nodes", "1")
    assert one.returncode == 0, one.stdout + one.stderr
    assert nodes.our_netns() == ["gftb-node1"]
    assert "node2:" not in (config.INVENTORY_DIR / "hosts.yml").read_text()
    back = tbctl("up", "--nodes", str(len(cluster)))
    assert back.returncode == 0, back.stdout + back.stderr
    assert sorted(nodes.our_netns()) == sorted(n.netns for n in cluster)
    last = cluster[-1]
    r = ssh(cluster[0], f"getent hosts {last.name}")
    assert r.stdout.split()[:2] == [last.address, last.name], r.stdout + r.stderr


def test_down_leaves_nothing_behind(cluster: list[config.Node]) -> None:
    pids = [nodes.init_pid(n) for n in cluster]
    # every process of every node (sshd, firewalld, dbus, ...): same PID namespace as its init
    pidns = {os.readlink(f"/proc/{p}/ns/pid") for p in pids if p}
    node_procs = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "ns/pid") in pidns:
                node_procs.append(int(proc.name))
        except OSError:
            continue
    assert len(node_procs) > 3 * len(cluster)  # systemd, journald, dbus, sshd, firewalld...
    first = tbctl("down")
    assert first.returncode == 0, first.stdout + first.stderr
    second = tbctl("down")
    assert second.returncode == 0, second.stdout + second.stderr
    assert nodes.our_netns() == []
    assert nodes.our_links() == []
    assert nodes.our_cgroups() == []
    assert nodes.our_mounts(config.STATE_DIR) == []
    assert not config.RUN_DIR.exists()
    assert not config.INVENTORY_DIR.exists()
    for pid in node_procs:
        assert not Path(f"/proc/{pid}").exists(), f"node process {pid} survived"
    ours = [
        cmd
        for _, cmd in processes()
        if str(config.STATE_DIR) in cmd or f"--bind {config.BRIDGE_ADDRESS}" in cmd
    ]
    assert ours == []
    assert not Path("/run/gpufleet-testbed.owner").exists()
    assert (config.CACHE_DIR / "rootfs").is_dir()  # the cache stays
