"""gpufleet.node.ib_ports.raw_from_listing / nccl_ib_hca: what cluster_network reads from sysfs (one
``path<TAB>content`` line per file, the role's shell loop) and the ports it writes into
NCCL_IB_HCA. The listing is produced here by the same loop over a sysfs-like tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpufleet.node import ib_ports as ibports

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
