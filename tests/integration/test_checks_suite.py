"""The node checks suite end to end: recorded readings of healthy and faulty nodes go through
``--nvml-recording``; each fault must fail (or warn) exactly the right check with the right
message, and nothing else may fail or warn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks_helpers import MANIFEST, RECORDINGS, SuiteRun, run_suite
from gpufleet.results import load_result_file

H100 = ("--gpufleet-manifest", str(MANIFEST))
SINGLE = (*H100, "--expected-gpus", "1")
V100 = (*SINGLE, "--expect-cuda", "12.4")
PER_GPU = (
    "persistence_mode", "ecc_mode", "ecc_uncorrectable_volatile", "page_retirement",
    "row_remap", "pcie_link", "nvlink", "clock_event_reasons", "host_device_copy",
    "torch_arch_list",
)  # fmt: skip
#: per-GPU checks that measure the live machine: a recording holds no figure for them (skip)
LIVE_ONLY_PER_GPU = ("host_device_copy",)
NODE_GPU_CHECKS = (
    "driver_loaded", "driver_version", "cuda_driver_version", "gpu_count",
    "torch_cuda_available", "torch_device_count", "cuda_visible_devices",
)  # fmt: skip

Expect = tuple[str, int | None, str, tuple[str, ...]]


def profile(status: str, *fragments: str) -> Expect:
    """The node check profile (docs/profiles.md): the recording against its detected profile."""
    return ("profile", None, status, fragments)


def unlisted(model: str) -> Expect:
    """A GPU model no shipped profile lists: auto detection cannot place the node."""
    return profile("fail", f"no profile lists the GPU model(s) of this node: {model}",
                   "gpufleet_system_profile")  # fmt: skip


FAULTS: list[tuple[str, tuple[str, ...], list[Expect]]] = [
    ("driver-too-old", H100, [
        ("driver_version", None, "fail", ("520.61.05", ">= 525.60.13", "nvidia_driver")),
        ("cuda_driver_version", None, "fail", ("CUDA 11.8", "needs CUDA 12.8", "upgrade")),
    ]),
    ("driver-minor-compat", H100, [
        ("cuda_driver_version", None, "warn", ("CUDA 12.2", "minor-version compatibility")),
    ]),
    ("nouveau-loaded", H100, [
        ("nouveau_not_loaded", None, "fail", ("nouveau is loaded", "blacklist", "dracut")),
    ]),
    ("gpu-missing", H100, [
        ("gpu_count", None, "fail", ("sees 7 GPU", "expected 8", "PCI bus shows 8", "Xid 79")),
        ("xid_errors", None, "fail", ("PCI 0000:db:00 (not enumerated by NVML)", "Xid 79",
                                      "fallen off the bus")),
        profile("fail", "[profile_gpu_count]", "expected 8, found 7"),
    ]),
    ("gpu-lost", H100, [
        *[(name, 3, "fail", ("GPU 3 (00000000:5D:00.0)", "GPU is lost", "nvidia-smi -r"))
          for name in PER_GPU],
        profile("fail", "[profile_gpu_unreadable] GPU 3 (00000000:5D:00.0)"),
    ]),
    ("persistence-off", H100, [
        ("persistence_mode", 2, "fail", ("GPU 2 (00000000:3A:00.0)", "persistence mode is off",
                                         "required 1", "nvidia-persistenced")),
    ]),
    ("ecc-disabled", H100, [
        ("ecc_mode", 0, "warn", ("GPU 0 (00000000:18:00.0)", "ECC is disabled", "-e 1")),
    ]),
    ("ecc-uncorrectable", H100, [
        ("ecc_uncorrectable_volatile", 5, "fail", ("GPU 5 (00000000:AB:00.0)",
                                                   "2 volatile uncorrectable", "threshold 0",
                                                   "reset the GPU")),
    ]),
    ("row-remap-pending", H100, [
        ("row_remap", 3, "fail", ("GPU 3 (00000000:5D:00.0)", "row remap is pending",
                                  "reset the GPU")),
    ]),
    ("row-remap-failure", H100, [
        ("row_remap", 4, "fail", ("GPU 4 (00000000:9A:00.0)", "row remap failed", "RMA")),
    ]),
    ("row-remap-exhausted", H100, [
        ("row_remap", 1, "fail", ("GPU 1 (00000000:2A:00.0)", "512 rows remapped",
                                  "DCGM limit 512", "RMA")),
    ]),
    ("retired-pages-limit", V100, [
        ("page_retirement", 0, "fail", ("GPU 0 (00000000:3B:00.0)", "63 retired pages",
                                        "DCGM limit 63", "RMA")),
        unlisted("Tesla V100-SXM2-32GB"),
    ]),
    ("retired-pages-pending", V100, [
        ("page_retirement", 0, "fail", ("GPU 0 (00000000:3B:00.0)",
                                        "page retirement is pending", "reset the GPU")),
        unlisted("Tesla V100-SXM2-32GB"),
    ]),
    ("pcie-width-x8", H100, [
        ("pcie_link", 6, "fail", ("GPU 6 (00000000:BA:00.0)", "width below maximum",
                                  "Gen5 x8, max Gen5 x16", "reseat")),
        profile("fail", "[profile_pcie_width] GPU 6 (00000000:BA:00.0)", "expected x16, found x8"),
    ]),
    ("pcie-gen-idle-downshift", H100, [
        ("pcie_link", 7, "warn", ("GPU 7 (00000000:DB:00.0)",
                                  "idle downshift, re-check under load", "Gen1 x16")),
        profile("warn", "[profile_pcie_generation] GPU 7", "expected Gen5, found Gen1"),
    ]),
    ("pcie-gen-idle-recovers", H100, []),
    ("pcie-gen-stuck", H100, [
        ("pcie_link", 7, "fail", ("GPU 7 (00000000:DB:00.0)", "below maximum under load",
                                  "Gen3 x16, max Gen5 x16")),
        # judged under load, as pcie_link: the link stays at Gen3
        profile("fail", "[profile_pcie_generation] GPU 7", "expected Gen5, found Gen3"),
    ]),
    ("pcie-gen-busy-low", H100, [
        ("pcie_link", 4, "fail", ("GPU 4 (00000000:9A:00.0)", "below maximum on a busy GPU",
                                  "Gen4 x16")),
        profile("fail", "[profile_pcie_generation] GPU 4", "expected Gen5, found Gen4"),
    ]),
    ("nvlink-down", H100, [
        ("nvlink", 1, "fail", ("GPU 1 (00000000:2A:00.0)", "1 of 18 NVLink", "[7]",
                               "fabricmanager")),
        profile("fail", "[profile_nvlink] GPU 1 (00000000:2A:00.0)", "expected 18, found 17"),
    ]),
    ("clock-events", H100, [
        ("clock_event_reasons", 0, "fail", ("GPU 0 (00000000:18:00.0)", "0x8", "HW slowdown",
                                            "cooling")),
        ("clock_event_reasons", 1, "fail", ("GPU 1 (00000000:2A:00.0)", "0x40",
                                            "HW thermal slowdown")),
        ("clock_event_reasons", 2, "fail", ("GPU 2 (00000000:3A:00.0)", "0x80",
                                            "HW power brake")),
        ("clock_event_reasons", 3, "warn", ("GPU 3 (00000000:5D:00.0)", "0x5", "SW power cap",
                                            "power limit")),
    ]),
    ("xid-recent", H100, [
        ("xid_errors", None, "fail", ("GPU 3 (00000000:5D:00.0): Xid 48", "double-bit ECC",
                                      "GPU 3 (00000000:5D:00.0): Xid 79", "fallen off the bus",
                                      "last 2026-11-30T11:30:01", "drain the node")),
    ]),
    ("torch-arch-missing", H100, [
        ("torch_arch_list", i, "fail", (f"GPU {i} (", "10.0 (sm_100)",
                                        "not in the wheel's arch list", "--gpu-arch sm_100"))
        for i in range(8)
    ] + [unlisted("NVIDIA B200")]),
    ("torch-ptx-only", H100, []),
    ("torch-cuda-mismatch", H100, [
        ("torch_cuda_version", None, "fail", ("torch.version.cuda = 12.6", "plan expects 12.8",
                                              "torch_env")),
    ]),
    ("torch-cuda-unavailable", H100, [
        ("torch_cuda_available", None, "fail", ("cannot use CUDA",
                                                "CUDA initialisation failed")),
    ]),
    ("torch-count-mismatch", H100, [
        ("torch_device_count", None, "fail", ("torch sees 7 GPU", "NVML's count is 8")),
    ]),
    ("nccl-mismatch", H100, [
        ("nccl_version", None, "warn", ("torch NCCL 2.27.3", "plan 2.28.9", "nvidia-nccl")),
    ]),
    ("visible-devices-ignored", H100, [
        ("cuda_visible_devices", None, "fail", ("CUDA_VISIBLE_DEVICES=0,1", "torch sees 8")),
        ("torch_device_count", None, "fail", ("torch sees 8",
                                              "CUDA_VISIBLE_DEVICES count is 2")),
    ]),
    ("visible-devices-honoured", H100, [
        ("cuda_visible_devices", None, "pass", ("CUDA_VISIBLE_DEVICES=0,1", "torch sees 2")),
    ]),
    ("nvcc-mismatch", H100, [
        ("cuda_toolkit", None, "fail", ("release 12.4", "plan 12.8", "cuda_toolkit")),
    ]),
]  # fmt: skip


def _assert_only(run: SuiteRun, expected: list[Expect]) -> None:
    for name, gpu, status, fragments in expected:
        rec = run.find(name, gpu)
        assert rec["status"] == status, f"{name} gpu={gpu}: {rec}"
        for fragment in fragments:
            assert fragment in rec["message"], f"{fragment!r} not in {rec['message']!r}"
        if status in ("fail", "warn"):
            assert rec["remedy"], rec
            assert rec["threshold"] is not None, rec
    named = {(name, gpu) for name, gpu, _, _ in expected}
    stray = {
        key: st for key, st in run.statuses().items() if st in ("fail", "warn") and key not in named
    }
    assert not stray, f"unexpected fail/warn: {stray}\n{run.out}"
    want_rc = 1 if any(st == "fail" for _, _, st, _ in expected) else 0
    assert run.rc == want_rc, run.out


# slow: second recordings of a check that another recording above already fails in make test
SLOW_FAULTS = {
    "driver-minor-compat", "row-remap-failure", "row-remap-exhausted", "retired-pages-pending",
    "pcie-gen-idle-recovers", "pcie-gen-busy-low", "torch-ptx-only", "visible-devices-honoured",
}  # fmt: skip


@pytest.mark.parametrize(
    ("recording", "args", "expected"),
    [
        pytest.param(*f, id=f[0], marks=[pytest.mark.slow] if f[0] in SLOW_FAULTS else [])
        for f in FAULTS
    ],
)
def test_fault_fails_the_right_check(
    tmp_path: Path, recording: str, args: tuple[str, ...], expected: list[Expect]
) -> None:
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS / recording}.json", *args)
    _assert_only(run, expected)


def test_healthy_h100_node_passes_everything(tmp_path: Path) -> None:
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS}/healthy-h100x8.json", *H100)
    _assert_only(run, [])
    st = run.statuses()
    passed = {k for k, v in st.items() if v == "pass"}
    for name in PER_GPU:
        if name == "page_retirement":  # H100: NOT_SUPPORTED (row remapping instead)
            assert st[(name, 0)] == "skip"
            continue
        if name in LIVE_ONLY_PER_GPU:
            assert {st[(name, i)] for i in range(8)} == {"skip"}, name
            continue
        assert {(name, i) for i in range(8)} <= passed, name
    for name in (*NODE_GPU_CHECKS[:-1], "nouveau_not_loaded", "xid_errors",
                 "torch_cuda_version", "nccl_version", "cuda_toolkit"):  # fmt: skip
        assert (name, None) in passed, name
    # an Xid 79 five hours before the recording is outside the 2 h window; Xid 31 is benign
    assert "non-critical Xids seen: [31]" in run.find("xid_errors")["message"]
    assert run.data["kind"] == "checks"
    assert run.data["mode"] == "gpu"
    assert run.data["node"] == "gpu-h100-01"
    assert "gpufleet summary" in run.out
    # 23 skips: the 9 above, the 4 fabric/network checks (this recording carries no
    # pci_devices, fabric_manager or infiniband section; tests/unit/node/test_hgx.py has those),
    # the 2 that read the live machine only (PCIe ACS, IOMMU: a recording holds neither) and
    # host_device_copy on each of the 8 GPUs (a copy measured with torch on the live machine)
    assert "76 pass, 0 warn, 0 fail, 23 skip" in run.out
    rec = run.find("profile")
    assert rec["status"] == "pass"
    assert "matches profile hgx-h100-8gpu" in rec["message"]
    assert "HCA ports not compared" in rec["message"]  # no infiniband section
    assert run.data["meta"]["profile"]["name"] == "hgx-h100-8gpu"
    for name in ("pcie_acs", "iommu_mode"):
        rec = run.find(name)
        assert rec["status"] == "skip" and "recording does not hold" in rec["message"], rec


@pytest.mark.parametrize(
    ("name", "status", "says"),
    [
        ("hgx-h100-8gpu", "pass", "matches profile hgx-h100-8gpu"),
        ("hgx-a100-80gb-8gpu", "fail", "[profile_gpu_model]"),
        ("hgx-h100", "fail", "unknown system profile 'hgx-h100'"),
    ],
)
def test_the_system_profile_option_names_the_profile(
    tmp_path: Path, name: str, status: str, says: str
) -> None:
    """What the verify role passes (--system-profile=<gpufleet_system_profile>) reaches the
    check; an unknown name is the check's failure, not a refused run."""
    run = run_suite(
        tmp_path, f"--nvml-recording={RECORDINGS}/healthy-h100x8.json", *H100,
        f"--system-profile={name}",
    )  # fmt: skip
    rec = run.find("profile")
    assert rec["status"] == status, rec
    assert says in rec["message"]
    assert run.data["meta"]["profile"]["requested"] == name
    assert run.rc == (1 if status == "fail" else 0)


