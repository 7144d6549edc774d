"""Benchmark (not a test) of how gpufleet scales with the node count: `make bench-scale`.

    .venv/bin/python tests/bench/bench_scale.py --nodes 3,6,12 --repeats 2 \\
        [--out reports/bench-scale] [--fault-timeout 30]
    .venv/bin/python tests/bench/bench_scale.py --render reports/bench-scale/scale.json

As root. For each node count N, in the order given:

  1. `make testbed-up NODES=N` (tbctl grows or shrinks a running testbed in place: nodes
     above N are stopped and removed, missing ones booted, /etc/hosts and the inventory
     rewritten), faults cleared;
  2. one full `ansible-playbook playbooks/provision.yml`, not timed (new nodes are
     provisioned, the others see a new node list);
  3. --repeats times, alternating: a converged provisioning rerun (asserted changed=0 on
     every host; wall, the machine's busy CPU seconds from /proc/stat, the controller's CPU
     seconds from getrusage of this process's children), then `make verify` with the
     cluster step only (checks, smoke suite and training off; the same three figures, the
     torchrun step's span read from the nodes' supervise files, the result files fetched per
     node, and the time `gpufleet report summary` takes over a copy of the run);
  4. bad-node localisation: the last node's ranks get GLOO_SOCKET_IFNAME=bogus0 through a
     wrapper python (-e verify_python=/root/py-bad-gloo, as tests/integration/test_demo.py
     does), so the all-reduce fails and verify bisects; asserted: summary.json suspect_nodes
     == [that node]; recorded: wall, rounds and launches, and what
     gpufleet.report.localise's schedule predicts for that node order.

A failure at one N is recorded with its phase and error and the next N still runs. The
testbed is left at the last N (`make testbed-down` removes it).

Writes <out>/scale.json (every sample, medians, fits, the model's parameters and its
extrapolation to 100 and 1000 nodes, host, command, start time, wall per N), <out>/scale.png
and <out>/scale.md (the table; printed too), and the logs of every run under <out>/n<N>/,
after every N. `--render` rewrites the PNG and the table from an existing scale.json.
docs/scale.md describes the model (scale_model).
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testbed"))


from tbctl import config as tbconfig

from bench import scale_model as scale
from bench.bench_cluster import CLUSTER_ONLY, _controller_cpu_s, _cpu_busy_s, need, say
from bench.scale_model import ScalePoint
from testbed_lib import (
    ENV_PYTHON,
    REPO,
    Run,
    clear_faults,
    cluster_nodes,
    make,
    node_file,
    playbook,
    ssh,
    summary,
    verify,
    wait_no_leftovers,
)

BAD_PYTHON = "/root/py-bad-gloo"
RUNS_DIR = "/var/lib/gpufleet/runs"  # verify_work_dir on the nodes
EXTRAPOLATE_TO = (100, 1000)
PREDICTION = {f.name for f in dataclasses.fields(scale.Prediction)}


def _node_names(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


def _tasks_per_node(r: Run, names: list[str]) -> float:
    """Median PLAY RECAP ok count over the cluster's nodes (localhost left out)."""
    oks = sorted(v[0] for h, v in r.recap().items() if h in names)
    need(bool(oks), "no PLAY RECAP line for any node", r)
    return float(oks[len(oks) // 2])


def _timed(call: Any) -> tuple[Run, float, float]:
    """Run ``call()``; return its Run, the machine's busy CPU seconds and the controller's."""
    busy0, ctl0 = _cpu_busy_s(), _controller_cpu_s()
    r = call()
    return r, _cpu_busy_s() - busy0, _controller_cpu_s() - ctl0


def _add(p: ScalePoint, **values: float | None) -> None:
    for k, v in values.items():
        if v is not None:
            p.samples.setdefault(k, []).append(float(v))


# --------------------------------------------------------------------------- phases


def provision_rerun(p: ScalePoint, d: Path, i: int) -> None:
    names = _node_names(p.nodes)
    r, busy, ctl = _timed(lambda: playbook("provision.yml", log=d / f"provision-rerun-{i}.log"))
    need(r.rc == 0, "a converged provision rerun failed", r)
    changed = {h: v[1] for h, v in r.recap().items()}
    need(all(c == 0 for c in changed.values()), f"rerun was not converged: {changed}", r)
    _add(
        p,
        provision_wall_s=r.seconds,
        provision_machine_cpu_s=busy,
        provision_controller_cpu_s=ctl,
        provision_tasks=_tasks_per_node(r, names),
    )


def step_span(run_id: str, launch: str = "allreduce") -> float | None:
    """Seconds from the first node's torchrun start to the last one's end: the supervise
    pid file is written at the start and its log is last written at the end."""
    starts, ends = [], []
    for n in cluster_nodes():
        base = f"{RUNS_DIR}/{run_id}/{n.name}/{launch}"
        pid, log = node_file(n, f"{base}.pid"), node_file(n, f"{base}.log")
        if pid.is_file() and log.is_file():
            starts.append(pid.stat().st_mtime)
            ends.append(log.stat().st_mtime)
    return max(ends) - min(starts) if starts else None


def report_size(run_dir: Path, nodes: int) -> tuple[float, float, float]:
    """(files per node, bytes per node, bytes of the largest node directory) fetched: the
    node directories of reports/<run>/, not the controller's own summary files."""
    per_node = [
        [f.stat().st_size for f in sub.rglob("*") if f.is_file()]
        for sub in run_dir.iterdir()
        if sub.is_dir()
    ]
    files = sum(len(x) for x in per_node)
    size = sum(sum(x) for x in per_node)
    return files / nodes, size / nodes, float(max((sum(x) for x in per_node), default=0))


def report_time(run_dir: Path) -> float | None:
    """Wall seconds of `gpufleet report summary` (as verify runs it, without --latest) over a
    copy of the run: the controller-side aggregation alone."""
    with tempfile.TemporaryDirectory(prefix="gf-scale-") as tmp:
        copy = Path(tmp) / run_dir.name
        shutil.copytree(run_dir, copy)
        start = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "gpufleet", "report", "summary", str(copy), "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        took = time.monotonic() - start
    return took if r.returncode in (0, 1) else None


#: extra verify arguments of every verify run (--ranks-per-node: -e verify_cpu_nproc=N)
VERIFY_EXTRA: list[str] = []


def verify_cluster(p: ScalePoint, d: Path, i: int) -> None:
    names = _node_names(p.nodes)
    rid = f"scale-n{p.nodes}-{i}-{time.strftime('%H%M%S')}"
    r, busy, ctl = _timed(
        lambda: verify(rid, *CLUSTER_ONLY, *VERIFY_EXTRA, log=d / f"verify-cluster-{i}.log")
    )
    need(r.rc == 0, "make verify (cluster step) failed", r)
    run_dir = REPO / "reports" / rid
    files, size, biggest = report_size(run_dir, p.nodes)
    info = json.loads((run_dir / "run.json").read_text())
    p.info["ranks_per_node"] = int(info.get("nproc_per_node") or 0) or None
    _add(
        p,
        verify_wall_s=r.seconds,
        verify_machine_cpu_s=busy,
        verify_controller_cpu_s=ctl,
        verify_tasks=_tasks_per_node(r, names),
        verify_step_s=step_span(rid),
        report_files_per_node=files,
        report_bytes_per_node=size,
        report_largest_node_bytes=biggest,
        report_aggregate_s=report_time(run_dir),
    )


def localise_bad_node(p: ScalePoint, d: Path, timeout: int) -> None:
    names = _node_names(p.nodes)
    bad = names[-1]
    wrapper = (
        "#!/bin/sh\n"
        f'[ "$(hostname)" = {bad} ] && export GLOO_SOCKET_IFNAME=bogus0\n'
        f'exec {ENV_PYTHON} "$@"\n'
    )
    for n in cluster_nodes():
        w = ssh(n, f"cat > {BAD_PYTHON} && chmod 0755 {BAD_PYTHON}", stdin=wrapper)
        need(w.returncode == 0, f"{n.name}: cannot write {BAD_PYTHON}: {w.stderr}")
    rid = f"scale-n{p.nodes}-bisect-{time.strftime('%H%M%S')}"
    say(f"[{p.nodes} nodes] bad-node localisation: {bad}'s gloo interface is bogus0")
    r = verify(
        rid,
        f"-e verify_python={BAD_PYTHON}",
        *CLUSTER_ONLY,
        *VERIFY_EXTRA,
        f"-e verify_collective_timeout={timeout}",
        f"-e verify_rdzv_timeout={timeout}",
        timeout=3600,
        log=d / "verify-bisect.log",
    )
    waited, left = wait_no_leftovers(cluster_nodes(), limit=timeout + 60)
    p.info["bisect_leftovers_gone_s"] = round(waited, 1)
    need(not left, f"processes left behind after the localisation run: {left}")
    need(r.rc != 0, "verify with a bad node did not fail", r)
    s = summary(rid)
    p.info.update(
        bisect_run_id=rid,
        bisect_s=round(r.seconds, 1),
        bisect_suspects=s.get("suspect_nodes"),
        bisect_reason=s.get("bisect_reason") or s.get("suspect_reason"),
    )
    need(
        s.get("suspect_nodes") == [bad],
        f"suspects {s.get('suspect_nodes')} instead of [{bad}]: {s.get('suspect_reason')}",
        r,
    )
    groups = s.get("bisect") or []
    kinds = [str(g.get("kind", "")).split("-") for g in groups]
    p.bisect_launches = len(groups)
    p.bisect_rounds = len({k[1] for k in kinds if len(k) == 3 and k[0] == "bisect"})
    order = [str(x) for x in (s.get("run") or {}).get("nodes") or names]
    p.bisect_expected = list(scale.simulate_bisection(order, bad))
    _add(p, bisect_wall_s=r.seconds, bisect_tasks=_tasks_per_node(r, names))


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def _machine(p: ScalePoint) -> None:
    """What the size costs the machine, after each phase: the controller's peak memory (the
    largest finished child: ansible-playbook or a worker, getrusage ru_maxrss), the most memory
    in use after a phase (MemTotal - MemAvailable, nodes and controller together) and the
    testbed's disk (testbed/.state/run: the nodes' upper layers, mirror, logs)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    used = total - _mem_available()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    p.info["controller_peak_rss_bytes"] = peak
    p.info["machine_mem_used_max_bytes"] = max(
        int(p.info.get("machine_mem_used_max_bytes", 0)), used
    )
    du = subprocess.run(
        ["du", "-sb", str(tbconfig.RUN_DIR)], capture_output=True, text=True, check=False
    ).stdout.split()
    if du:
        p.info["testbed_run_dir_bytes"] = int(du[0])


def measure(n: int, out: Path, repeats: int, timeout: int, persist: Any = None) -> ScalePoint:
    """Every phase at n nodes; a failing phase is recorded in p.errors (up or the first
    provisioning failing skips the rest). ``persist(p)`` runs after every phase, so an
    interrupted run leaves what it measured."""
    p = ScalePoint(n)
    d = out / f"n{n}"
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    def phase(name: str, fn: Any) -> bool:
        started = time.monotonic()
        ok = True
        try:
            fn()
        except (Exception, SystemExit) as exc:
            # repository-relative: the record goes into docs/measurements/ as it is
            p.errors[name] = (str(exc) or type(exc).__name__).replace(f"{REPO}/", "")
            say(f"[{n} nodes] {name} FAILED: {p.errors[name].splitlines()[0][:300]}")
            ok = False
        p.info.setdefault("phase_s", {})[name] = round(time.monotonic() - started, 1)
        p.info["wall_s"] = round(time.monotonic() - t0, 1)
        _machine(p)
        if persist is not None:
            persist(p)
        say(
            f"[{n} nodes] {name}: {'done' if ok else 'failed'} after "
            f"{p.info['phase_s'][name]:.0f} s ({p.info['wall_s']:.0f} s at this size)"
        )
        return ok

    def up() -> None:
        say(f"[{n} nodes] make testbed-up NODES={n}")
        r = make("testbed-up", f"NODES={n}", timeout=1800, log=d / "testbed-up.log")
        need(r.rc == 0, "make testbed-up failed", r)
        p.info["testbed_up_s"] = round(r.seconds, 1)
        got = sorted(x.name for x in cluster_nodes())
        need(got == sorted(_node_names(n)), f"the testbed has {got}, not {n} nodes")
        for node in cluster_nodes():
            clear_faults(node)

    def first() -> None:
        say(f"[{n} nodes] first provisioning run (not timed)")
        r = playbook("provision.yml", timeout=3600, log=d / "provision-first.log")
        need(r.rc == 0, "the first provisioning run failed", r)
        p.info["first_provision_s"] = round(r.seconds, 1)

    def timed() -> None:
        for i in range(repeats):
            say(f"[{n} nodes] converged provision rerun {i + 1}/{repeats}")
            phase(f"provision-{i}", lambda i=i: provision_rerun(p, d, i))
            say(f"[{n} nodes] make verify, cluster step only {i + 1}/{repeats}")
            phase(f"verify-{i}", lambda i=i: verify_cluster(p, d, i))

    if phase("up", up) and phase("first-provision", first):
        timed()
        if n >= 3:
            phase("bisect", lambda: localise_bad_node(p, d, timeout))
        else:
            p.info["bisect"] = "skipped: verify bisects from 3 nodes on"
    p.info["wall_s"] = round(time.monotonic() - t0, 1)
    failed = f", errors in {', '.join(sorted(p.errors))}" if p.errors else ""
    say(f"[{n} nodes] done in {p.info['wall_s']:.0f} s{failed}")
    return p


# --------------------------------------------------------------------------- results


def ansible_forks() -> int:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    return cfg.getint("defaults", "forks", fallback=5)  # Ansible's own default is 5


def scenarios(forks: int, cpus: int) -> list[dict[str, Any]]:
    """The cluster shapes the model is evaluated for: as configured (ansible.cfg's forks)
    with a controller like this machine, then a 16-CPU controller with 128 forks, all nodes
    at once and in batches of 10 % (gpufleet_provision_serial)."""
    shapes: list[dict[str, Any]] = [
        {"forks": forks, "controller_cpus": cpus, "serial": "100%"},
        {"forks": 128, "controller_cpus": 16, "serial": "100%"},
        {"forks": 128, "controller_cpus": 16, "serial": "10%"},
    ]
    return shapes


def scenario_label(shape: dict[str, Any]) -> str:
    return (
        f"forks {shape['forks']}, serial {shape['serial']}, "
        f"{shape['controller_cpus']} controller CPUs"
    )


def results(points: list[ScalePoint], meta: dict[str, Any]) -> dict[str, Any]:
    fits = scale.fit_figures(points)
    res: dict[str, Any] = {
        **meta,
        "points": [p.to_dict() for p in sorted(points, key=lambda p: p.nodes)],
        "fits": {k: f.to_dict() for k, f in fits.items()},
    }
    xs = [
        (float(p.bisect_rounds), b)
        for p in points
        if p.bisect_rounds and (b := p.median("bisect_wall_s")) is not None
    ]
    if len({x for x, _ in xs}) >= 2:
        res["fits_over_rounds"] = {
            "bisect_wall_s": scale.fit_line([x for x, _ in xs], [y for _, y in xs]).to_dict()
        }
    res["model"], res["extrapolation"], res["model_error"] = None, [], None
    cpus = int(meta["host"]["cpus"] or 1)
    nproc = sorted(int(p.info["ranks_per_node"]) for p in points if p.info.get("ranks_per_node"))
    res["testbed_ranks_per_node"] = nproc[len(nproc) // 2] if nproc else 2
    try:
        for shape in scenarios(int(meta["forks"]), cpus):
            model = scale.model_from_points(
                points,
                timeout_s=float(meta["fault_timeout_s"]),
                testbed_ranks_per_node=res["testbed_ranks_per_node"],
                **shape,
            )
            res["model"] = res["model"] or model.to_dict()
            for n in EXTRAPOLATE_TO:
                res["extrapolation"].append(
                    {"scenario": scenario_label(shape), "shape": shape}
                    | scale.predict(model, n).to_dict()
                )
    except ValueError as exc:
        res["model_error"] = str(exc)
    return res


def write(out: Path, res: dict[str, Any]) -> str:
    points = [ScalePoint.from_dict(d) for d in res["points"]]
    fits = scale.fit_figures(points)
    over_rounds = res.get("fits_over_rounds", {}).get("bisect_wall_s")
    if over_rounds:
        fits["bisect_wall_s_over_rounds"] = scale.Fit(**over_rounds)
    preds = [
        (e["scenario"], scale.Prediction(**{k: v for k, v in e.items() if k in PREDICTION}))
        for e in res.get("extrapolation", [])
    ]
    (out / "scale.json").write_text(json.dumps(res, indent=2) + "\n")
    scale.plot_curve(points, fits, out / "scale.png")
    md = scale.render_markdown(points, fits, preds)
    if res.get("model_error"):
        md += f"\nNo extrapolation: {res['model_error']}\n"
    (out / "scale.md").write_text(md)
    return md


def parse_nodes(text: str) -> list[int]:
    try:
        ns = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise SystemExit(f"bench-scale: --nodes {text!r}: write counts like 3,6,12") from None
    if not ns or any(not 1 <= n <= 32 for n in ns):
        raise SystemExit(f"bench-scale: --nodes {text!r}: 1 to 32 nodes each (the testbed's range)")
    return ns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", default="3,6,12", help="testbed sizes, in the order to run them")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per figure and size")
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "bench-scale")
    ap.add_argument(
        "--fault-timeout",
        type=int,
        default=30,
        help="collective and rendezvous timeout of the localisation runs (s)",
    )
    ap.add_argument(
        "--ranks-per-node",
        type=int,
        default=0,
        help="CPU ranks per node of every verify run (-e verify_cpu_nproc; 0: verify's default "
        "of 2). 1 at 32 nodes: 64 torch ranks would need more memory than this machine has",
    )
    ap.add_argument(
        "--render",
        type=Path,
        metavar="SCALE_JSON",
        help="only rewrite scale.png and scale.md beside an existing scale.json",
    )
    args = ap.parse_args()
    if args.render:
        res = json.loads(args.render.read_text())
        res.update(results([ScalePoint.from_dict(d) for d in res["points"]], res))
        print(write(args.render.parent, res))
        return 0
    nodes = parse_nodes(args.nodes)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.ranks_per_node < 0:
        ap.error("--ranks-per-node must be 0 (verify's default) or more")
    if args.ranks_per_node:
        VERIFY_EXTRA.append(f"-e verify_cpu_nproc={args.ranks_per_node}")
    if os.geteuid() != 0:
        raise SystemExit("bench-scale: the testbed needs root")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        "schema": 1,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": f"make bench-scale SCALE_NODES={args.nodes} BENCH_REPEATS={args.repeats}"
        + (f" SCALE_RANKS={args.ranks_per_node}" if args.ranks_per_node else ""),
        "ranks_per_node_asked": args.ranks_per_node or None,
        "argv": sys.argv,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "loadavg_at_start": list(os.getloadavg()),
        },
        "nodes": nodes,
        "repeats": args.repeats,
        "fault_timeout_s": args.fault_timeout,
        "forks": ansible_forks(),
        "wall_s": {},
    }
    say("make wheel (once, for every size)")
    need(make("wheel", timeout=600, log=out / "wheel.log").rc == 0, "make wheel failed")
    points: list[ScalePoint] = []
    md = ""

    def persist(current: ScalePoint) -> None:
        meta["wall_s"]["total"] = round(time.monotonic() - t0, 1)
        write(out, results([*points, current], meta))

    for n in nodes:
        points.append(measure(n, out, args.repeats, args.fault_timeout, persist))
        meta["wall_s"][str(n)] = points[-1].info["wall_s"]
        meta["wall_s"]["total"] = round(time.monotonic() - t0, 1)
        md = write(out, results(points, meta))  # after every size: a later failure keeps it
    print()
    print(md)
    say(f"done in {time.monotonic() - t0:.0f} s: {out}/scale.json, scale.png, scale.md")
    say(f"the testbed is left at {nodes[-1]} nodes; `make testbed-down` removes it")
    return 1 if any(p.errors for p in points) else 0


if __name__ == "__main__":
    sys.exit(main())
