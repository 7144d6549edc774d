"""gpufleet smoke suite: PyTorch's parallel modes on one node.

Run on a node (the env's python must import torch and gpufleet)::

    python -m pytest smoke_tests/ --gpufleet-json=smoke.json --junitxml=smoke.xml

Mode: "gpu" (backend NCCL, one rank per visible GPU) when CUDA devices are visible,
otherwise "cpu" (backend gloo, --cpu-nproc ranks). The mode and backend are in every
record's message and in the JSON envelope (kind "smoke").
Multi-process tests start ``python -m torch.distributed.run`` (torchrun) as a subprocess in
its own session/process group with a hard timeout; the group is killed on timeout and the
test asserts that no worker process outlived it.
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpufleet.node.netprobe import free_port
from gpufleet.results import (
    NEEDS_REMEDY,
    STATUSES,
    BandwidthRow,
    Record,
    ResultFile,
    Status,
    record_key,
    rerun_meta,
)
from gpufleet.verify.workers.supervise import group_alive, pid_alive


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("gpufleet smoke")
    g.addoption("--gpufleet-json", default="", help="write the ResultFile (kind smoke) here")
    g.addoption("--node", default="", help="node name in the results (default: hostname)")
    g.addoption(
        "--gpufleet-timeout",
        type=float,
        default=60.0,
        help="init_process_group/collective timeout in seconds (default 60)",
    )
    g.addoption(
        "--launch-timeout",
        type=float,
        default=180.0,
        help="hard limit for one torchrun launch in seconds (default 180)",
    )
    g.addoption("--cpu-nproc", type=int, default=2, help="ranks in CPU mode (gloo), default 2")
    g.addoption("--sizes", default="", help="all-reduce sizes, e.g. 1M,16M,128M,1G")
    g.addoption("--iters", type=int, default=0, help="timed iterations per size")
    g.addoption("--warmup", type=int, default=0, help="warm-up iterations per size")
    g.addoption(
        "--busbw-min",
        type=float,
        default=0.0,
        help="busbw gate in GB/s at the largest size (0 = bandwidth table)",
    )
    g.addoption("--bandwidth-table", default="", help="user expected-busbw table (JSON)")
    g.addoption(
        "--dp-imbalance-max",
        type=float,
        default=1.5,
        help="DataParallel: GPU-0 memory over the others' mean above this warns (default 1.5)",
    )


# ----------------------------------------------------------------------------- mode


@dataclass(frozen=True)
class Mode:
    mode: str  # "gpu" | "cpu"
    backend: str  # "nccl" | "gloo"
    nproc: int
    gpu_names: tuple[str, ...]

    def describe(self) -> str:
        what = (
            f"{self.nproc} x {self.gpu_names[0]}" if self.gpu_names else f"{self.nproc} CPU ranks"
        )
        return f"mode {self.mode}, backend {self.backend}, {what}"


def detect_mode(cpu_nproc: int) -> Mode:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        n = torch.cuda.device_count()
        names = tuple(torch.cuda.get_device_name(i) for i in range(n))
        return Mode("gpu", "nccl", n, names)
    return Mode("cpu", "gloo", max(1, cpu_nproc), ())


@pytest.fixture(scope="session")
def mode(pytestconfig: pytest.Config) -> Mode:
    m: Mode = pytestconfig.stash[_MODE]
    return m


# ----------------------------------------------------------------------------- results


@dataclass
class _Collected:
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    extra: list[Record] = field(default_factory=list)
    bandwidth: list[BandwidthRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    nodeids: dict[str, str] = field(default_factory=dict)  # record key -> pytest node id


_COLLECTED = pytest.StashKey[_Collected]()
_MODE = pytest.StashKey[Mode]()


class Smoke:
    """Per-test handle: attach value/threshold/remedy to the test's record, add rows."""

    def __init__(self, coll: _Collected, nodeid: str, node: str) -> None:
        self._coll = coll
        self._nodeid = nodeid
        self.node = node

    def note(self, **kw: Any) -> None:
        self._coll.notes.setdefault(self._nodeid, {}).update(kw)

    def record(self, rec: Record) -> None:
        self._coll.extra.append(rec)

    def bandwidth(self, rows: list[BandwidthRow]) -> None:
        self._coll.bandwidth.extend(rows)

    def meta(self, **kw: Any) -> None:
        self._coll.meta.update(kw)