def test_xid_window_option_widens_the_window(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path, f"--nvml-recording={RECORDINGS}/healthy-h100x8.json", *H100,
        "--xid-window-hours=6",
    )  # fmt: skip
    rec = run.find("xid_errors")
    assert rec["status"] == "fail"
    assert "GPU 4 (00000000:9A:00.0): Xid 79" in rec["message"]


def test_healthy_single_gpu_passes_all_but_the_profile(tmp_path: Path) -> None:
    """No shipped profile lists an RTX 4090: under auto the profile check fails, naming it."""
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS}/healthy-rtx4090x1.json", *SINGLE)
    _assert_only(run, [unlisted("NVIDIA GeForce RTX 4090")])
    st = run.statuses()
    for name in ("ecc_mode", "ecc_uncorrectable_volatile", "row_remap", "nvlink"):
        assert st[(name, 0)] == "skip", name  # consumer GPU: counters not supported
    assert (
        "not supported on this GPU (NVIDIA GeForce RTX 4090)" in run.find("ecc_mode", 0)["message"]
    )
    assert st[("torch_arch_list", 0)] == "pass"  # sm_89 runs sm_86 SASS
    assert "SASS sm_86" in run.find("torch_arch_list", 0)["message"]


def test_ptx_only_arch_passes_with_jit_note(tmp_path: Path) -> None:
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS}/torch-ptx-only.json", *H100)
    assert "PTX compute_90 (JIT" in run.find("torch_arch_list", 0)["message"]


