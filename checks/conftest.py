"""gpufleet node checks: options, the node context, the tests (one ``test_<name>`` per verify
check of gpufleet.node.health.check_registry, per-GPU ones parametrised gpu0, gpu1, ...), and the
plugin that turns every test into a ``gpufleet.results.Record`` (JSON envelope kind
"checks") plus a compact summary. JUnit XML comes from pytest's ``--junitxml``.

Run on a node::

    python -m pytest checks/ -p no:cacheprovider \
        --gpufleet-json=out/checks.json --junitxml=out/checks.xml

See docs/checks.md for every option.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import gpufleet
from gpufleet.commands.cmd_health import add_node_options, add_suite_options
from gpufleet.node.health.context import DEFAULT_MANIFEST, NodeContext
from gpufleet.node.nvml import GpuReading, NvmlReader, PynvmlReader, RecordedReader, load_recording
from gpufleet.results import NEEDS_REMEDY, Record, ResultFile, Status, record_key, rerun_meta

# ------------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    """The options gpufleet health shares (gpufleet.commands.cmd_health), plus the suite's own."""
    g = parser.getgroup("gpufleet", "gpufleet node checks")
    g.addoption(
        "--gpufleet-manifest",
        metavar="PATH",
        help=f"node manifest (default: {DEFAULT_MANIFEST} if present)",
    )
    g.addoption("--gpufleet-json", metavar="PATH", help="write the JSON result envelope here")
    add_node_options(g.addoption)
    add_suite_options(g.addoption)


# ------------------------------------------------------------------------------- context


def _build_ctx(config: pytest.Config) -> NodeContext:
    manifest_opt = config.getoption("gpufleet_manifest")
    manifest_path: Path | None
    if manifest_opt:
        manifest_path = Path(manifest_opt)
        if not manifest_path.is_file():
            raise pytest.UsageError(f"--gpufleet-manifest {manifest_path}: no such file")
    else:
        manifest_path = DEFAULT_MANIFEST if DEFAULT_MANIFEST.is_file() else None
    rec_path = config.getoption("nvml_recording")
    recording = load_recording(rec_path) if rec_path else None
    reader: NvmlReader = RecordedReader(recording) if recording is not None else PynvmlReader()
    ctx = NodeContext.open(vars(config.option), manifest_path, reader, recording)
    require, source = ctx.require_gpu_and_source
    reading = ctx.reading
    ctx.meta.update(
        manifest=None if manifest_path is None else str(manifest_path),
        require_gpu=require,
        require_gpu_source=source,
        nvml_recording=rec_path,
        driver=None if reading is None else reading.driver_version,
        cuda_driver=None if reading is None else reading.cuda_driver_version_str,
        gpus=None if reading is None else len(reading.gpus),
        nvml_error=None if ctx.nvml_error is None else str(ctx.nvml_error),
        gpufleet=gpufleet.__version__,
        inventory=[]
        if reading is None
        else [
            {"gpu": g.label, "name": g.name, "uuid": g.uuid, "error": g.error} for g in reading.gpus
        ],
    )
    return ctx


CTX_KEY = pytest.StashKey[NodeContext]()
RESULTS_KEY = pytest.StashKey[dict[str, Record]]()
RECORD_KEY = pytest.StashKey[Record]()


def get_ctx(config: pytest.Config) -> NodeContext:
    if CTX_KEY not in config.stash:
        config.stash[CTX_KEY] = _build_ctx(config)
    return config.stash[CTX_KEY]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RESULTS_KEY] = {}
    # refuse bad input before collecting (exit 4, no reports): a missing or unreadable
    # manifest or recording must not turn into a run that quietly checks nothing
    for option in ("gpufleet_manifest", "nvml_recording"):
        raw = config.getoption(option)
        if raw:
            flag = "--" + option.replace("_", "-")
            try:
                data = json.loads(Path(raw).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"{flag} {raw}: {exc}") from exc
            if not isinstance(data, dict):
                raise pytest.UsageError(f"{flag} {raw}: not a JSON object")


def pytest_unconfigure(config: pytest.Config) -> None:
    ctx = config.stash.get(CTX_KEY, None)
    if ctx is not None and isinstance(ctx.reader, PynvmlReader):
        ctx.close()


# ------------------------------------------------------------------------------- the tests


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu" not in metafunc.fixturenames:
        return
    ctx = get_ctx(metafunc.config)
    gpus = [] if ctx.reading is None else list(ctx.reading.gpus)
    if gpus:
        ids = [f"gpu{g.index}" for g in gpus]
        metafunc.parametrize("gpu", [g.index for g in gpus], ids=ids, indirect=True)
    else:
        metafunc.parametrize(
            "gpu", [None], ids=["no-driver" if ctx.nvml_error else "no-gpu"], indirect=True
        )


def check_name(item: pytest.Item) -> str:
    name = getattr(item, "originalname", None) or item.name
    return name.removeprefix("test_")


class Emitter:
    """Ends a check with its Record: fail → pytest.fail, skip → pytest.skip."""

    def __init__(self, item: pytest.Item, ctx: NodeContext) -> None:
        self.item = item
        self.ctx = ctx

    def __call__(self, record: Record) -> None:
        record = dataclasses.replace(record, node=self.ctx.node)
        self.item.stash[RECORD_KEY] = record
        self.item.user_properties.append(("gpufleet_status", record.status))
        if record.status != "pass":
            self.item.user_properties.append(("gpufleet_message", record.message))
        if record.status == "fail":
            pytest.fail(record.message, pytrace=False)
        if record.status == "skip":
            pytest.skip(record.message)
        if record.status == "incomplete":  # JUnit has no such state: a skip that says so
            pytest.skip(f"incomplete: {record.message}")


