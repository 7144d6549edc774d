"""gpufleet.node.fast_checks and `gpufleet health`: the fast node checks a scheduler runs, their
verdicts on recorded NVML states, the time bound, and the drain/resume commands it gives
Slurm (a fake scontrol on PATH records them; the real Slurm: test_testbed_slurm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import MANIFEST, RECORDINGS
from gpufleet.node import fast_checks as nodehealth
from gpufleet.node.health import provisioned
from gpufleet.node.health.context import NodeContext
from gpufleet.node.nvml import RecordedReader, load_recording
from gpufleet.results import Record

REPO = Path(__file__).resolve().parents[3]


def manifest(tmp_path: Path, **over: Any) -> Path:
    """The H100 fixture manifest with an env python that exists and an nccl.env of ours."""
    data = json.loads(MANIFEST.read_text())
    py = tmp_path / "env" / "bin" / "python"
    py.parent.mkdir(parents=True, exist_ok=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    env = tmp_path / "nccl.env"
    env.write_text("NCCL_SOCKET_IFNAME==lo\nGLOO_SOCKET_IFNAME=lo\n")
    data.update({"env_python": str(py), "env_file": str(env), **over})
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    return path


def statuses(records: list[Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in records:
        out.setdefault(r.name, set()).add(r.status)
    return out


def run_fast(tmp_path: Path, recording: str, **kw: Any) -> dict[str, set[str]]:
    return statuses(
        nodehealth.run_checks(
            manifest_path=kw.pop("manifest", None) or manifest(tmp_path),
            recording=load_recording(RECORDINGS / f"{recording}.json"),
            **kw,
        )
    )


def test_a_healthy_8_gpu_node_passes_every_fast_check(tmp_path: Path) -> None:
    s = run_fast(tmp_path, "healthy-h100x8")
    assert "fail" not in set().union(*s.values()), s
    for name in ("manifest", "env_python", "nccl_env_interfaces", "driver_loaded", "gpu_count",
                 "ecc_uncorrectable_volatile", "row_remap", "nvlink", "xid_errors"):  # fmt: skip
        assert s[name] == {"pass"}, (name, s[name])


@pytest.mark.parametrize(
    ("recording", "check"),
    [
        ("gpu-missing", "gpu_count"),
        ("gpu-missing", "xid_errors"),
        ("gpu-lost", "gpu_readable"),
        ("ecc-uncorrectable", "ecc_uncorrectable_volatile"),
        ("row-remap-pending", "row_remap"),
        ("nvlink-down", "nvlink"),
        ("persistence-off", "persistence_mode"),
        ("xid-recent", "xid_errors"),
        ("driver-not-loaded", "driver_loaded"),
    ],
)
def test_each_fault_fails_its_check(tmp_path: Path, recording: str, check: str) -> None:
    s = run_fast(tmp_path, recording)
    assert "fail" in s[check], (check, s)


def test_no_driver_skips_unless_the_node_must_have_a_gpu(tmp_path: Path) -> None:
    cpu = manifest(tmp_path, require_gpu=False, gpus_expected=0)
    assert run_fast(tmp_path, "no-driver", manifest=cpu)["driver_loaded"] == {"skip"}
    gpu = manifest(tmp_path, require_gpu=True)
    assert run_fast(tmp_path, "no-driver", manifest=gpu)["driver_loaded"] == {"fail"}


def _provisioned(manifest_path: Path) -> dict[str, Record]:
    ctx = NodeContext.open({}, manifest_path, RecordedReader({"nvml": {"error": 12}}))
    facts = ctx.provisioned()
    checks = (provisioned.manifest, provisioned.env_python, provisioned.nccl_env_interfaces)
    return {r.name: r for r in (check(facts) for check in checks)}


def test_node_level_faults_are_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": 1, "env_py')  # truncated by a full disk
    recs = _provisioned(broken)
    assert recs["manifest"].status == "fail" and str(broken) in recs["manifest"].message
    gone = manifest(tmp_path, env_python=str(tmp_path / "nowhere" / "python"))
    recs = _provisioned(gone)
    assert recs["env_python"].status == "fail" and "nowhere" in recs["env_python"].message
    bad_if = manifest(tmp_path)
    Path(json.loads(bad_if.read_text())["env_file"]).write_text("GLOO_SOCKET_IFNAME=bogus0\n")
    recs = _provisioned(bad_if)
    assert recs["nccl_env_interfaces"].status == "fail"
    assert "bogus0" in str(recs["nccl_env_interfaces"].value)
    absent = tmp_path / "absent.json"
    recs = _provisioned(absent)
    assert recs["manifest"].status == "skip" and str(absent) in recs["manifest"].message


# --------------------------------------------------------------------------- the command


def fake_slurm(tmp_path: Path, node_line: str) -> tuple[dict[str, str], Path]:
    """A PATH whose scontrol answers `show node` with node_line and logs every call."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "scontrol.log"
    (bindir / "scontrol").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        f'[ "$1" = show ] && printf "%s\\n" {json.dumps(node_line)}\n'
        "exit 0\n"
    )
    (bindir / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return env, log


def health(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "health", *args],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip


def test_a_failing_node_is_drained_with_the_check_as_reason(tmp_path: Path) -> None:
    env, log = fake_slurm(tmp_path, "NodeName=gpu7 State=IDLE Reason=(null)")
    out = tmp_path / "health.json"
    r = health(
        ["--slurm", "--slurm-node", "gpu7", "--manifest", str(manifest(tmp_path)),
         "--nvml-recording", str(RECORDINGS / "gpu-missing.json"), "--output", str(out),
         "--state", str(tmp_path / "state.json")],
        env,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "show node -o gpu7"
    assert calls[1].startswith("update nodename=gpu7 state=drain reason=gpufleet: gpu_count: ")
    data = json.loads(out.read_text())
    assert data["kind"] == "health" and data["meta"]["slurm"]["action"] == "drain"


def test_gpufleets_own_drain_is_resumed_when_healthy(tmp_path: Path) -> None:
    env, log = fake_slurm(
        tmp_path, "NodeName=gpu7 State=IDLE+DRAIN Reason=gpufleet: gpu_count: 7 [root@now]"
    )
    r = health(
        ["--slurm", "--slurm-node", "gpu7", "--manifest", str(manifest(tmp_path)),
         "--nvml-recording", str(RECORDINGS / "healthy-h100x8.json"),
         "--state", str(tmp_path / "state.json")],
        env,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.read_text().splitlines()[1] == "update nodename=gpu7 state=resume"


def test_an_admins_drain_is_left_alone(tmp_path: Path) -> None:
    env, log = fake_slurm(tmp_path, "NodeName=gpu7 State=IDLE+DRAIN Reason=DIMM swap [admin@x]")
    r = health(
        ["--slurm", "--slurm-node", "gpu7", "--manifest", str(manifest(tmp_path)),
         "--nvml-recording", str(RECORDINGS / "healthy-h100x8.json"),
         "--state", str(tmp_path / "state.json")],
        env,
    )  # fmt: skip
    assert r.returncode == 0
    assert log.read_text().splitlines() == ["show node -o gpu7"]
    assert "not resumed" in r.stdout


def hanging_python(tmp_path: Path) -> Path:
    """A stand-in for sys.executable whose child never answers (an NVML call stuck on a lost
    GPU)."""
    hang = tmp_path / "python"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    return hang


def test_checks_that_hang_are_cut_at_the_timeout_and_are_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that never answers is killed; the verdict is incomplete, not a failure."""
    from gpufleet.commands import cmd_health as cmd

    monkeypatch.setattr(sys, "executable", str(hanging_python(tmp_path)))
    args = cmd.build_args(["--timeout", "1", "--manifest", str(manifest(tmp_path))])
    recs = cmd._pass_bounded(args).records
    assert [(r.name, r.status) for r in recs] == [("health_timeout", "incomplete")]
    assert "did not finish within 1s" in recs[0].message
    assert "raise --timeout" in recs[0].remedy


def test_a_timed_out_run_never_drains_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--slurm on a run that timed out: no scontrol call at all (neither drain nor resume of
    gpufleet's own drain), exit 3, and the output file and textfile say incomplete."""
    from gpufleet.commands import cmd_health as cmd

    env, log = fake_slurm(
        tmp_path, "NodeName=gpu7 State=IDLE+DRAIN Reason=gpufleet: gpu_count: 7 [root@now]"
    )
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setattr(sys, "executable", str(hanging_python(tmp_path)))
    out, prom = tmp_path / "health.json", tmp_path / "gpufleet.prom"
    args = cmd.build_args(
        ["--timeout", "1", "--manifest", str(manifest(tmp_path)), "--slurm",
         "--slurm-node", "gpu7", "--output", str(out), "--textfile", str(prom),
         "--state", str(tmp_path / "state.json")]
    )  # fmt: skip
    assert cmd.run(args) == 3
    assert not log.exists()
    data = json.loads(out.read_text())
    assert data["meta"]["slurm"]["action"] == "none"
    assert [r["status"] for r in data["records"]] == ["incomplete"]
    lines = prom.read_text().splitlines()
    assert 'gpufleet_health_check_status{check="health_timeout"} 3' in lines  # 3: incomplete
    assert "gpufleet_health_consecutive_failed_passes 0" in lines
    assert not any(line.startswith("gpufleet_health_info") for line in lines)  # nothing read


def test_a_failure_beside_an_incomplete_check_still_drains(tmp_path: Path) -> None:
    """An unreadable kernel log (incomplete xid_errors) does not hide a missing GPU."""
    env, log = fake_slurm(tmp_path, "NodeName=gpu7 State=IDLE Reason=(null)")
    rec = json.loads((RECORDINGS / "gpu-missing.json").read_text())
    del rec["kernel_log"]
    path = tmp_path / "no-log.json"
    path.write_text(json.dumps(rec))
    env["PATH"] = f"{tmp_path / 'bin'}"  # scontrol only: neither journalctl nor dmesg
    r = health(
        ["--slurm", "--slurm-node", "gpu7", "--manifest", str(manifest(tmp_path)),
         "--nvml-recording", str(path), "--state", str(tmp_path / "state.json")],
        env,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "INCOMPLETE xid_errors: kernel log unreadable" in r.stdout
    assert "state=drain reason=gpufleet: gpu_count: " in log.read_text()


def test_an_earlier_verdict_reads_as_incomplete_once_stale(tmp_path: Path) -> None:
    env = dict(os.environ)
    out, prom = tmp_path / "health.json", tmp_path / "gpufleet.prom"
    r = health(
        ["--manifest", str(manifest(tmp_path)), "--valid-hours", "2",
         "--nvml-recording", str(RECORDINGS / "healthy-h100x8.json"), "--output", str(out)],
        env,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    started = datetime.fromisoformat(data["started"].replace("Z", "+00:00"))
    until = datetime.fromisoformat(data["valid_until"].replace("Z", "+00:00"))
    assert until - started == timedelta(hours=2)
    fresh = health(["--read-output", str(out)], env)
    assert fresh.returncode == 0 and "healthy" in fresh.stdout, fresh.stdout + fresh.stderr
    data["valid_until"] = "2020-01-01T00:00:00Z"
    out.write_text(json.dumps(data))
    stale = health(["--read-output", str(out), "--textfile", str(prom)], env)
    assert stale.returncode == 3, stale.stdout + stale.stderr
    assert "INCOMPLETE gpu_count: stale: this pass verdict was valid until 2020-01-01" in (
        stale.stdout
    )
    assert 'gpufleet_health_check_status{check="gpu_count"} 3' in prom.read_text().splitlines()
    refused = health(["--read-output", str(out), "--slurm"], env)
    assert refused.returncode == 2 and "--read-output" in refused.stderr


def test_health_and_the_checks_suite_declare_the_shared_options_once() -> None:
    """The flags both front ends take come from one function, so they parse alike."""
    import argparse

    from gpufleet.commands import cmd_health as cmd

    parser = argparse.ArgumentParser()
    cmd.add_node_options(parser.add_argument)
    args = parser.parse_args(["--no-require-gpu", "--expected-gpus", "4", "--node", "n1"])
    assert (args.require_gpu, args.expected_gpus, args.node) == (False, 4, "n1")
    assert args.xid_window_hours == 2.0 and args.nvml_recording is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--expected-gpus", "65"])
    conftest = (REPO / "checks" / "conftest.py").read_text()
    assert "add_node_options(g.addoption)" in conftest
    assert '"--expected-gpus"' not in conftest  # not re-declared by hand


# --------------------------------------------------------------------------- the pass's facts


def facts_of(tmp_path: Path, recording: str) -> tuple[nodehealth.PassFacts, dict[str, Any]]:
    rec = json.loads((RECORDINGS / f"{recording}.json").read_text())
    done = nodehealth.run_pass(manifest_path=manifest(tmp_path), recording=rec)
    assert done.facts is not None
    return done.facts, rec


def test_a_pass_reports_what_it_read_for_the_metrics(tmp_path: Path) -> None:
    facts, rec = facts_of(tmp_path, "healthy-h100x8")
    nvml = rec["nvml"]
    assert facts.driver == nvml["driver_version"]
    assert facts.gpus == len(nvml["gpus"]) and set(facts.gpu_figures) == {
        str(g["index"]) for g in nvml["gpus"]
    }
    # the H100 fixture's profile; its GPU count is what the node must have (nothing pinned)
    assert facts.profile == "hgx-h100-8gpu" and facts.gpus_expected == len(nvml["gpus"])
    first = nvml["gpus"][0]
    assert facts.gpu_figures["0"].ecc_volatile_uncorrected == first["ecc_volatile_uncorrected"]
    assert facts.gpu_figures["0"].nvlink_inactive == sum(not up for up in first["nvlink"].values())
    assert nodehealth.PassFacts.from_dict(json.loads(json.dumps(facts.to_dict()))) == facts


def test_the_facts_follow_the_faults(tmp_path: Path) -> None:
    xids, _ = facts_of(tmp_path, "xid-recent")
    assert {48, 79} <= set(xids.xid_events)
    lost, rec = facts_of(tmp_path, "gpu-lost")
    unreadable = {str(g["index"]) for g in rec["nvml"]["gpus"] if g.get("error")}
    assert unreadable and not unreadable & set(lost.gpu_figures)  # nothing read from them
    pinned, _ = facts_of(tmp_path / "pinned", "gpu-missing")
    assert pinned.gpus is not None and pinned.gpus_expected is not None
    assert pinned.gpus < pinned.gpus_expected  # what GpufleetGpuCountBelowProfile reads