def test_expected_gpus_option_overrides_manifest(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path, f"--nvml-recording={RECORDINGS}/healthy-h100x8.json", *H100, "--expected-gpus=4"
    )
    rec = run.find("gpu_count")
    assert rec["status"] == "fail"
    assert "sees 8 GPU(s), expected 4" in rec["message"]


# ------------------------------------------------------------------ no driver, require_gpu


def _gpu_records(run: SuiteRun) -> list[dict[str, object]]:
    return [r for r in run.records if r["name"] in (*PER_GPU, *NODE_GPU_CHECKS)]


@pytest.mark.parametrize("recording", ["no-driver", "driver-not-loaded"])
def test_no_driver_skips_when_gpu_not_required(tmp_path: Path, recording: str) -> None:
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS}/{recording}.json", "--no-require-gpu")
    assert run.rc == 0, run.out
    gpu_records = _gpu_records(run)
    assert len(gpu_records) == len(PER_GPU) + len(NODE_GPU_CHECKS)
    for rec in gpu_records:
        assert rec["status"] == "skip", rec
        assert str(rec["message"]).startswith("no NVIDIA driver"), rec
    assert not [r for r in run.records if r["status"] == "fail"]
    assert run.data["mode"] == "cpu"


@pytest.mark.parametrize(
    ("how", "env"),
    [
        pytest.param(("--require-gpu",), {}, id="option"),
        pytest.param((), {"GPUFLEET_REQUIRE_GPU": "true"}, id="env"),
        pytest.param(("--gpufleet-manifest", str(MANIFEST)), {}, id="manifest"),
    ],
)
def test_no_driver_fails_each_gpu_check_when_required(
    tmp_path: Path, how: tuple[str, ...], env: dict[str, str]
) -> None:
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS}/no-driver.json", *how, env=env)
    assert run.rc == 1, run.out
    gpu_records = _gpu_records(run)
    assert len(gpu_records) == len(PER_GPU) + len(NODE_GPU_CHECKS)
    for rec in gpu_records:
        assert rec["status"] == "fail", rec
        assert "no NVIDIA driver" in str(rec["message"])
        assert "require_gpu is true" in str(rec["message"])
        assert rec["remedy"] == "install the NVIDIA driver (role nvidia_driver)"
    # failures, not setup errors, in the JUnit report
    assert not list(run.junit.iter("error"))
    fails = [r for r in run.records if r["status"] == "fail"]
    assert len(list(run.junit.iter("failure"))) == len(fails) >= len(gpu_records)
    assert "Traceback" not in run.out


