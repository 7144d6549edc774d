"""Repro harness for the gloo teardown abort (issue 17 item 1); not part of ``make test``.

Runs a worker (default: syncbn) under ``python -m torch.distributed.run`` with 2 gloo
ranks on 127.0.0.1, N times in a row, and counts the launches that fail although every
rank wrote its result (the false alarm: "ranks_reported=2", a rank killed by SIGABRT).

    .venv/bin/python tests/bench/bench_teardown.py --runs 100 --worker syncbn

Prints one JSON line per failure (rc, signal, first error line from the launcher log) and
a summary line ``{"runs": N, "fail": F, "fail_after_results": A, "rate": ...}``. Keep
``--runs`` modest on a shared machine: each launch costs two CPU-bound interpreters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.node.netprobe import free_port
from gpufleet.report.logscan import first_error


def launch(worker: str, out: Path, nproc: int, timeout: float) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=static",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        "--max-restarts=0",
        "-m",
        f"gpufleet.verify.workers.{worker}",
        "--out-dir",
        str(out),
        "--backend",
        "gloo",
        "--timeout",
        "60",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log = out / "launcher.log"
    with log.open("wb") as fh:
        proc = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout, check=False
        )
    text = log.read_text(errors="replace")
    reported = len(list(out.glob("rank*.json")))
    err = first_error(text)
    return {
        "rc": proc.returncode,
        "ranks_reported": reported,
        "first_error": err.as_dict() if err else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--worker", default="syncbn")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--keep", default="", help="keep each failing launch's folder under here")
    a = p.parse_args(argv)
    fails = after_results = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpufleet-teardown-") as tmp:
        for i in range(a.runs):
            out = Path(tmp) / f"run{i}"
            r = launch(a.worker, out, a.nproc, a.timeout)
            if r["rc"] != 0:
                fails += 1
                if r["ranks_reported"] == a.nproc:
                    after_results += 1
                print(json.dumps({"run": i, **r}), flush=True)
                if a.keep:
                    dest = Path(a.keep) / f"run{i}"
                    dest.mkdir(parents=True, exist_ok=True)
                    for f in out.iterdir():
                        (dest / f.name).write_bytes(f.read_bytes())
    summary = {
        "runs": a.runs,
        "worker": a.worker,
        "fail": fails,
        "fail_after_results": after_results,
        "rate": round(fails / max(1, a.runs), 4),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(summary), flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
