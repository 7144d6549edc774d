"""gpufleet.report.logscan: the first line that names the cause in real-looking launch logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.report import logscan, root_cause

GLOO_ABORT = """\
[rank1]:[W1202 00:41:07.118 ProcessGroupGloo.cpp:740] Warning: Unable to resolve hostname
terminate called after throwing an instance of 'gloo::IoException'
  what():  [third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:40411
W1202 00:41:08.002 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 812 closing signal SIGTERM
E1202 00:41:08.300 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) local_rank: 1 (pid: 813) of binary: /opt/env/bin/python
Traceback (most recent call last):
  File "/opt/env/lib/python3.11/site-packages/torch/distributed/run.py", line 940, in <module>
    main()
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
gpufleet.verify.workers.syncbn FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_00:41:08
  host      : node1
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 813)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 813
============================================================
"""

BAD_IFACE = """\
supervise: environment from /etc/gpufleet/nccl.env: ['GLOO_SOCKET_IFNAME']
[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/env/lib/python3.11/site-packages/gpufleet/verify/workers/common.py", line 90, in init
[rank0]:     dist.init_process_group(**kwargs)
[rank0]: RuntimeError: [enforce fail at third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find address for: bogus0
"""

PY_ERROR = """\
W1202 torch/distributed/run.py:792] Setting OMP_NUM_THREADS environment variable
[rank1]: Traceback (most recent call last):
[rank1]:   File "<frozen runpy>", line 198, in _run_module_as_main
[rank1]:   File "/x/gpufleet/verify/workers/allreduce.py", line 40, in body
[rank1]:     raise ValueError("boom")
[rank1]: ValueError: boom
E1202 failed (exitcode: 1) local_rank: 1 (pid: 99) of binary: /x/python
"""

PORT = """\
[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address.
"""


def test_terminate_with_what_line_wins_over_torchrun_noise() -> None:
    err = logscan.first_error(GLOO_ABORT)
    assert err is not None
    assert err.kind == "terminate" and err.line == 2
    assert "gloo::IoException" in err.text and "Connection closed by peer" in err.text


def test_traceback_reports_its_last_line_without_rank_prefix() -> None:
    err = logscan.first_error(PY_ERROR)
    assert err is not None and err.kind == "traceback"
    assert err.text == "ValueError: boom" and err.line == 6


def test_interface_lookup_failure_is_named() -> None:
    hits = logscan.scan(BAD_IFACE)
    assert hits and "Unable to find address for: bogus0" in hits[0].text
    assert hits[0].line == 5


def test_port_in_use() -> None:
    err = logscan.first_error(PORT)
    assert err is not None and err.kind == "port-in-use" and err.line == 1


def test_clean_log_has_no_error() -> None:
    assert logscan.first_error("supervise: ok\nall ranks done\n") is None


def test_bounded_keeps_head_and_tail() -> None:
    data = b"A" * 100 + b"B" * 100
    cut = logscan.bounded(data, 50)
    assert cut.startswith(b"A" * 25) and cut.endswith(b"B" * 25) and b"150 bytes cut" in cut
    assert logscan.bounded(b"short", 50) == b"short"


def test_root_cause_carries_first_error_and_note() -> None:
    cause = root_cause(GLOO_ABORT)
    assert cause["signal"] == "SIGABRT" and cause["rank"] == 1
    note = logscan.first_error_note(cause, "allreduce.log")
    assert note.startswith(
        "; first error (allreduce.log line 2): terminate called: gloo::IoException"
    )


def test_collect_rank_logs_copies_bounded_files_with_first_error(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "none_abc" / "attempt_0"
    for rank, text in ((0, "all good\n"), (1, GLOO_ABORT.splitlines()[1] + "\n" + "x" * 100_000)):
        (logs / str(rank)).mkdir(parents=True)
        (logs / str(rank) / "stderr.log").write_text(text)
        (logs / str(rank) / "stdout.log").write_text("")
    dest = tmp_path / "run"
    dest.mkdir()
    got = logscan.collect_rank_logs(tmp_path / "logs", dest, "allreduce")
    assert [g["file"] for g in got] == ["allreduce-rank0.stderr.log", "allreduce-rank1.stderr.log"]
    assert got[0]["first_error"] is None
    err = got[1]["first_error"]
    assert isinstance(err, dict) and err["kind"] == "terminate" and err["line"] == 1
    assert (dest / "allreduce-rank1.stderr.log").stat().st_size <= logscan.MAX_LOG_BYTES + 64
    assert not (dest / "allreduce-rank0.stdout.log").exists()  # empty streams are skipped


def test_logs_cli_collect_and_first_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpufleet logs collect`` (what roles/verify/tasks/launch.yml runs) and ``first-error``."""
    rank = tmp_path / "logs" / "none_abc" / "attempt_0" / "0"
    rank.mkdir(parents=True)
    (rank / "stderr.log").write_text(PORT)
    dest = tmp_path / "run"
    dest.mkdir()
    assert main(["logs", "collect", str(tmp_path / "logs"), str(dest), "cluster"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [g["file"] for g in got] == ["cluster-rank0.stderr.log"]
    assert got[0]["first_error"]["kind"] == "port-in-use"
    assert main(["logs", "first-error", str(dest / "cluster-rank0.stderr.log")]) == 0
    assert json.loads(capsys.readouterr().out) == got[0]["first_error"]
    assert main(["logs", "first-error", str(tmp_path / "missing.log")]) == 0
    assert json.loads(capsys.readouterr().out) is None
    with pytest.raises(SystemExit) as info:
        main(["logs", "collect", "only-one"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: gpufleet logs collect") and err.count("\n") == 1
