"""tbctl.cuda_wheels without a download: pin parsing, pip's platform tags, wheel names, the
sha256 check against an index page, the cache stamp, and the plan-vs-found comparison, all
on fake metadata (no network, no pip, no venv)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "testbed"))

from tbctl import cuda_wheels as cw

from gpufleet.planning.planner import PlanRequest, make_plan

NCCL = "nvidia_nccl_cu13-2.29.7-py3-none-manylinux_2_18_x86_64.whl"
RUNTIME = "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
TORCH = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
TRITON = "triton-3.7.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"

PLAN = {
    "torch": "2.13.0",
    "variant": "cu130",
    "variant_is_default": True,
    "expected_build": "2.13.0+cu130",
    "cuda": "13.0",
    "nccl": "2.29.7",
}
PROBE = {
    "torch_version": "2.13.0+cu130",
    "cuda_version": "13.0",
    "cuda_available": False,
    "nccl_version": "2.29.7",
    "cudnn_version": 92000,
    "loaded_libraries": [
        "/tmp/v/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13",
        "/tmp/v/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
    ],
}
VERSIONS = {
    "torch": "2.13.0",
    "nvidia-nccl-cu13": "2.29.7",
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cuda-nvrtc": "13.0.88",
    "triton": "3.7.1",
}


# --- the pin and pip's target ---


def test_the_pin_is_the_first_torch_line_comments_and_other_projects_left_out() -> None:
    constraints = "# torch==9.9.9 in a comment\ntorchvision==0.28.0\nnumpy==2.3.1\n"
    controller = "pytest\ntorch==2.13.0 ; sys_platform == 'linux'  # CPU build\n"
    assert cw.pinned_torch([constraints, controller]) == "2.13.0"


def test_no_pin_is_an_error_naming_the_files() -> None:
    with pytest.raises(cw.CudaWheelsError, match=r"no `torch==X\.Y\.Z` pin in .*controller\.txt"):
        cw.pinned_torch(["torch>=2.0\n", "numpy==2.3.1\n"])


def test_the_repository_pins_a_torch_release() -> None:
    pin = cw.pinned_torch(p.read_text() for p in cw.PIN_FILES if p.is_file())
    assert pin.count(".") == 2 and "+" not in pin


def test_platforms_cover_manylinux_up_to_the_plans_glibc() -> None:
    tags = cw.platforms("2.28")
    assert tags[0] == "manylinux_2_28_x86_64"
    # the tags the torch 2.13 nvidia wheels carry, each spelled out for pip 23
    for tag in ("manylinux_2_27_x86_64", "manylinux_2_18_x86_64", "manylinux_2_17_x86_64"):
        assert tag in tags
    assert "manylinux_2_29_x86_64" not in tags
    assert tags[-2:] == ["manylinux2014_x86_64", "any"]
    assert "manylinux_2_28_x86_64" not in cw.platforms("2.17")


@pytest.mark.parametrize("bad", ["2", "3.1", "2.28.1", ""])
def test_a_glibc_that_is_not_2_n_is_refused(bad: str) -> None:
    with pytest.raises(cw.CudaWheelsError, match="glibc_required"):
        cw.platforms(bad)


@pytest.mark.parametrize(
    ("filename", "project", "version"),
    [
        (NCCL, "nvidia-nccl-cu13", "2.29.7"),
        (RUNTIME, "nvidia-cuda-runtime", "13.0.96"),
        ("MarkupSafe-3.0.4-cp311-cp311-manylinux2014_x86_64.whl", "markupsafe", "3.0.4"),
        ("cuda_toolkit-13.0.3.0-py2.py3-none-any.whl", "cuda-toolkit", "13.0.3.0"),
        ("pkg-1.0-1build-py3-none-any.whl", "pkg", "1.0"),
    ],
)
def test_wheel_names(filename: str, project: str, version: str) -> None:
    assert cw.wheel_name_version(filename) == (project, version)


@pytest.mark.parametrize("bad", ["torch-2.13.0.tar.gz", "torch-2.13.0.whl", "download.log"])
def test_a_file_that_is_not_a_wheel_is_refused(bad: str) -> None:
    with pytest.raises(cw.CudaWheelsError, match="not a wheel file name"):
        cw.wheel_name_version(bad)


# --- sha256 against the index ---


def _page(*files: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "meta": {"api-version": "1.1"},
        "files": [{"filename": n, "hashes": {"sha256": h}, "size": s} for n, h, s in files]
        + [{"filename": "torch-2.13.0.tar.gz", "hashes": {}}],
    }


def test_the_index_page_is_read_by_file_name_and_files_without_sha256_are_left_out() -> None:
    page = cw.parse_simple_json(_page((TORCH, "AB" * 32, 7)))
    assert page == {TORCH: cw.IndexFile("ab" * 32, 7)}


def test_files_that_match_the_index_give_no_problem() -> None:
    files = [{"file": TORCH, "size": 7, "sha256": "ab" * 32}]
    index = {"torch": cw.parse_simple_json(_page((TORCH, "ab" * 32, 7)))}
    assert cw.hash_problems(files, index) == []


def test_a_different_sha256_size_or_a_missing_file_is_named() -> None:
    files = [
        {"file": TORCH, "size": 7, "sha256": "cd" * 32},
        {"file": NCCL, "size": 8, "sha256": "ef" * 32},
        {"file": TRITON, "size": 9, "sha256": "01" * 32},
    ]
    index = {
        "torch": cw.parse_simple_json(_page((TORCH, "ab" * 32, 7))),
        "nvidia-nccl-cu13": cw.parse_simple_json(_page((NCCL, "ef" * 32, 80))),
    }
    problems = cw.hash_problems(files, index)
    assert problems == [
        f"{TORCH}: sha256 {'cd' * 32} but the index says {'ab' * 32}",
        f"{NCCL}: 8 bytes but the index says 80",
        f"{TRITON}: not on the index page of triton",
    ]


def test_the_cache_is_checked_against_its_manifest(tmp_path: Path) -> None:
    (tmp_path / TORCH).write_bytes(b"torch")
    (tmp_path / NCCL).write_bytes(b"nccl!")
    manifest = {
        "files": [
            {"file": TORCH, "size": 5, "sha256": hashlib.sha256(b"torch").hexdigest()},
            {"file": NCCL, "size": 5, "sha256": hashlib.sha256(b"other").hexdigest()},
            {"file": TRITON, "size": 1, "sha256": "00"},
        ]
    }
    assert cw.cache_problems(tmp_path, manifest) == [
        f"{NCCL}: sha256 differs from the manifest",
        f"{TRITON}: missing",
    ]


# --- download: the stamp, the pip environment, what a download must hold ---


def _no_pip(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
    raise AssertionError("pip must not run")


def test_a_complete_download_is_not_repeated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plats = cw.platforms("2.28")
    (tmp_path / cw.STAMP).write_text(cw.download_spec("2.13.0", plats))
    (tmp_path / cw.MANIFEST).write_text(json.dumps({"torch": "2.13.0", "files": []}))
    monkeypatch.setattr(subprocess, "run", _no_pip)
    assert cw.download(tmp_path, "2.13.0") == {"torch": "2.13.0", "files": []}


def _fake_pip(files: dict[str, bytes]) -> Any:
    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "download" in cmd:
            dest = Path(cmd[cmd.index("-d") + 1])
            for name, data in files.items():
                (dest / name).write_bytes(data)
        return subprocess.CompletedProcess(cmd, 0, stdout="pip 23.2.1 from x\n")

    return run


def _index_of(files: dict[str, bytes]) -> Any:
    def fetch(projects: Any) -> dict[str, dict[str, cw.IndexFile]]:
        out: dict[str, dict[str, cw.IndexFile]] = {}
        for name, data in files.items():
            project, _ = cw.wheel_name_version(name)
            out.setdefault(project, {})[name] = cw.IndexFile(
                hashlib.sha256(data).hexdigest(), len(data)
            )
        return out

    return fetch


def test_a_download_writes_the_manifest_then_the_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {TORCH: b"torch wheel", NCCL: b"nccl wheel"}
    monkeypatch.setattr(subprocess, "run", _fake_pip(files))
    monkeypatch.setattr(cw, "fetch_index", _index_of(files))
    cache = tmp_path / "wheels-cuda"
    manifest = cw.download(cache, "2.13.0")
    assert [f["file"] for f in manifest["files"]] == sorted(files)
    assert manifest["total_size"] == len(b"torch wheel") + len(b"nccl wheel")
    assert manifest["files"][1]["sha256"] == hashlib.sha256(b"torch wheel").hexdigest()
    assert json.loads((cache / cw.MANIFEST).read_text()) == manifest
    assert (cache / cw.STAMP).read_text() == cw.download_spec("2.13.0", cw.platforms("2.28"))


def test_a_file_that_differs_from_pypi_leaves_no_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {TORCH: b"torch wheel", NCCL: b"nccl wheel"}
    monkeypatch.setattr(subprocess, "run", _fake_pip(files))
    monkeypatch.setattr(cw, "fetch_index", _index_of({TORCH: b"torch wheel", NCCL: b"other"}))
    with pytest.raises(cw.CudaWheelsError, match=f"{NCCL}: sha256"):
        cw.download(tmp_path, "2.13.0")
    assert not (tmp_path / cw.STAMP).exists()


def test_a_cpu_build_in_the_download_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    monkeypatch.setattr(subprocess, "run", _fake_pip({cpu: b"cpu"}))
    with pytest.raises(cw.CudaWheelsError, match=r"expected one PyPI torch 2.13.0 wheel"):
        cw.download(tmp_path, "2.13.0")


def test_pip_runs_without_find_links_extra_indexes_or_config_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple")
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    env = cw._pip_env()
    assert "PIP_FIND_LINKS" not in env and "PIP_EXTRA_INDEX_URL" not in env
    assert env["PIP_CERT"] == "/etc/ssl/certs/ca-certificates.crt"
    assert env["PIP_CONFIG_FILE"] == "/dev/null"


# --- the comparison with the plan ---


def _rows(**changes: Any) -> dict[str, cw.Row]:
    probe = {**PROBE, **changes.pop("probe", {})}
    versions = {**VERSIONS, **changes.pop("versions", {})}
    return {r.field: r for r in cw.compare(PLAN, probe, versions, **changes)}


def test_everything_as_planned_matches() -> None:
    rows = _rows()
    assert all(r.match for r in rows.values() if r.match is not None)
    assert cw.report(list(rows.values()))["ok"] is True
    assert rows["triton wheel"].match is None and rows["triton wheel"].found == "3.7.1"
    assert rows["CUDA runtime wheel (major.minor)"].source == "nvidia-cuda-runtime 13.0.96"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"probe": {"torch_version": "2.13.0+cpu"}}, "torch.__version__"),
        ({"probe": {"torch_version": "2.13.0"}}, "torch.__version__"),
        ({"probe": {"cuda_version": "12.8"}}, "torch.version.cuda"),
        ({"probe": {"cuda_version": None}}, "torch.version.cuda"),
        ({"probe": {"nccl_version": "2.28.9"}}, "torch.cuda.nccl.version()"),
        ({"probe": {"cuda_available": True}}, "torch.cuda.is_available()"),
        ({"versions": {"nvidia-nccl-cu13": "2.28.9"}}, "NCCL wheel version"),
        ({"versions": {"nvidia-cuda-runtime": "12.8.90"}}, "CUDA runtime wheel (major.minor)"),
        ({"expect_cuda_device": True}, "torch.cuda.is_available()"),
        (
            {
                "probe": {
                    "loaded_libraries": [
                        "/usr/local/cuda-13.0/lib/libcudart.so.13",
                        "/tmp/v/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
                    ]
                }
            },
            "libcudart loaded from",
        ),
    ],
)
def test_each_difference_is_a_mismatch_of_its_field(change: dict[str, Any], field: str) -> None:
    rows = _rows(**change)
    assert rows[field].match is False
    result = cw.report(list(rows.values()))
    assert result["ok"] is False and result["mismatches"] == [field]
    assert "match NO" in rows[field].line()


def test_a_missing_nccl_wheel_or_a_failed_nccl_call_is_a_mismatch_with_the_reason() -> None:
    versions = {k: v for k, v in VERSIONS.items() if "nccl" not in k}
    rows = {r.field: r for r in cw.compare(PLAN, PROBE, versions)}
    assert rows["NCCL wheel version"].match is False
    assert rows["NCCL wheel version"].source == "no nvidia-nccl wheel"
    probe = {**PROBE, "nccl_version": None, "nccl_error": "RuntimeError: no libnccl"}
    row = next(r for r in cw.compare(PLAN, probe, VERSIONS) if r.field.startswith("torch.cuda.n"))
    assert row.match is False and row.source == "failed: RuntimeError: no libnccl"


def test_the_cu12_wheel_names_are_found_too() -> None:
    versions = {"nvidia-nccl-cu12": "2.28.9", "nvidia-cuda-runtime-cu12": "12.8.90"}
    assert cw.nvidia_wheel(versions, "nccl") == ("nvidia-nccl-cu12", "2.28.9")
    assert cw.nvidia_wheel(versions, "cuda-runtime") == ("nvidia-cuda-runtime-cu12", "12.8.90")
    assert cw.nvidia_wheel({"nvidia-cuda-nvrtc": "13.0.88"}, "cuda-runtime") is None


def test_the_plan_of_the_pin_is_the_pypi_default_cuda_build() -> None:
    """The check compares with gpufleet's own planner; this plan must name a CUDA build."""
    pin = cw.pinned_torch(p.read_text() for p in cw.PIN_FILES if p.is_file())
    plan = cw._plan(pin)
    assert plan == make_plan(PlanRequest(torch=pin, python="3.11")).to_dict()
    assert plan["expected_build"] == f"{pin}+{plan['variant']}" and plan["cuda"]
    assert plan["nccl"]


def test_check_without_a_download_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cw.main(["--cache", str(tmp_path), "check"]) == 2
    assert "no complete download" in capsys.readouterr().err


def test_a_library_from_outside_the_wheels_is_a_mismatch_naming_its_path() -> None:
    libs = [
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
        "/tmp/v/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
        "/tmp/v/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13",
    ]
    rows = _rows(probe={"loaded_libraries": libs})
    row = rows["libnccl loaded from"]
    assert row.match is False
    assert row.found == (
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2, site-packages/nvidia/nccl/lib/libnccl.so.2"
    )
    assert rows["libcudart loaded from"].match is True
    assert _rows(probe={"loaded_libraries": []})["libnccl loaded from"].match is False
    old_probe = {k: v for k, v in PROBE.items() if k != "loaded_libraries"}
    assert not any("loaded from" in r.field for r in cw.compare(PLAN, old_probe, VERSIONS))
