"""Benchmark (not a test): the controller side of verify at scale (issue 32 item 3).

    .venv/bin/python tests/bench/bench_report.py [--nodes 1000] [--gpus 8] [--out FILE]
        [--faulty I] [--browser]

Writes synthetic results of N nodes (default 1000, 8 GPUs each) in the layout verify
leaves (reports/<run-id>/run.json and <node>/{checks,smoke,dcgm,probe,allreduce}.json, the
first node's train.json, train-1node.json and pairs.json; docs/architecture.md "Verify run
files") into a temporary run folder, then times:

- ``gpufleet report summary`` in this process (collect, summary.json/md, index.html,
  junit.xml) and as a subprocess (what roles/verify runs), with the subprocess's peak RSS;
- with ``--browser`` (``make bench-page``: 64 nodes, node 9 failed): index.html in headless
  chromium, from navigation to its first frame (target 5 s), its first screen and its
  slow-node section saved beside the JSON as PNGs (tests/browser_lib.py);
- the bisection schedule: every ``localise.next_groups`` call of a bisection that finds one
  bad node among N;
- the pair schedule (``pairs.pair_rounds``) over N nodes.

Targets: the report under 10 s and under 1 GiB peak RSS at 1000 nodes. Prints a table and
writes the figures, targets and verdicts as JSON (default reports/bench/report-<N>.json).
The probe results are the full mesh (each node reaches every other one), written by the
node's own ``netprobe.result_file`` as ``gpufleet probe mesh`` writes them: N - 1 peers
per node, folded into one passing record (before that fold, N x N records were the
largest part of the run: 1.1 million records, 105 s and 1.9 GiB at 1000 nodes).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from gpufleet.argtypes import int_range  # noqa: E402
from gpufleet.node import netprobe  # noqa: E402
from gpufleet.report import localise, pairs, write_report  # noqa: E402
from gpufleet.results import SCHEMA  # noqa: E402

TARGET_S = 10.0
#: index.html of 64 nodes rendered in a browser within this (issue 43; make bench-page)
PAGE_TARGET_S = 5.0
TARGET_RSS_MIB = 1024.0
RUN_ID = "bench-report"
STARTED = "2026-12-05T10:00:00Z"
FINISHED = "2026-12-05T10:10:00Z"  # run.json: when verify's report step ran
SIZES = [2**k for k in range(10, 31, 2)]  # 1 KiB .. 1 GiB
CHECKS_PER_GPU = ("gpu_ecc", "gpu_remapped_rows", "gpu_clocks", "gpu_power", "gpu_temp",
                  "gpu_pcie_link", "gpu_nvlink", "gpu_xid", "gpu_retired_pages",
                  "gpu_throttle", "gpu_memory", "gpu_persistence")  # fmt: skip
CHECKS_NODE = ("driver", "cuda", "torch", "nccl", "fabricmanager", "ib_ports", "hugepages",
               "kernel", "numa", "gpu_count")  # fmt: skip


def _rec(name: str, node: str, status: str = "pass", **kw: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "node": node, "value": kw.get("value"),
            "threshold": kw.get("threshold"), "remedy": kw.get("remedy", ""),
            "message": kw.get("message", f"{name} ok"), "gpu": kw.get("gpu")}  # fmt: skip


def _row(size: int, busbw: float, world: int) -> dict[str, Any]:
    factor = 2 * (world - 1) / world
    algbw = busbw / factor
    return {"size_bytes": size, "count": size // 4, "dtype": "float32",
            "time_us": size / algbw / 1e3, "algbw": algbw, "busbw": busbw,
            "world_size": world, "backend": "nccl", "wrong": 0}  # fmt: skip


def _envelope(kind: str, node: str, records: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "run_id": kw.get("run_id", RUN_ID), "kind": kind, "node": node,
            "mode": "gpu", "started": STARTED, "duration_s": kw.get("duration_s", 1.0),
            "meta": kw.get("meta", {}), "records": records,
            "bandwidth": kw.get("bandwidth", [])}  # fmt: skip


def _dump(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")  # the C encoder: fast


#: what ``generate(..., faulty=i)`` does to node i: GPU 1's (0's with one GPU) uncorrectable
#: ECC check fails
#: (with the checks suite's rerun data) and every pair the node is in runs at a third
ECC_FAULT = "ecc_uncorrectable_volatile"


def generate(
    run: Path, n: int, gpus: int, *, faulty: int | None = None, run_id: str = RUN_ID,
    finished: str = FINISHED,
) -> None:  # fmt: skip
    """A passing run of ``n`` nodes with ``gpus`` GPUs each, in verify's layout; with
    ``faulty``, that node fails one GPU check and is slow in the pair sweep (ECC_FAULT).
    run.json names the inventory ``<run>/../inventory`` and the time ``finished``."""
    nodes = [f"gpu{i:04d}" for i in range(n)]
    envelope = functools.partial(_envelope, run_id=run_id)
    world = n * gpus
    for i, node in enumerate(nodes):
        d = run / node
        d.mkdir(parents=True)
        checks = [_rec(f"{c}", node, gpu=f"{g} (00000000:{g + 0x18:02X}:00.0)", value=1)
                  for g in range(gpus) for c in CHECKS_PER_GPU]  # fmt: skip
        checks += [_rec(c, node) for c in CHECKS_NODE]
        meta: dict[str, Any] = {}
        if i == faulty:
            g = 1 if gpus > 1 else 0
            gpu = f"{g} (00000000:{g + 0x18:02X}:00.0)"
            checks.append(_rec(ECC_FAULT, node, "fail", gpu=gpu, value=2, threshold=0,
                               message=f"GPU {gpu}: 2 volatile uncorrectable ECC errors, "
                               "threshold 0", remedy="drain the node, reset the GPU "
                               f"(nvidia-smi -r -i {g}); replace it if they come back"))  # fmt: skip
            meta["rerun"] = {"python": "/opt/gpufleet/env/bin/python", "cwd": "/root",
                             "rootdir": "/var/lib/gpufleet/suites/checks",
                             "options": ["-p", "no:cacheprovider", f"--node={node}"], "env": {},
                             "tests": {f"{ECC_FAULT}@{gpu}":
                                       f"test_memory.py::test_{ECC_FAULT}[gpu{g}]"}}  # fmt: skip
        _dump(d / "checks.json", envelope("checks", node, checks, meta=meta))
        smoke = [_rec(t, node) for t in ("test_dataparallel", "test_ddp_loss_decreases",
                 "test_syncbn", "test_amp", "test_allreduce_correct", "test_allreduce_busbw",
                 "nccl_transport")]  # fmt: skip
        local = [_row(s, 300.0 + (i % 7), gpus) for s in SIZES]
        _dump(d / "smoke.json", envelope("smoke", node, smoke, bandwidth=local,
              meta={"backend": "nccl", "nproc": gpus}))  # fmt: skip
        dcgm = [_rec(f"dcgm_{t}", node) for t in ("pcie", "memory", "sm_stress", "targeted_power",
                                                  "memory_bandwidth", "diagnostic")]  # fmt: skip
        _dump(d / "dcgm.json", envelope("dcgm", node, dcgm))
        # the full mesh through the node's own writer (it folds the peers that answered)
        reached = [netprobe.ProbeResult(node, nodes[j], f"10.0.{j // 250}.{j % 250}", 29500,
                                        "mesh", True, 0.001 + j % 17 / 1e4, peer=nodes[j])
                   for j in range(n) if j != i]  # fmt: skip
        probe = netprobe.result_file(node, reached, 1.0).to_dict()
        _dump(d / "probe.json", {**probe, "run_id": run_id, "started": STARTED})
        ar = [_rec("allreduce_correctness", node, value=0, threshold=0),
              _rec("nccl_transport", node)]  # fmt: skip
        rows: list[dict[str, Any]] = []
        if i == 0:
            ar.append(_rec("allreduce_busbw", node, value=350.0, threshold=333.0))
            rows = [_row(s, 350.0, world) for s in SIZES]
        # as the worker writes it: every rank on the first node, the node's own elsewhere
        ranks = [{"rank": r, "host": nodes[r // gpus], "device": f"cuda:{r % gpus}"}
                 for r in (range(world) if i == 0 else range(i * gpus, (i + 1) * gpus))]  # fmt: skip
        _dump(d / "allreduce.json", envelope("allreduce", node, ar, bandwidth=rows,
              meta={"backend": "nccl", "world_size": world, "nnodes": n, "node_rank": i,
                    "threshold": 333.0, "threshold_source": "bench", "ranks": ranks}))  # fmt: skip
    first = run / nodes[0]
    train_meta = {
        "backend": "nccl", "world_size": world, "nnodes": n, "nproc_per_node": gpus,
        "device_type": "cuda", "amp": "bf16", "syncbn": True, "epochs": 2,
        "epoch_loss": [0.7, 0.4], "params_max_diff": 0.0,
        "ranks": [{"rank": r, "node_rank": r // gpus, "host": nodes[r // gpus],
                   "device": f"cuda:{r % gpus}", "samples_per_s": 900.0 + r % 5,
                   "indices": [r, r + world], "param_sha256": "0" * 64}
                  for r in range(world)],
        "total_samples_per_s": 900.0 * world, "baseline_total_samples_per_s": 900.0 * gpus,
        "efficiency": 0.97, "efficiency_formula": "total / (nnodes x one-node total)",
    }  # fmt: skip
    train = [_rec(t, nodes[0]) for t in ("train_loss", "train_params_equal", "train_coverage",
                                         "train_syncbn", "train_amp")]  # fmt: skip
    _dump(first / "train.json", envelope("train", nodes[0], train, meta=train_meta))
    _dump(first / "train-1node.json", envelope("train-1node", nodes[0], train[:2]))
    slow = nodes[faulty] if faulty is not None else None
    prow = [{"a": a, "b": b, "size_bytes": SIZES[-1],
             "busbw": (45.0 + int(a[3:]) % 3) / (3 if slow in (a, b) else 1)}
            for rnd in pairs.pair_rounds(nodes) for a, b in rnd]  # fmt: skip
    pair_rec = [_rec("pairs_busbw", nodes[0])]
    _dump(first / "pairs.json", envelope("pairs", nodes[0], pair_rec, meta={"pairs": prow}))
    expect = dict.fromkeys(("checks", "smoke", "dcgm", "probe", "allreduce"), nodes)
    info = {"run_id": run_id, "nodes": nodes, "mode": "gpu", "master": nodes[0],
            "expect": expect, "result_run_ids": True, "nproc_per_node": gpus,
            "world_size": world, "launcher": "ssh",
            "inventory": [str(run.parent / "inventory")], "finished": finished}  # fmt: skip
    _dump(run / "run.json", info)


def page_render_s(run: Path, screenshot: Path) -> float:
    """Seconds from navigation to the first frame of ``run``/index.html in headless chromium
    (tests/browser_lib.py), which must raise no console error; its first screen saved as
    ``screenshot``, its slow-node section beside it (``<stem>-slow-nodes.png``)."""
    sys.path.insert(0, str(REPO / "tests"))
    import browser_lib  # tests/ is on the path only for --browser

    if why := browser_lib.chromium_missing():
        raise SystemExit(f"--browser: {why}")
    slow = screenshot.with_name(f"{screenshot.stem}-slow-nodes.png")
    page = browser_lib.open_page(
        browser_lib.file_url(run / "index.html"),
        screenshot=screenshot,
        elements={"#slow-nodes": slow},
    )
    if page.errors or page.requests:
        raise SystemExit(f"index.html: console errors {page.errors}, requests {page.requests}")
    return page.render_s


def time_bisection(n: int) -> tuple[float, int, int]:
    """Seconds of every next_groups call of a bisection naming one bad node (the last)."""
    nodes = [f"gpu{i:04d}" for i in range(n)]
    bad = nodes[-1]
    history: list[list[dict[str, Any]]] = []
    launches = 0
    t0 = time.perf_counter()
    while groups := localise.next_groups(nodes, history):
        history.append([{"nodes": g, "passed": bad not in g} for g in groups])
        launches += len(groups)
    took = time.perf_counter() - t0
    assert localise.localise(nodes, history).suspects == [bad]
    return took, len(history), launches


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int_range(2, 100_000), default=1000)
    p.add_argument("--gpus", type=int_range(1, 64), default=8)
    p.add_argument("--out", type=Path, help="JSON file (default reports/bench/report-N.json)")
    p.add_argument("--faulty", type=int_range(0, 99_999), help="this node fails (generate)")
    p.add_argument(
        "--browser",
        action="store_true",
        help="also load index.html in headless chromium (make browser-deps): the time to its "
        "first frame against PAGE_TARGET_S, its first screen as <out>.png (1366x768)",
    )
    args = p.parse_args(argv)
    out = args.out or REPO / "reports" / "bench" / f"report-{args.nodes}.json"
    figures: list[dict[str, Any]] = []

    def fig(name: str, value: float, unit: str, target: float | None = None) -> None:
        verdict = "-" if target is None else ("met" if value <= target else "missed")
        figures.append({"figure": name, "value": round(value, 4), "unit": unit,
                        "target": target, "verdict": verdict})  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        run = Path(tmp) / RUN_ID
        t0 = time.perf_counter()
        generate(run, args.nodes, args.gpus, faulty=args.faulty)
        fig("generate synthetic results", time.perf_counter() - t0, "s")
        files = sum(1 for _ in run.rglob("*.json"))
        size = sum(f.stat().st_size for f in run.rglob("*.json"))
        fig("result files", files, "files")
        fig("result files size", size / 2**20, "MiB")
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        cmd = [sys.executable, "-m", "gpufleet", "report", "summary", str(run), "--quiet"]
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != (0 if args.faulty is None else 1):  # 1: the run failed
            raise SystemExit(f"gpufleet report failed (rc {proc.returncode}):\n{proc.stderr}")
        child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        fig("report summary, subprocess", wall, "s", TARGET_S)
        # on a shared machine the wall time carries the neighbours' load; this does not
        fig("report summary, subprocess CPU (user + sys)", cpu, "CPU-s")
        fig("report summary, subprocess peak RSS", child_rss, "MiB", TARGET_RSS_MIB)
        t0 = time.perf_counter()
        s = write_report(run)
        fig("report summary, in process", time.perf_counter() - t0, "s", TARGET_S)
        self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        fig("bench process peak RSS (generation + report)", self_rss, "MiB", TARGET_RSS_MIB)
        fig("summary.json size", (run / "summary.json").stat().st_size / 2**20, "MiB")
        fig("junit.xml size", (run / "junit.xml").stat().st_size / 2**20, "MiB")
        records = sum(s.counts().values())
        fig("records in the report", records, "records")
        want = "pass" if args.faulty is None else "fail"
        if s.status != want:
            raise SystemExit(f"the synthetic run should {want}, the report says {s.status}")
        if args.browser:
            shot = out.with_suffix(".png")
            fig("index.html size", (run / "index.html").stat().st_size / 2**20, "MiB")
            fig("index.html in chromium, navigation to first frame",
                page_render_s(run, shot), "s", PAGE_TARGET_S)  # fmt: skip
    took, rounds, launches = time_bisection(args.nodes)
    fig(f"bisection schedule ({rounds} rounds, {launches} launches)", took, "s")
    names = [f"gpu{i:04d}" for i in range(args.nodes)]
    t0 = time.perf_counter()
    prounds = pairs.pair_rounds(names)
    fig(f"pair schedule ({len(prounds)} rounds)", time.perf_counter() - t0, "s")
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["tests/bench/bench_report.py", *(argv or sys.argv[1:])]),
        "nodes": args.nodes,
        "gpus_per_node": args.gpus,
        "cpus": os.cpu_count(),
        "figures": figures,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{'figure':<52} {'value':>12} {'unit':<8} {'target':>8} verdict")
    for f in figures:
        target = "" if f["target"] is None else f"{f['target']:g}"
        print(f"{f['figure']:<52} {f['value']:>12.3f} {f['unit']:<8} {target:>8} {f['verdict']}")
    print(f"\nwritten: {out}")
    return result


if __name__ == "__main__":
    main()