def test_broken_driver_fails_even_when_gpu_not_required(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path, f"--nvml-recording={RECORDINGS}/rm-version-mismatch.json", "--no-require-gpu"
    )
    assert run.rc == 1
    rec = run.find("driver_loaded")
    assert rec["status"] == "fail"
    assert "version mismatch" in rec["message"]
    assert "reboot" in rec["remedy"]


def test_json_and_junit_agree(tmp_path: Path) -> None:
    run = run_suite(tmp_path, f"--nvml-recording={RECORDINGS}/clock-events.json", *H100)
    cases = list(run.junit.iter("testcase"))
    assert len(cases) == len(run.records)
    warn_cases = [
        c for c in cases
        for p in c.iter("property")
        if p.get("name") == "gpufleet_status" and p.get("value") == "warn"
    ]  # fmt: skip
    assert len(warn_cases) == 1
    assert warn_cases[0].get("name") == "test_clock_event_reasons[gpu3]"
    assert len(list(run.junit.iter("failure"))) == 3
    for rec in run.records:
        assert set(rec) >= {"node", "name", "status", "value", "threshold", "remedy", "gpu"}
        assert rec["node"] == "gpu-h100-01"
    # the report side reads the same file through the results contract
    loaded = load_result_file(tmp_path / "checks.json")
    assert loaded.kind == "checks"
    assert len(loaded.records) == len(run.records)
    assert loaded.meta["driver"] == "570.133.20"
    assert loaded.meta["require_gpu"] is True
    assert loaded.meta["inventory"][3] == {
        "gpu": "3 (00000000:5D:00.0)",
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-6a2b1f0e-0000-4000-8000-000000000003",
        "error": None,
    }


