"""gpufleet.verify.workers.gpus: the ranks per node verify launches, from the driver, not torch,
and only the GPUs CUDA_VISIBLE_DEVICES leaves to the ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.verify.workers import gpus
from nvml_fakes import FakeNVMLError, fake_pynvml

RECORDING = Path(__file__).parents[2] / "fixtures" / "nvml" / "healthy-h100x8.json"
#: the 8 GPU UUIDs of the recorded H100 node (GPU-6a2b1f0e-0000-4000-8000-00000000000<i>)
UUIDS: list[str] = [str(g["uuid"]) for g in json.loads(RECORDING.read_text())["nvml"]["gpus"]]
#: two MIG devices on GPU 3 (slots 0 and 2 of 7), none elsewhere
MIGS = {
    (3, 0): "MIG-1f2e3d4c-aaaa-5bbb-8ccc-000000000030",
    (3, 2): "MIG-1f2e3d4c-aaaa-5bbb-8ccc-000000000032",
}


def recorded_node(**over: Any) -> SimpleNamespace:
    """A pynvml answering as the recorded 8-GPU node, with GPU 3 in MIG mode."""

    def uuid(h: int | tuple[int, int]) -> str | bytes:
        if isinstance(h, tuple):
            return MIGS[h]
        return UUIDS[h].encode() if h == 7 else UUIDS[h]  # older pynvml: bytes

    def mig_handle(h: int, slot: int) -> tuple[int, int]:
        if (h, slot) not in MIGS:
            raise FakeNVMLError(6)  # NVML_ERROR_NOT_FOUND: an empty slot
        return (h, slot)

    def mig_mode(h: int) -> tuple[int, int]:
        if h == 0:
            raise FakeNVMLError(3)  # NOT_SUPPORTED
        return (1, 1) if h == 3 else (0, 0)

    base = {
        "nvmlDeviceGetCount": lambda: len(UUIDS),
        "nvmlDeviceGetUUID": uuid,
        "nvmlDeviceGetMigMode": mig_mode,
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
    }
    return fake_pynvml(**{**base, **over})


@pytest.fixture
def node() -> gpus.Devices:
    found = gpus.nvml_devices(recorded_node())
    assert found is not None
    return found


def test_nvml_lists_the_gpus_their_uuids_and_the_mig_devices(node: gpus.Devices) -> None:
    assert (node.count, node.gpu_uuids, node.source) == (8, tuple(UUIDS), "NVML")
    assert node.mig_uuids == tuple((u, 3) for u in MIGS.values())


def test_nvml_that_cannot_start_or_count_gives_way_to_proc(tmp_path: Path) -> None:
    def fail() -> None:
        raise FakeNVMLError(9)

    assert gpus.nvml_devices(recorded_node(nvmlInit=fail)) is None
    assert gpus.nvml_devices(recorded_node(nvmlDeviceGetCount=fail)) is None
    (tmp_path / "0000:3b:00.0").mkdir()
    assert gpus.node_devices(nvml=lambda: None, root=tmp_path).count == 1


def test_a_gpu_nvml_cannot_reach_still_counts_without_uuids() -> None:
    def lost(i: int) -> int:
        if i == 5:
            raise FakeNVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        return i

    found = gpus.nvml_devices(recorded_node(nvmlDeviceGetHandleByIndex=lost))
    assert found is not None and (found.count, found.gpu_uuids) == (8, None)
    assert gpus.visible_count("0,1", found) == 2
    with pytest.raises(gpus.NotVisibleError, match="GPU UUIDs cannot be read"):
        gpus.visible_count(UUIDS[0], found)


def test_nvml_count_wins_over_proc(tmp_path: Path, node: gpus.Devices) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()
    assert gpus.node_devices(nvml=lambda: node, root=tmp_path).count == 8


def test_without_nvml_the_driver_proc_entries_count_and_name_the_uuids(tmp_path: Path) -> None:
    for i, bus in enumerate(("0000:5e:00.0", "0000:3b:00.0")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t {UUIDS[i]}\n"
        )
    (tmp_path / "stray-file").write_text("")
    found = gpus.node_devices(nvml=lambda: None, root=tmp_path)
    # NVML and CUDA number by PCI bus id: 0000:3b (written second) is GPU 0
    assert (found.count, found.gpu_uuids, found.mig_uuids) == (2, (UUIDS[1], UUIDS[0]), None)
    assert gpus.visible_count(UUIDS[0][:12] + "-0000-4000-8000-000000000000", found) == 1
    assert gpus.node_devices(nvml=lambda: None, root=tmp_path / "absent").count == 0
    (tmp_path / "0000:3b:00.0" / "information").unlink()
    assert gpus.proc_devices(tmp_path).gpu_uuids is None


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (None, 8),  # unset: every GPU
        ("", 0),  # empty: none
        ("-1", 0),
        ("0,1", 2),
        (" 6, 7 ", 2),
        ("7,2,5", 3),  # the order does not matter to the count
        ("0,2,-1,1", 2),  # CUDA's own example: 1 comes after an invalid entry
        ("0,abc,1,2", 1),
        ("0,,1", 1),  # an empty entry ends the list too
        ("3,9x", 1),
        (UUIDS[4], 1),
        (f"{UUIDS[4]},{UUIDS[6]}", 2),
        ("GPU-6a2b1f0e-0000-4000-8000-000000000005", 1),
        ("gpu-6a2b1f0e,0", 0),  # not CUDA's GPU- prefix: ends the list at once
        (MIGS[3, 0], 1),
        (f"{MIGS[3, 0]},{MIGS[3, 2]}", 2),
        ("MIG-1f2e3d4c-aaaa-5bbb-8ccc-000000000032,0", 2),
        (f"MIG-{UUIDS[3]}/1/0", 1),  # MIG-GPU-<uuid>/<gi>/<ci> of drivers before R470
        (f"0,{UUIDS[1]},{MIGS[3, 2]}", 3),
    ],
)
def test_visible_count_follows_cuda(node: gpus.Devices, value: str | None, count: int) -> None:
    assert gpus.visible_count(value, node) == count


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0,8", "names GPU index 8, but this node has 8 GPU(s) (indices 0-7, counted by NVML)"),
        ("0,1,12,-1", "GPU index 12"),  # checked before the end of the list
        ("GPU-ffff", "names GPU-ffff, which is no GPU of this node"),
        ("GPU-6A2B1F0E-0000-4000-8000-000000000002", "which is no GPU of this node"),
        ("GPU-6a2b1f0e", "GPU-6a2b1f0e names 8 GPUs"),
        ("MIG-1f2e3d4c-aaaa-5bbb-8ccc-0000000000", "names 2 MIG devices"),
        ("MIG-0000", "names MIG-0000, which is no MIG device of this node"),
        (f"MIG-{UUIDS[2]}/1/0", "GPU 2 has no MIG devices"),
        ("1,1", "names one device twice ('1' and '1')"),
        (f"4,{UUIDS[4]}", f"names one device twice ('4' and '{UUIDS[4]}')"),
    ],
)
def test_a_device_the_node_lacks_is_refused(node: gpus.Devices, value: str, message: str) -> None:
    with pytest.raises(gpus.NotVisibleError) as err:
        gpus.visible_count(value, node)
    assert message in str(err.value)


def test_without_nvml_a_mig_entry_is_refused_not_counted_unchecked(tmp_path: Path) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()
    (tmp_path / "0000:3b:00.0" / "information").write_text(f"GPU UUID: {UUIDS[0]}\n")
    found = gpus.proc_devices(tmp_path)
    with pytest.raises(gpus.NotVisibleError, match="MIG devices are known to NVML only"):
        gpus.visible_count(MIGS[3, 0], found)
    assert gpus.visible_count("-1," + MIGS[3, 0], found) == 0  # never read: after the end


def test_a_node_without_gpus_counts_zero_whatever_the_variable_says() -> None:
    cpu = gpus.Devices(0, (), None, "/proc/driver/nvidia/gpus")
    assert gpus.visible_count("0,1", cpu) == 0
    assert gpus.visible_count(MIGS[3, 0], cpu) == 0


def test_the_env_file_the_ranks_get_wins_over_the_login_environment(tmp_path: Path) -> None:
    login = {"CUDA_VISIBLE_DEVICES": "0,1,2"}
    env_file = tmp_path / "nccl.env"
    env_file.write_text("NCCL_SOCKET_IFNAME=eth1\n")
    assert gpus.ranks_environment(str(env_file), login) == (
        "0,1,2",
        "the environment of the node's login session",
    )
    env_file.write_text('export CUDA_VISIBLE_DEVICES="4,5"\n')
    assert gpus.ranks_environment(str(env_file), login) == ("4,5", str(env_file))
    assert gpus.ranks_environment(str(tmp_path / "absent.env"), {})[0] is None
    assert gpus.ranks_environment("", login)[0] == "0,1,2"


def test_the_refusal_names_node_variable_value_source_and_remedy(node: gpus.Devices) -> None:
    line = gpus.refusal("gpu3", "0,9", "/etc/gpufleet/nccl.env", "names GPU index 9", node)
    assert line == (
        "gpu3: CUDA_VISIBLE_DEVICES='0,9' (from /etc/gpufleet/nccl.env) names GPU index 9 -> "
        "set CUDA_VISIBLE_DEVICES in /etc/gpufleet/nccl.env to GPUs of this node (indices 0-7 "
        "or UUIDs from `nvidia-smi -L`), or remove it there to use every GPU"
    )


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.verify.workers.gpus", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_cli_prints_zero_here_and_refuses_an_env_without_torch(tmp_path: Path) -> None:
    ok = _cli()
    assert (ok.returncode, ok.stdout.strip()) == (0, "0"), ok.stderr
    # a bare venv (no torch) running a copy of the module alone (stdlib only)
    pkg = tmp_path / "pkg" / "gpufleet" / "verify" / "workers"
    pkg.mkdir(parents=True)
    for init in (pkg.parent.parent, pkg.parent, pkg):
        (init / "__init__.py").write_text("")
    (pkg / "gpus.py").write_text(Path(gpus.__file__).read_text())
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bad = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "gpufleet.verify.workers.gpus", "--env-file", "x"],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path / "pkg")},
    )
    assert bad.returncode == 3 and "No module named 'torch'" in bad.stderr, bad


def test_cli_exits_4_with_one_line_when_the_variable_names_a_missing_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    node = gpus.nvml_devices(recorded_node())
    monkeypatch.setattr(gpus, "node_devices", lambda: node)
    monkeypatch.setattr("socket.gethostname", lambda: "gpu7")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpus.main([]) == 0
    assert capsys.readouterr().out == "2\n"
    env_file = tmp_path / "nccl.env"
    env_file.write_text("CUDA_VISIBLE_DEVICES=0,8\n")
    assert gpus.main(["--env-file", str(env_file)]) == gpus.EXIT_NOT_VISIBLE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"gpu7: CUDA_VISIBLE_DEVICES='0,8' (from {env_file}) names GPU index 8")


def test_package_digest_is_the_controllers_tree_digest_of_this_package() -> None:
    from gpufleet.provisioning.converge_digest import tree_digest

    out = _cli("--package-digest")
    count, digest_line = out.stdout.splitlines()
    assert count == "0" and out.returncode == 0, out.stderr
    assert digest_line == f"gpufleet {tree_digest(str(Path(gpus.__file__).parents[2]))}"