@pytest.fixture(scope="session")
def ctx(pytestconfig: pytest.Config) -> NodeContext:
    return get_ctx(pytestconfig)


@pytest.fixture
def emit(request: pytest.FixtureRequest, ctx: NodeContext) -> Emitter:
    return Emitter(request.node, ctx)


@pytest.fixture
def gpu(request: pytest.FixtureRequest, ctx: NodeContext) -> GpuReading | None:
    """One GPU's reading (parametrised gpu0, gpu1, ...); None without a driver or GPU."""
    index = request.param
    if index is None or ctx.reading is None:
        return None
    return next(g for g in ctx.reading.gpus if g.index == index)


# ------------------------------------------------------------------------------- reporting


def _gpu_label(item: pytest.Item, ctx: NodeContext | None) -> str | None:
    callspec: Any = getattr(item, "callspec", None)
    index = None if callspec is None else callspec.params.get("gpu")
    if index is None or ctx is None or ctx.reading is None:
        return None
    return next((g.label for g in ctx.reading.gpus if g.index == index), None)


def _skip_reason(rep: pytest.TestReport) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    return str(lr)


@pytest.hookimpl(hookwrapper=True)  # old-style wrapper: works with any pytest >= 7
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    rep: pytest.TestReport = outcome.get_result()
    results = item.config.stash[RESULTS_KEY]
    ctx = item.config.stash.get(CTX_KEY, None)
    node = "" if ctx is None else ctx.node
    record = item.stash.get(RECORD_KEY, None)
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        if record is None or (rep.failed and record.status != "fail"):
            status: Status = "fail" if rep.failed else "skip" if rep.skipped else "pass"
            message = _skip_reason(rep) if rep.skipped else rep.longreprtext[-2000:]
            if rep.failed and rep.when == "setup":
                message = f"error in setup: {message}"
            record = Record(
                name=check_name(item),
                status=status,
                node=node,
                message=message,
                gpu=_gpu_label(item, ctx),
            )
        results[item.nodeid] = record
    elif rep.when == "teardown" and rep.failed:
        results[item.nodeid] = Record(
            name=check_name(item),
            status="fail",
            node=node,
            message=f"error in teardown: {rep.longreprtext[-2000:]}",
            gpu=_gpu_label(item, ctx),
        )


def _records(config: pytest.Config) -> list[Record]:
    return list(config.stash[RESULTS_KEY].values())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    path = config.getoption("gpufleet_json")
    if not path:
        return
    ctx = config.stash.get(CTX_KEY, None)
    started = time.time() if ctx is None else ctx.started
    has_gpus = ctx is not None and ctx.reading is not None and bool(ctx.reading.gpus)
    result = ResultFile(
        kind="checks",
        node="" if ctx is None else ctx.node,
        mode="gpu" if has_gpus else "cpu",
        started=datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=time.time() - started,
        records=_records(config),
        meta={
            **({} if ctx is None else ctx.meta),
            "pytest_exitstatus": int(exitstatus),
            "rerun": _rerun(config),
        },
    )
    result.write(path)


def _rerun(config: pytest.Config) -> dict[str, Any]:
    """How to rerun one check of this run here (gpufleet.results.rerun_meta): the report's
    reproducer of a record that did not pass."""
    inv = config.invocation_params
    results = config.stash[RESULTS_KEY]
    return rerun_meta(
        python=sys.executable,
        cwd=str(inv.dir),
        rootdir=str(config.rootpath),
        args=inv.args,
        paths=config.args,
        env=os.environ,
        tests={record_key(r): nodeid for nodeid, r in results.items() if r.status in NEEDS_REMEDY},
    )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    records = _records(config)
    if not records:
        return
    ctx = config.stash.get(CTX_KEY, None)
    write: Callable[..., None] = terminalreporter.write_line
    counts = {s: sum(r.status == s for r in records) for s in ("pass", "warn", "fail", "skip")}
    if any(r.status == "incomplete" for r in records):
        counts["incomplete"] = sum(r.status == "incomplete" for r in records)
    head = "gpufleet checks"
    if ctx is not None:
        if ctx.reading is not None:
            drv = f"driver {ctx.reading.driver_version}, {len(ctx.reading.gpus)} GPU(s)"
        else:
            drv = str(ctx.nvml_error)
        require, source = ctx.require_gpu_and_source
        req = f"require_gpu={require} from {source}"
        head += f" on {ctx.node} ({drv}; {req})"
    terminalreporter.section("gpufleet summary", sep="-")
    write(f"{head}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for status in ("fail", "incomplete", "warn"):
        for r in records:
            if r.status == status:
                write(f"  {status.upper()} {r.name}: {r.message}")
    skips: dict[str, list[str]] = {}
    for r in records:
        if r.status == "skip":
            reason = r.message
            if r.gpu and reason.startswith("GPU "):
                reason = reason.split(": ", 1)[1]
            skips.setdefault(reason, []).append(r.name)
    for reason, names in skips.items():
        uniq = list(dict.fromkeys(names))
        more = "..." if len(uniq) > 6 else ""
        write(f"  SKIP x{len(names)} ({', '.join(uniq[:6])}{more}): {reason}")
    json_path = config.getoption("gpufleet_json")
    if json_path:
        write(f"  JSON: {json_path}")