def test_missing_manifest_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"no JSON written \(rc=4\)"):
        run_suite(tmp_path, "--gpufleet-manifest", str(tmp_path / "nope.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(AssertionError, match=r"(?s)rc=4.*--nvml-recording .*bad.json"):
        run_suite(tmp_path, "--nvml-recording", str(tmp_path / "bad.json"))


# slow: a real torch import; make test keeps the real-torch no-driver suite run
@pytest.mark.slow
def test_real_cpu_torch_against_gpu_recording(tmp_path: Path) -> None:
    """Without a torch section the suite reads the real torch (a CPU build here)."""
    data = json.loads((RECORDINGS / "healthy-h100x8.json").read_text())
    del data["torch"]
    rec_path = tmp_path / "real-torch.json"
    rec_path.write_text(json.dumps(data))
    run = run_suite(tmp_path, f"--nvml-recording={rec_path}", *H100)
    rec = run.find("torch_cuda_available")
    assert rec["status"] == "fail"
    assert "CPU build" in rec["message"]
    assert "install the planned CUDA wheel" in rec["remedy"]
    assert run.find("torch_cuda_version")["status"] == "fail"  # None vs plan 12.8
    assert run.data["meta"]["torch"].endswith("+cpu")


@pytest.mark.parametrize(
    ("require", "expected", "rc", "status"),
    [
        ("False", "8", 0, "skip"),  # strings from a templated manifest
        ("true", "all", 1, "fail"),
        (None, None, 0, "skip"),  # null: fall through to env / default false
    ],
)
def test_manifest_values_are_read_robustly(
    tmp_path: Path, require: str | None, expected: str | None, rc: int, status: str
) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"node": "n1", "require_gpu": require,
                                    "gpus_expected": expected}))  # fmt: skip
    run = run_suite(
        tmp_path, f"--nvml-recording={RECORDINGS}/no-driver.json",
        f"--gpufleet-manifest={manifest}",
    )  # fmt: skip
    assert run.rc == rc, run.out
    assert run.find("gpu_count")["status"] == status
    assert run.data["node"] == "n1"


