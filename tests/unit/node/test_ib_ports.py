"""gpufleet.node.ib_ports.raw_from_listing / nccl_ib_hca: what cluster_network reads from sysfs (one
``path<TAB>content`` line per file, the role's shell loop) and the ports it writes into
NCCL_IB_HCA. The listing is produced here by the same loop over a sysfs-like tree.

gpudirect_rdma on fake trees under tmp_path (sys/class/infiniband, sys/kernel/mm/memory_peers):
not loaded, loaded but not registered, loaded and registered, and not applicable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpufleet.node import ib_ports as ibports
from gpufleet.node import platform_checks
from gpufleet.results import Record

# the loop of roles/cluster_network/tasks/ibports.yml
LOOP = r"""cd "$1" 2>/dev/null || exit 0
for f in */ports/*/state */ports/*/phys_state */ports/*/link_layer */ports/*/rate; do
  if [ -r "$f" ]; then printf '%s\t%s\n' "$f" "$(cat "$f" 2>/dev/null)"; fi
done"""


def port(root: Path, hca: str, n: int, state: str, phys: str, layer: str, rate: str) -> None:
    d = root / hca / "ports" / str(n)
    d.mkdir(parents=True)
    for name, text in (("state", state), ("phys_state", phys), ("link_layer", layer),
                       ("rate", rate)):  # fmt: skip
        (d / name).write_text(text + "\n")


def listing(root: Path) -> str:
    return subprocess.run(
        ["bash", "-c", LOOP, "loop", str(root)], capture_output=True, text=True, check=True
    ).stdout


def test_active_infiniband_ports_only(tmp_path: Path) -> None:
    port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)")
    port(tmp_path, "mlx5_1", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)")
    port(tmp_path, "mlx5_2", 1, "1: DOWN", "2: Polling", "InfiniBand", "10 Gb/sec (4X SDR)")
    port(tmp_path, "mlx5_3", 1, "4: ACTIVE", "5: LinkUp", "Ethernet", "100 Gb/sec (4X EDR)")
    raw = ibports.raw_from_listing(listing(tmp_path))
    assert raw == ibports.read_ib_sysfs(tmp_path)  # same raw form as the checks' reader
    assert ibports.nccl_ib_hca(raw) == ["mlx5_0:1", "mlx5_1:1"]
    assert ibports.nccl_ib_hca(raw, "Ethernet") == ["mlx5_3:1"]


def test_no_tree_no_ports(tmp_path: Path) -> None:
    assert listing(tmp_path / "absent") == ""
    assert ibports.nccl_ib_hca(ibports.raw_from_listing("")) == []
    assert ibports.raw_from_listing("garbage line\nmlx5_0/ports/1/state") == {}


# ---------------------------------------------------------------- gpudirect_rdma


def node_tree(root: Path, *, clients: tuple[str, ...] = (), port_active: bool = True) -> Path:
    """A fake root with one NDR port under sys/class/infiniband and the peer-memory clients
    under sys/kernel/mm/memory_peers (as ib_core makes them once nvidia-peermem registers)."""
    state, phys = ("4: ACTIVE", "5: LinkUp") if port_active else ("1: DOWN", "2: Polling")
    port(root / "sys/class/infiniband", "mlx5_0", 1, state, phys, "InfiniBand",
         "400 Gb/sec (4X NDR)")  # fmt: skip
    peers = root / "sys/kernel/mm/memory_peers"
    peers.mkdir(parents=True)
    for client in clients:
        (peers / client).mkdir()
        (peers / client / "version").write_text("1.1\n")
    return root


def gdr(root: Path, modules: tuple[str, ...], gpus: int | None = 8) -> Record:
    ports = ibports.ports_from_raw(ibports.read_ib_sysfs(root / "sys/class/infiniband"))
    peers = ibports.read_memory_peers(root / "sys/kernel/mm/memory_peers")
    return ibports.gpudirect_rdma(ports, gpus, modules, peers)


def test_read_memory_peers(tmp_path: Path) -> None:
    peers = node_tree(tmp_path, clients=("nv_mem_nc",)) / "sys/kernel/mm/memory_peers"
    assert ibports.read_memory_peers(peers) == ("nv_mem_nc",)
    (peers / "nv_mem").mkdir()  # a client directory without its version file is not registered
    assert ibports.read_memory_peers(peers) == ("nv_mem_nc",)
    assert ibports.read_memory_peers(tmp_path / "absent") == ()  # ib_core without peer memory


@pytest.mark.parametrize("client", ibports.MEMORY_PEERS)
@pytest.mark.parametrize("module", ibports.PEERMEM_MODULES)
def test_loaded_and_registered_passes(tmp_path: Path, module: str, client: str) -> None:
    r = gdr(node_tree(tmp_path, clients=(client,)), ("nvidia", module, "ib_core"))
    assert r.status == "pass", r.message
    assert r.message == (
        f"{module} loaded and registered as {client}; 8 GPU(s) and active RDMA port(s) mlx5_0:1."
    )
    assert r.value == {"modules": [module], "registered": [client]}


def test_not_loaded_fails_with_the_load_remedy(tmp_path: Path) -> None:
    r = gdr(node_tree(tmp_path, clients=()), ("nvidia", "ib_core"))
    assert (r.status, r.name, r.remedy) == ("fail", "gpudirect_rdma", ibports.PEERMEM_REMEDY)
    assert "mlx5_0:1, but nvidia-peermem is not loaded" in r.message
    assert "modprobe nvidia-peermem" in r.remedy
    assert "/etc/modules-load.d/nvidia-peermem.conf" in r.remedy


def test_loaded_but_not_registered_fails_with_the_rebuild_remedy(tmp_path: Path) -> None:
    r = gdr(node_tree(tmp_path, clients=()), ("nvidia", "nvidia_peermem", "ib_core"))
    assert (r.status, r.remedy) == ("fail", ibports.PEERMEM_REGISTER_REMEDY)
    assert "nvidia_peermem is loaded but not registered with the peer-memory API" in r.message
    assert "/sys/kernel/mm/memory_peers/nv_mem/version" in r.message
    assert "rebuild" in r.remedy and "OFED" in r.remedy
    assert r.message.endswith(f"Fix: {ibports.PEERMEM_REGISTER_REMEDY}")


def test_registration_unknown_is_incomplete(tmp_path: Path) -> None:
    ports = ibports.ports_from_raw(
        ibports.read_ib_sysfs(node_tree(tmp_path) / "sys/class/infiniband")
    )
    r = ibports.gpudirect_rdma(ports, 8, ["nvidia_peermem"], None)
    assert (r.status, r.remedy) == ("incomplete", ibports.PEERS_UNKNOWN_REMEDY)
    # not loaded is a fail whatever the registration: nothing to be unsure about
    assert ibports.gpudirect_rdma(ports, 8, [], None).status == "fail"


def test_not_applicable_without_gpu_hca_or_active_port(tmp_path: Path) -> None:
    loaded = ("nvidia_peermem",)
    assert gdr(node_tree(tmp_path / "a"), loaded, gpus=0).message == (
        "no NVIDIA GPU: no GPUDirect RDMA path"
    )
    down = gdr(node_tree(tmp_path / "b", port_active=False), loaded)
    assert down.status == "skip" and "no active InfiniBand/RoCE port" in down.message
    (tmp_path / "c").mkdir()
    none = gdr(tmp_path / "c", loaded)
    assert (none.status, none.message) == (
        "skip",
        "no InfiniBand/RoCE HCA: no GPUDirect RDMA path",
    )


def test_one_gpudirect_check() -> None:
    """The registration test lives in gpudirect_rdma; platform_checks has no second copy."""
    assert not hasattr(platform_checks, "peermem_registered")
    assert not hasattr(platform_checks, "read_peermem")
