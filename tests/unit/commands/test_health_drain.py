"""The drain policy of `gpufleet health --slurm` over several passes, against a scripted
scontrol that keeps the node's state between calls as slurmctld would (no Slurm needed):
drain at the second failed pass in a row, at once for a lost GPU, never on an incomplete
pass, resume gpufleet's own drain once healthy, never touch an admin's drain. The real Slurm
is in tests/integration/test_demo.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from checks_helpers import MANIFEST, RECORDINGS
from gpufleet.commands import cmd_health

FAKE_SCONTROL = """#!{python}
import pathlib, sys
node = pathlib.Path({node!r})
with open({log!r}, "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:3] == ["show", "node", "-o"]:
    print(node.read_text().strip())
elif args[:1] == ["update"]:
    kv = dict(a.split("=", 1) for a in args[1:])
    if kv["state"] == "drain":
        node.write_text("NodeName=gpu7 Arch=x86_64 State=IDLE+DRAIN Reason=" + kv["reason"]
                        + " [root@2026-12-07T05:00:00] Comment=(null)")
    else:
        node.write_text("NodeName=gpu7 Arch=x86_64 State=IDLE Comment=(null)")
else:
    sys.exit("scontrol: unexpected " + " ".join(args))
"""
IDLE = "NodeName=gpu7 Arch=x86_64 State=IDLE Comment=(null)"


class Node:
    """A node whose Slurm state lives in a file the scripted scontrol reads and writes."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, shown: str = IDLE) -> None:
        self.tmp = tmp
        self.slurm = tmp / "slurm-node.txt"
        self.slurm.write_text(shown)
        self.log = tmp / "scontrol.log"
        bindir = tmp / "bin"
        bindir.mkdir()
        fake = bindir / "scontrol"
        fake.write_text(
            FAKE_SCONTROL.format(python=sys.executable, node=str(self.slurm), log=str(self.log))
        )
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
        self.state = tmp / "health-state.json"
        self.prom = tmp / "gpufleet.prom"
        good = json.loads(MANIFEST.read_text())
        py = tmp / "env" / "bin" / "python"
        py.parent.mkdir(parents=True)
        py.write_text("#!/bin/sh\n")
        py.chmod(0o755)
        self.env_file = tmp / "nccl.env"
        self.env_file.write_text("GLOO_SOCKET_IFNAME=lo\n")
        good.update(env_python=str(py), env_file=str(self.env_file))
        self.manifest = tmp / "manifest.json"
        self.manifest.write_text(json.dumps(good))

    def sick(self) -> None:
        """nccl.env names an interface the node lacks: nccl_env_interfaces fails (not a
        check that drains at once)."""
        self.env_file.write_text("GLOO_SOCKET_IFNAME=bogus0\n")

    def cured(self) -> None:
        self.env_file.write_text("GLOO_SOCKET_IFNAME=lo\n")

    def health_pass(self, recording: str = "healthy-h100x8", *extra: str) -> int:
        args = cmd_health.build_args(
            ["--slurm", "--slurm-node", "gpu7", "--manifest", str(self.manifest),
             "--nvml-recording", str(RECORDINGS / f"{recording}.json"),
             "--state", str(self.state), "--textfile", str(self.prom), *extra]
        )  # fmt: skip
        return cmd_health.run(args)

    def calls(self) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return lines

    def shown(self) -> str:
        return self.slurm.read_text()

    def gauge(self, name: str) -> float:
        for line in self.prom.read_text().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in {self.prom}")


SHOW = "show node -o gpu7"


def test_drained_at_the_second_failed_pass_then_resumed_once_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(tmp_path, monkeypatch)
    node.sick()
    assert node.health_pass() == 1
    assert node.calls() == [SHOW]  # failed pass 1 of 2: Slurm asked, nothing changed
    assert "State=IDLE " in node.shown()
    assert node.gauge("gpufleet_health_consecutive_failed_passes") == 1
    assert node.gauge("gpufleet_health_slurm_drained") == 0
    assert "gpu7 not drained: failed pass 1 in a row of the 2 that drain" in capsys.readouterr().out

    assert node.health_pass() == 1
    assert "(2 failed passes in a row (drains after 2))" in capsys.readouterr().out
    calls = node.calls()
    assert calls[0] == SHOW and len(calls) == 2
    assert calls[1].startswith("update nodename=gpu7 state=drain reason=gpufleet: nccl_env_int")
    assert "State=IDLE+DRAIN" in node.shown() and "bogus0" in node.shown()
    assert node.gauge("gpufleet_health_consecutive_failed_passes") == 2
    assert node.gauge("gpufleet_health_slurm_drained") == 1

    assert node.health_pass() == 1  # still failing: stays drained, no second drain
    assert node.calls() == [SHOW]
    assert node.gauge("gpufleet_health_slurm_drained") == 1

    node.cured()
    assert node.health_pass() == 0
    assert node.calls() == [SHOW, "update nodename=gpu7 state=resume"]
    assert node.shown() == IDLE
    assert node.gauge("gpufleet_health_consecutive_failed_passes") == 0
    assert node.gauge("gpufleet_health_slurm_drained") == 0


def test_an_incomplete_pass_between_two_failures_neither_drains_nor_resets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path, monkeypatch)
    node.sick()
    assert node.health_pass() == 1
    assert node.calls() == [SHOW]
    # the next pass hangs (an NVML call stuck): cut at --timeout, incomplete, exit 3
    hang = tmp_path / "hanging-python"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    with monkeypatch.context() as m:
        m.setattr(sys, "executable", str(hang))
        assert node.health_pass("healthy-h100x8", "--timeout", "1") == 3
    assert node.calls() == []  # Slurm not even asked
    state = json.loads(node.state.read_text())
    assert (state["failed_passes"], state["last_outcome"]) == (1, "incomplete")
    assert node.gauge("gpufleet_health_status") == 3
    assert node.health_pass() == 1  # the second failed pass in a row: drained now
    assert node.calls()[1].startswith("update nodename=gpu7 state=drain")