def _node(config: pytest.Config) -> str:
    return str(config.getoption("--node")) or socket.gethostname()


@pytest.fixture
def smoke(request: pytest.FixtureRequest) -> Smoke:
    return Smoke(request.config.stash[_COLLECTED], request.node.nodeid, _node(request.config))


def _sigterm(signum: int, frame: object) -> None:
    # turn SIGTERM (e.g. from `timeout` around pytest) into an interrupt: a running
    # torchrun's process group is killed on the way out instead of being orphaned, and
    # pytest stops the session (still writing the JUnit and JSON files)
    raise KeyboardInterrupt(f"signal {signum}")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    config.stash[_COLLECTED] = _Collected()
    config.stash[_MODE] = detect_mode(int(config.getoption("--cpu-nproc")))


def pytest_report_header(config: pytest.Config) -> str:
    return f"gpufleet smoke: {config.stash[_MODE].describe()}, node {_node(config)}"


# old-style wrapper: works with the pluggy of any pytest >= 7 a node env may have
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    coll = item.config.stash[_COLLECTED]
    done = (report.when == "call") or (report.when == "setup" and not report.passed)
    if not done and not (report.when == "teardown" and report.failed):
        return
    note = coll.notes.get(item.nodeid, {})
    if report.skipped:
        status: Status = "skip"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        message = str(reason).removeprefix("Skipped: ")
    elif report.failed:
        status = "fail"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)[-2000:]
    else:
        status = note.get("status", "pass")
        message = note.get("message", "")
    assert status in STATUSES, status
    m = item.config.stash[_MODE]
    rec = Record(
        name=item.name,
        status=status,
        node=_node(item.config),
        value=note.get("value"),
        threshold=note.get("threshold"),
        remedy=note.get("remedy", "") if status in ("fail", "warn") else "",
        message=f"[{m.mode}/{m.backend}] {message}".strip(),
        gpu=note.get("gpu"),
    )
    # a teardown failure after a passed call replaces the call's record
    coll.records = [r for r in coll.records if r.name != rec.name]
    coll.records.append(rec)
    coll.nodeids[record_key(rec)] = item.nodeid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--gpufleet-json")
    if not path:
        return
    coll = session.config.stash[_COLLECTED]
    m = session.config.stash[_MODE]
    import torch

    rf = ResultFile(
        kind="smoke",
        node=_node(session.config),
        mode=m.mode,
        started=datetime.datetime.fromtimestamp(coll.started, datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        duration_s=time.time() - coll.started,
        records=coll.records + coll.extra,
        bandwidth=coll.bandwidth,
        meta={
            "backend": m.backend,
            "nproc": m.nproc,
            "gpus": list(m.gpu_names),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "pytest_exitstatus": int(exitstatus),
            **coll.meta,
            "rerun": _rerun(session.config, coll),
        },
    )
    rf.write(path)


def _rerun(config: pytest.Config, coll: _Collected) -> dict[str, Any]:
    """How to rerun one test of this run here (gpufleet.results.rerun_meta): the report's
    reproducer of a record that did not pass."""
    inv = config.invocation_params
    return rerun_meta(
        python=sys.executable,
        cwd=str(inv.dir),
        rootdir=str(config.rootpath),
        args=inv.args,
        paths=config.args,
        env=os.environ,
        tests={
            key: coll.nodeids[key]
            for r in coll.records
            if r.status in NEEDS_REMEDY and (key := record_key(r)) in coll.nodeids
        },
    )


# ----------------------------------------------------------------------------- torchrun


@dataclass
class Launch:
    rc: int
    timed_out: bool
    leftovers: list[int]
    ranks: list[dict[str, Any]]
    log: str
    duration_s: float
    cmd: list[str]

    def explain(self) -> str:
        errs = [f"rank {r['rank']}: {r['error']}" for r in self.ranks if r.get("error")]
        tail = "\n".join(self.log.splitlines()[-25:])
        return (
            f"torchrun rc={self.rc} timed_out={self.timed_out} ranks_reported={len(self.ranks)}"
            + (f"\n{'; '.join(errs)}" if errs else "")
            + f"\n--- launcher log (tail) ---\n{tail}"
        )


def torchrun_argv(worker: str, *, nproc: int, rdzv_timeout: int, nnodes: int = 1) -> list[str]:
    """torchrun as node 0 of ``nnodes`` (static rendezvous on 127.0.0.1, a free port, no
    restarts) running ``gpufleet.verify.workers.<worker>``; the worker's options follow.
    tests/integration/test_smoke_timeouts.py starts its runs with it too."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        "--node-rank",
        "0",
        "--rdzv-backend",
        "static",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--rdzv-conf",
        f"timeout={rdzv_timeout}",
        "--max-restarts",
        "0",
        "-m",
        f"gpufleet.verify.workers.{worker}",
    ]


class Torchrun:
    """Start ``python -m torch.distributed.run -m gpufleet.verify.workers.<worker>``."""

    def __init__(self, config: pytest.Config, mode: Mode, tmp: Path) -> None:
        self.config = config
        self.mode = mode
        self.tmp = tmp

    def __call__(self, worker: str, *worker_args: str, nproc: int | None = None) -> Launch:
        out_dir = self.tmp / worker
        out_dir.mkdir(parents=True, exist_ok=True)
        n = nproc or self.mode.nproc
        timeout = float(self.config.getoption("--launch-timeout"))
        rdzv_timeout = int(self.config.getoption("--gpufleet-timeout"))
        cmd = [
            *torchrun_argv(worker, nproc=n, rdzv_timeout=rdzv_timeout),
            "--out-dir",
            str(out_dir),
            "--timeout",
            str(self.config.getoption("--gpufleet-timeout")),
            "--backend",
            self.mode.backend,
            *worker_args,
        ]
        env = dict(os.environ)
        import gpufleet

        src = str(Path(gpufleet.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        log_path = out_dir / "launcher.log"
        t0 = time.monotonic()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            timed_out = False
            try:
                rc = proc.wait(timeout=timeout)
            except BaseException as exc:  # timeout, Ctrl-C, SIGTERM (see pytest_configure)
                if not isinstance(exc, subprocess.TimeoutExpired):
                    _kill_group(proc.pid)
                    raise
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                rc = 124
        # anything left in the launcher's group is a leak: record it, then kill it
        deadline = time.monotonic() + 5
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers: list[int] = []
        if group_alive(proc.pid):
            leftovers.append(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
        ranks = []
        for f in sorted(out_dir.glob("rank*.json"), key=lambda p: int(p.stem[4:])):
            ranks.append(json.loads(f.read_text()))
        leftovers += [int(r["pid"]) for r in ranks if pid_alive(int(r["pid"]))]
        return Launch(
            rc,
            timed_out,
            leftovers,
            ranks,
            log_path.read_text(errors="replace"),
            time.monotonic() - t0,
            cmd,
        )


@pytest.fixture(scope="module")
def module_torchrun(
    request: pytest.FixtureRequest, mode: Mode, tmp_path_factory: pytest.TempPathFactory
) -> Torchrun:
    """The test module's torchrun launcher, with a temporary folder of its own."""
    return Torchrun(request.config, mode, tmp_path_factory.mktemp("torchrun"))


@pytest.fixture
def torchrun(pytestconfig: pytest.Config, mode: Mode, tmp_path: Path) -> Torchrun:
    return Torchrun(pytestconfig, mode, tmp_path)
