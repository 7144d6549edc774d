"""make soak RUNS=30: verify a healthy cluster again and again, so that a flaky verdict shows.

As root, on the simulated cluster (3 nodes, brought up and provisioned first, both
idempotent): runs alternate between a full ``make verify`` (checks, smoke tests, all-reduce,
cluster training) and ``make run`` of a plain DDP script that does not import gpufleet
(tests/fixtures/run/plain_ddp.py); ``--kinds verify`` runs ``make verify`` every time. On a
healthy cluster every run must pass: any failure is a false alarm, recorded with its run id and
the first error line of its report or output. A verify run that names a slow node is a false
alarm too (the cluster is healthy: issue 30's slow-node hunting must accuse nobody), and one
whose pair sweep did not run is counted apart (``pair_sweeps``), so that "no slow node named"
is never claimed of runs that could not name one.

Writes reports/soak/soak.json::

    {"runs": 30, "pass": 30, "fail": 0, "commit": "...", "started": "...",
     "verify_runs": 15, "pair_sweeps": 15, "slow_node_alarms": 0,
     "failures": [{"run": 7, "kind": "verify", "run_id": "...", "first_error": "..."}],
     "each": [{"run": 1, "kind": "verify", "run_id": "...", "ok": true, "seconds": 81.2,
               "slow_nodes": [], "pairs": 3}, ...]}

Exit 0 with no failure, 1 otherwise. docs/reliability.md records the outcome.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed_lib import REPO, Run, make, summary, tbctl

OUT = REPO / "reports" / "soak"
SCRIPT = "tests/fixtures/run/plain_ddp.py"


def first_error(kind: str, run_id: str, r: Run) -> str:
    """The first failure of the report (verify), else the first ERROR/fatal line of the output;
    a healthy verify that named a slow node says so."""
    if kind == "verify":
        s = summary(run_id)
        for f in s.get("slow_nodes") or []:
            return f"slow node named on a healthy cluster: {json.dumps(f)[:400]}"
        for f in s.get("failures", []):
            return f"{f.get('node')}: {f.get('name')}: {str(f.get('message', ''))[:400]}"
    for line in r.out.splitlines():
        if "ERROR" in line or "fatal:" in line or "FAILED!" in line or "failed (" in line:
            return line.strip()[:400]
    return r.out.strip().splitlines()[-1][:400] if r.out.strip() else f"rc {r.rc}, no output"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument(
        "--kinds",
        choices=("alternate", "verify"),
        default="alternate",
        help="alternate make verify and make run (default), or make verify every run",
    )
    p.add_argument(
        "--verify-args",
        default="",
        help="VERIFY_ARGS for each make verify (e.g. '-e verify_run_smoke=false')",
    )
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(f">> soak: {args.runs} runs on a {args.nodes}-node testbed (commit {commit})", flush=True)
    up = tbctl("up", "--nodes", str(args.nodes))
    if up.returncode != 0:
        print(up.stdout[-3000:] + up.stderr[-3000:], file=sys.stderr)
        return 1
    prov = make("provision", "INVENTORY=testbed/inventory", timeout=3600, log=OUT / "provision.log")
    if prov.rc != 0:
        print(
            f">> soak: provisioning failed (rc {prov.rc}); see {OUT / 'provision.log'}",
            file=sys.stderr,
        )
        return 1
    result: dict[str, Any] = {
        "runs": args.runs, "pass": 0, "fail": 0, "commit": commit, "started": stamp,
        "nodes": args.nodes, "kinds": args.kinds, "verify_args": args.verify_args,
        "verify_runs": 0, "pair_sweeps": 0, "slow_node_alarms": 0, "failures": [], "each": [],
    }  # fmt: skip
    for i in range(1, args.runs + 1):
        kind = "verify" if args.kinds == "verify" or i % 2 else "run"
        run_id = f"soak-{stamp}-{i:03d}"
        log = OUT / f"{run_id}.log"
        extra: dict[str, Any] = {}
        if kind == "verify":
            r = make("verify", "INVENTORY=testbed/inventory", f"RUN_ID={run_id}",
                     f"VERIFY_ARGS={args.verify_args}", timeout=1800, log=log)  # fmt: skip
            s = summary(run_id)
            slow = sorted({str(f.get("node")) for f in s.get("slow_nodes") or []})
            # summary.json pairs = {"rows": [...], "ratio": ...}: count the pair rows
            extra = {"slow_nodes": slow, "pairs": len((s.get("pairs") or {}).get("rows") or [])}
            result["verify_runs"] += 1
            result["pair_sweeps"] += 1 if extra["pairs"] else 0
            result["slow_node_alarms"] += 1 if slow else 0
            ok = r.rc == 0 and s.get("status") == "pass" and not slow
        else:
            r = make("run", "INVENTORY=testbed/inventory", f"SCRIPT={SCRIPT}", "ARGS=--steps 10",
                     f"RUN_ID={run_id}", timeout=1800, log=log)  # fmt: skip
            ok = r.rc == 0
        entry = {
            "run": i, "kind": kind, "run_id": run_id, "ok": ok, "seconds": round(r.seconds, 1),
            **extra,
        }  # fmt: skip
        result["each"].append(entry)
        if ok:
            result["pass"] += 1
        else:
            result["fail"] += 1
            result["failures"].append({**entry, "first_error": first_error(kind, run_id, r)})
        print(f">> soak {i}/{args.runs}: {kind} {'pass' if ok else 'FAIL'} in {r.seconds:.0f} s",
              flush=True)  # fmt: skip
        (OUT / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f">> soak: {result['pass']} pass, {result['fail']} fail; {result['verify_runs']} verify "
        f"runs, {result['pair_sweeps']} with a pair sweep, {result['slow_node_alarms']} naming a "
        f"slow node; {OUT / 'soak.json'}"
    )
    return 0 if result["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