def test_a_lost_gpu_drains_at_the_first_failed_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path, monkeypatch)
    assert node.health_pass("gpu-lost") == 1
    calls = node.calls()
    assert calls[1].startswith("update nodename=gpu7 state=drain reason=gpufleet: gpu_readable: ")
    assert node.gauge("gpufleet_health_consecutive_failed_passes") == 1


def test_drain_after_one_drains_any_failure_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path, monkeypatch)
    node.sick()
    assert node.health_pass("healthy-h100x8", "--drain-after", "1") == 1
    assert node.calls()[1].startswith("update nodename=gpu7 state=drain")


def test_an_admins_drain_is_never_touched_failing_or_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = "NodeName=gpu7 State=MIXED+DRAIN Reason=DIMM swap, ticket 4711 [admin@2026-12-06]"
    node = Node(tmp_path, monkeypatch, shown=admin)
    node.sick()
    for _ in range(2):  # the second failed pass would drain an undrained node
        assert node.health_pass() == 1
    node.cured()
    assert node.health_pass() == 0
    assert node.calls() == [SHOW] * 3
    assert node.shown() == admin
    assert node.gauge("gpufleet_health_slurm_drained") == 0


def test_a_broken_state_file_starts_the_count_over_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(tmp_path, monkeypatch)
    node.state.write_text('{"schema": 1, "failed_pass')  # truncated by a full disk
    node.sick()
    assert node.health_pass() == 1
    assert node.calls() == [SHOW]  # counted from 0: first failure, not drained
    err = capsys.readouterr().err
    assert f"WARN state: {node.state} is unreadable" in err and "starts over" in err
    assert json.loads(node.state.read_text())["failed_passes"] == 1


def test_slurm_not_answering_is_exit_1_and_the_pass_still_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(tmp_path, monkeypatch)
    (tmp_path / "bin" / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    assert node.health_pass() == 1  # healthy, but Slurm could not be asked
    assert "Unable to contact slurm controller" in capsys.readouterr().err
    state = json.loads(node.state.read_text())
    assert state["failed_passes"] == 0 and state["drained"] is None


def test_a_state_that_cannot_be_kept_is_exit_1_and_slurm_is_not_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No count, no drain decision: Slurm is left alone; the metrics are still written."""
    node = Node(tmp_path, monkeypatch)
    (tmp_path / "not-a-dir").write_text("")
    node.state = tmp_path / "not-a-dir" / "health-state.json"
    node.sick()
    assert node.health_pass() == 1
    assert node.calls() == []
    err = capsys.readouterr().err
    assert f"ERROR: cannot open {node.state}.lock" in err
    assert node.gauge("gpufleet_health_consecutive_failed_passes") == 1  # this pass alone


def test_a_textfile_that_cannot_be_written_is_exit_1_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(tmp_path, monkeypatch)
    (tmp_path / "blocked").write_text("")
    node.prom = tmp_path / "blocked" / "gpufleet.prom"
    assert node.health_pass() == 1  # healthy, but the metrics could not be written
    err = capsys.readouterr().err
    assert f"ERROR: --textfile {node.prom}" in err and "gpufleet_health_textfile_dir" in err
    assert json.loads(node.state.read_text())["failed_passes"] == 0  # the pass still counted