def test_manifest_gpus_expected_string(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"gpus_expected": "7"}))
    run = run_suite(
        tmp_path, f"--nvml-recording={RECORDINGS}/healthy-h100x8.json",
        f"--gpufleet-manifest={manifest}",
    )  # fmt: skip
    rec = run.find("gpu_count")
    assert rec["status"] == "fail"
    assert "expected 7" in rec["message"]


def test_real_h200_recording_passes(tmp_path: Path) -> None:
    """The NVML recording taken on a real H200 (docs/gpu-validation.md) replays clean, with a
    manifest the planner makes for what was installed there, but for its profile: detected
    as the HGX H200 board, one GPU without NVLink is not one (docs/profiles.md)."""
    from gpufleet.planning.planner import PlanRequest, make_plan

    plan = make_plan(
        PlanRequest(torch="2.11.0", variant="cu130", driver="580.159.04", gpu_archs=("sm_90",))
    )
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "schema": 1,
                "node": "h200",
                "plan": plan.to_dict(),
                "env_wheel_variant": "cu130",
                "gpus_expected": 1,
                "require_gpu": True,
            }
        )
    )
    run = run_suite(
        tmp_path,
        f"--nvml-recording={RECORDINGS}/real-h200x1.json",
        f"--gpufleet-manifest={manifest}",
        "--no-pcie-load",
    )
    _assert_only(run, [profile("fail", "from profile hgx-h200-8gpu", "[profile_gpu_count]",
                               "expected 8, found 1", "[profile_nvlink] GPU 0")])  # fmt: skip
    st = run.statuses()
    for name in ("driver_version", "cuda_driver_version", "torch_cuda_version", "nccl_version"):
        assert st[(name, None)] == "pass", name
    for name in ("persistence_mode", "pcie_link", "row_remap", "torch_arch_list"):
        assert st[(name, 0)] == "pass", name


def test_a_check_that_cannot_run_is_incomplete_a_junit_skip(tmp_path: Path) -> None:
    """An unreadable kernel log: xid_errors is incomplete (JSON), a skip whose message starts
    with "incomplete:" (JUnit), not a failure (rc 0)."""
    data = json.loads((RECORDINGS / "healthy-h100x8.json").read_text())
    del data["kernel_log"]
    rec_path = tmp_path / "no-log.json"
    rec_path.write_text(json.dumps(data))
    run = run_suite(
        tmp_path, f"--nvml-recording={rec_path}", *H100, f"--kernel-log={tmp_path / 'gone.log'}"
    )
    assert run.rc == 0, run.out
    rec = run.find("xid_errors")
    assert rec["status"] == "incomplete"
    assert "kernel log unreadable" in rec["message"] and rec["remedy"]
    (case,) = [c for c in run.junit.iter("testcase") if c.get("name") == "test_xid_errors"]
    (skipped,) = list(case.iter("skipped"))
    assert str(skipped.get("message")).startswith("incomplete: kernel log unreadable")
    assert "0 fail, 23 skip, 1 incomplete" in run.out  # 8 of them host_device_copy
    assert "INCOMPLETE xid_errors: kernel log unreadable" in run.out
