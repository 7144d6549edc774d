"""Aggregate one verify run: reports/<run-id>/<node>/*.json (+ JUnit XML) into
summary.json, summary.md (Jinja2, templates/summary.md.j2) and bandwidth.png (matplotlib,
Agg backend), print a table, and return the exit code (0 ok, 1 any failure).

Layout read::

    reports/<run-id>/run.json              written by playbooks/verify.yml (optional):
                                           {"run_id", "nodes": [...], "expect": {kind: [node]},
                                            "pairs": [[a, b], ...], "mode", ...}
    reports/<run-id>/<node>/<kind>.json    ResultFile envelopes (gpufleet.results)
    reports/<run-id>/<node>/<kind>.xml     JUnit; used when its JSON is missing
    reports/<run-id>/<node>/<kind>.log     launcher/pytest output; its tail explains a
                                           missing result

A node that was expected to produce a kind and did not gets a failing record naming the
file and the last lines of its log. Pair runs (kind "pair-<a>-<b>") name the node at fault:
a node is suspect when every pair it was in failed while some other pair passed.
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.bench import busbw_factor, human_size
from gpufleet.errors import GpufleetError, RefusedError
from gpufleet.results import SCHEMA, BandwidthRow, Record, ResultFile, load_result_file
from gpufleet.results import write_json_atomic as _write_json

SUMMARY_FILES = ("summary.json", "summary.md", "bandwidth.png")


@dataclass
class NodeResult:
    node: str
    files: list[ResultFile] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)  # synthesized (missing files, junit)

    def all_records(self) -> list[tuple[str, Record]]:
        out = [(f.kind, r) for f in self.files for r in f.records]
        return out + [
            (r.name.split(":", 1)[0] if ":" in r.name else "run", r) for r in self.records
        ]


@dataclass
class Summary:
    run_id: str
    run_dir: Path
    run_info: dict[str, Any]
    nodes: dict[str, NodeResult]
    suspects: list[str] = field(default_factory=list)
    suspect_reason: str = ""  # "pair reruns", "killed by a signal", "dropped out of the run"
    pair_results: list[dict[str, Any]] = field(default_factory=list)

    def rows(self) -> list[tuple[str, str, Record]]:
        return [
            (n, kind, r) for n, nr in sorted(self.nodes.items()) for kind, r in nr.all_records()
        ]

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(("pass", "warn", "fail", "skip"), 0)
        for _, _, r in self.rows():
            c[r.status] += 1
        return c

    def failures(self) -> list[tuple[str, str, Record]]:
        return [x for x in self.rows() if x[2].status == "fail"]

    @property
    def status(self) -> str:
        return "fail" if self.failures() else "pass"

    @property
    def exit_code(self) -> int:
        return 1 if self.failures() else 0

    def bandwidth(self) -> list[tuple[str, str, BandwidthRow]]:
        """(label, node, row) for every sweep; label = kind (allreduce = the cluster run)."""
        out = []
        for n, nr in sorted(self.nodes.items()):
            for f in nr.files:
                for b in f.bandwidth:
                    out.append((f.kind, n, b))
        return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _log_tail(path: Path, lines: int = 12) -> str:
    return "\n".join(_read(path).strip().splitlines()[-lines:])


_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):.*?time\s*:\s*(?P<time>\S+)"
    r".*?host\s*:\s*(?P<host>\S+).*?rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)"
    r".*?exitcode\s*:\s*(?P<code>-?\d+)",
    re.S,
)


def root_cause(log_text: str) -> dict[str, Any]:
    """torchrun's "Root Cause (first observed failure)" block of a launch log: rank,
    local rank, host, time, exit code, and the signal name when a signal ended the rank
    (exit code -N). Empty when the log has no such block."""
    blocks = list(_ROOT_CAUSE.finditer(log_text))
    if not blocks:
        return {}
    m = blocks[-1]  # torchrun prints one block per failed launch
    code = int(m["code"])
    out: dict[str, Any] = {
        "host": m["host"],
        "time": m["time"],
        "rank": int(m["rank"]),
        "local_rank": int(m["local"]),
        "exitcode": code,
    }
    if code < 0:
        try:
            out["signal"] = signal.Signals(-code).name
        except ValueError:
            out["signal"] = f"signal {-code}"
    return out


def junit_records(path: Path, node: str) -> list[Record]:
    """Records from a JUnit XML file (pytest --junitxml)."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        return [
            Record(
                name=f"{path.stem}:junit",
                status="fail",
                node=node,
                message=f"unreadable JUnit file {path.name}: {exc}",
            )
        ]
    recs = []
    for tc in root.iter("testcase"):
        name = f"{path.stem}:{tc.get('name', '?')}"
        status: Any = "pass"
        message = ""
        for child in tc:
            if child.tag in ("failure", "error"):
                status, message = "fail", (child.get("message") or "")[:500]
            elif child.tag == "skipped":
                status, message = "skip", (child.get("message") or "")[:500]
        recs.append(Record(name=name, status=status, node=node, message=message))
    return recs


def collect(run_dir: str | os.PathLike[str]) -> Summary:
    run = Path(run_dir)
    if not run.is_dir():
        raise RefusedError(f"{run} is not a directory (expected reports/<run-id>)")
    info: dict[str, Any] = {}
    if (run / "run.json").is_file():
        info = json.loads((run / "run.json").read_text(encoding="utf-8"))
    node_names = set(info.get("nodes", []))
    node_names |= {p.name for p in run.iterdir() if p.is_dir() and not p.name.startswith(".")}
    nodes: dict[str, NodeResult] = {}
    for name in sorted(node_names):
        nr = NodeResult(name)
        d = run / name
        seen: set[str] = set()
        for f in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                rf = load_result_file(f)
            except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
                nr.records.append(
                    Record(
                        name=f"{f.stem}:result",
                        status="fail",
                        node=name,
                        message=f"unreadable result file {f.name}: {exc}",
                        remedy="rerun make verify; report the file if it persists",
                    )
                )
                continue
            nr.files.append(rf)
            seen.add(f.stem)
        for x in sorted(d.glob("*.xml")) if d.is_dir() else []:
            if x.stem not in seen:
                nr.records.extend(junit_records(x, name))
                seen.add(x.stem)
        dropped = info.get("dropped", {}).get(name)
        for kind, expected_nodes in info.get("expect", {}).items():
            if dropped is None and name in expected_nodes and kind not in seen:
                tail = _log_tail(d / f"{kind}.log")
                nr.records.append(
                    Record(
                        name=f"{kind}:result",
                        status="fail",
                        node=name,
                        message=f"no {kind}.json from {name}"
                        + (
                            f"; last lines of {kind}.log:\n{tail}"
                            if tail
                            else " and no log (the task did not start or the fetch failed)"
                        ),
                        remedy=_remedy_for(tail)
                        if tail
                        else (
                            f"see the ansible output for {name}: the {kind} step failed or was "
                            "skipped before writing its result"
                        ),
                    )
                )
        if dropped is not None:
            nr.records.append(
                Record(
                    name="ansible:node",
                    status="fail",
                    node=name,
                    message=f"{name} dropped out of the run: {str(dropped).strip()[-600:]}",
                    remedy=(
                        f"fix {name} (make provision, or check SSH/reachability) "
                        "and rerun make verify"
                    ),
                )
            )
        cause = root_cause(_read(d / "allreduce.log"))
        if cause.get("signal"):
            nr.records.append(
                Record(
                    name="allreduce:signal",
                    status="fail",
                    node=name,
                    value=cause["signal"],
                    message=(
                        f"rank {cause['rank']} (local rank {cause['local_rank']}) on {name} was "
                        f"killed by {cause['signal']} at {cause['time']}; the other nodes' "
                        "ranks failed because this peer went away"
                    ),
                    remedy=(
                        f"{cause['signal']} from outside the run: the kernel OOM killer "
                        f"(journalctl -k / dmesg on {name}), a job scheduler or an operator; "
                        "free memory or lower verify_sizes, then rerun make verify"
                    ),
                )
            )
        nodes[name] = nr
    summary = Summary(
        run_id=str(info.get("run_id", run.name)), run_dir=run, run_info=info, nodes=nodes
    )
    _analyse_pairs(summary)
    if summary.suspects:
        summary.suspect_reason = "pair reruns"
    else:  # no pair verdict: the nodes where a signal killed a rank, else dropped nodes
        killed = sorted(
            n for n, nr in nodes.items() if any(r.name == "allreduce:signal" for r in nr.records)
        )
        dropped = sorted(info.get("dropped", {}))
        summary.suspects = killed or dropped
        summary.suspect_reason = (
            "killed by a signal" if killed else "dropped out of the run" if dropped else ""
        )
    return summary


def _remedy_for(log_tail: str) -> str:
    t = log_tail.lower()
    if "usage:" in t or "error: unrecognized arguments" in t or "ambiguous option" in t:
        return (
            "the launcher refused its arguments: gpufleet and torch on this node do not "
            "match (rerun make provision) or this is a gpufleet bug; see the log"
        )
    if "address already in use" in t or "eaddrinuse" in t:
        return "the rendezvous port is busy: stop the old run or set gpufleet_rdzv_port"
    if "no module named" in t:
        return "the env lacks a package: rerun make provision (torch_env role)"
    if "connection refused" in t or "no route to host" in t:
        return (
            "connection to the rendezvous failed: check the master's address "
            "(gpufleet_cluster_address), firewalld, and that the port is free"
        )
    if "ran past" in t or "timed out" in t or "timeout" in t:
        return (
            "a peer never joined or stalled: run `gpufleet probe` between the nodes, check "
            "firewalld (open gpufleet_rdzv_port and the NCCL ports to the cluster CIDR) "
            "and NCCL_SOCKET_IFNAME in /etc/gpufleet/nccl.env"
        )
    return "read the log above; rerun the failing step by hand on that node"


def _analyse_pairs(s: Summary) -> None:
    pairs = s.run_info.get("pairs", [])
    if not pairs:
        return
    results = []
    for a, b in pairs:
        kind = f"pair-{a}-{b}"
        ok = None
        for n in (a, b):
            nr = s.nodes.get(n)
            if nr is None:
                continue
            recs = [r for k, r in nr.all_records() if k == kind]
            if recs:
                ok = (ok is not False) and all(r.status != "fail" for r in recs)
        results.append({"pair": [a, b], "status": "pass" if ok else "fail"})
    s.pair_results = results
    failed = [set(r["pair"]) for r in results if r["status"] == "fail"]
    passed = [set(r["pair"]) for r in results if r["status"] == "pass"]
    if not failed:
        return
    good = set().union(*passed) if passed else set()
    bad = set().union(*failed)
    suspects = sorted(bad - good)
    if not suspects and not passed:
        suspects = sorted(bad)
    s.suspects = suspects


def to_json(s: Summary) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "run_id": s.run_id,
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "status": s.status,
        "exit_code": s.exit_code,
        "counts": s.counts(),
        "run": s.run_info,
        "nodes": {
            n: {
                "mode": sorted({f.mode for f in nr.files if f.mode in ("gpu", "cpu")}),
                "files": [f.kind for f in nr.files],
                "records": [{"kind": k, **r.to_dict()} for k, r in nr.all_records()],
            }
            for n, nr in sorted(s.nodes.items())
        },
        "failures": [{"node": n, "kind": k, **r.to_dict()} for n, k, r in s.failures()],
        "bandwidth": [{"source": k, "node": n, **b.to_dict()} for k, n, b in s.bandwidth()],
        "busbw_factors": {
            str(w): round(busbw_factor(w), 6)
            for w in sorted({b.world_size for *_, b in s.bandwidth()})
        },
        "pairs": s.pair_results,
        "suspect_nodes": s.suspects,
        "suspect_reason": s.suspect_reason,
    }


def render_markdown(s: Summary) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("gpufleet", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template("summary.md.j2").render(s=to_json(s))


def plot_bandwidth(s: Summary, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    series: dict[str, list[BandwidthRow]] = {}
    for kind, node, row in s.bandwidth():
        what = {"allreduce": "cluster", "smoke": "single-node"}.get(kind, kind)
        label = f"{what} ({node}, n={row.world_size}, {row.backend})"
        series.setdefault(label, []).append(row)
    for label, unsorted in sorted(series.items()):
        rows = sorted(unsorted, key=lambda r: r.size_bytes)
        xs = [r.size_bytes for r in rows]
        (line,) = ax.plot(xs, [r.busbw for r in rows], marker="o", label=f"busbw {label}")
        ax.plot(
            xs,
            [r.algbw for r in rows],
            marker=".",
            linestyle="--",
            alpha=0.6,
            color=line.get_color(),
            label=f"algbw {label}",
        )
    gates = [
        f.meta["threshold"] for nr in s.nodes.values() for f in nr.files if f.meta.get("threshold")
    ]
    threshold = gates[0] if gates else None
    if threshold:
        ax.axhline(float(threshold), color="red", linestyle=":", label=f"gate {threshold} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s (10^9)")
    ax.set_title(f"all-reduce bandwidth, run {s.run_id}")
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no bandwidth rows in this run", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def table(s: Summary) -> str:
    """Plain-text table for the terminal."""
    lines = [f"gpufleet verify run {s.run_id}: {s.status.upper()}  ({s.run_dir})", ""]
    head = f"{'node':<20} {'suite':<18} {'pass':>5} {'warn':>5} {'fail':>5} {'skip':>5}"
    lines += [head, "-" * len(head)]
    for n, nr in sorted(s.nodes.items()):
        per: dict[str, dict[str, int]] = {}
        for kind, r in nr.all_records():
            per.setdefault(kind, dict.fromkeys(("pass", "warn", "fail", "skip"), 0))
            per[kind][r.status] += 1
        if not per:
            lines.append(f"{n:<20} {'(no results)':<18}")
        for kind, c in sorted(per.items()):
            lines.append(
                f"{n:<20} {kind:<18} {c['pass']:>5} {c['warn']:>5} {c['fail']:>5} {c['skip']:>5}"
            )
    bw = s.bandwidth()
    if bw:
        lines += [
            "",
            f"{'source':<22} {'node':<14} {'n':>3} {'size':>8} {'time_us':>11} "
            f"{'algbw':>9} {'busbw':>9} {'wrong':>6}",
        ]
        for kind, n, b in bw:
            lines.append(
                f"{kind:<22} {n:<14} {b.world_size:>3} {human_size(b.size_bytes):>8} "
                f"{b.time_us:>11.1f} {b.algbw:>9.3f} {b.busbw:>9.3f} {b.wrong:>6}"
            )
    fails = s.failures()
    if fails:
        lines += ["", "FAILURES:"]
        for n, kind, r in fails:
            lines.append(f"  [{n}] {kind}/{r.name}: {r.message}".rstrip())
            if r.remedy:
                lines.append(f"      -> {r.remedy}")
    if s.suspects:
        lines += ["", f"Node(s) at fault ({s.suspect_reason}): " + ", ".join(s.suspects)]
        if s.pair_results and all(p["status"] == "fail" for p in s.pair_results):
            lines.append(
                "  (every pair failed: not one bad node - look at what they share: the "
                "threshold, the fabric/switch, nccl.env)"
            )
    return "\n".join(lines)


def write_report(run_dir: str | os.PathLike[str], *, plot: bool = True) -> Summary:
    s = collect(run_dir)
    _write_json(s.run_dir / "summary.json", to_json(s))
    (s.run_dir / "summary.json").chmod(0o644)
    (s.run_dir / "summary.md").write_text(render_markdown(s), encoding="utf-8")
    if plot:
        plot_bandwidth(s, s.run_dir / "bandwidth.png")
    return s


def update_latest(run_dir: Path) -> Path:
    """reports/latest -> <run-id> (relative link, replaced atomically)."""
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
    return link


def ring_pair_rounds(nodes: Sequence[str]) -> list[list[list[str]]]:
    """Ring pairs (n0,n1), (n1,n2), ..., (n(N-1),n0) in rounds where no node appears twice.

    Even N: two rounds; odd N: three (the closing pair would clash with the first)."""
    n = len(nodes)
    if n < 3:
        return [[list(nodes)]] if n == 2 else []
    rounds: list[list[list[str]]] = [[], [], []]
    for k in range(n):
        r = 2 if (n % 2 == 1 and k == n - 1) else k % 2
        rounds[r].append([nodes[k], nodes[(k + 1) % n]])
    return [r for r in rounds if r]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpufleet.report RUN_DIR`` (the same as ``gpufleet report RUN_DIR``).

    ``python -m gpufleet.report --pair-rounds N1 N2 ...`` prints the pair rounds as JSON
    and ``--root-cause LOG`` torchrun's root cause of a launch log as JSON (both used by
    playbooks/verify.yml)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--pair-rounds"]:
        print(json.dumps(ring_pair_rounds(args_list[1:])))
        return 0
    if args_list[:1] == ["--root-cause"] and len(args_list) == 2:
        print(json.dumps(root_cause(_read(Path(args_list[1])))))
        return 0

    p = argparse.ArgumentParser(
        prog="gpufleet report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    try:
        return run(p.parse_args(args_list))
    except GpufleetError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code


def add_arguments(p: Any) -> None:
    p.add_argument("run_dir", help="reports/<run-id>")
    p.add_argument("--no-plot", action="store_true", help="skip bandwidth.png")
    p.add_argument("--latest", action="store_true", help="point reports/latest at RUN_DIR")
    p.add_argument("--quiet", action="store_true", help="no table on stdout")


def run(args: Any) -> int:
    s = write_report(args.run_dir, plot=not args.no_plot)
    if args.latest:
        update_latest(s.run_dir.resolve())
    if not args.quiet:
        print(table(s))
        print(f"\nreport: {s.run_dir}/summary.md (summary.json, bandwidth.png)")
    return s.exit_code


if __name__ == "__main__":
    sys.exit(main())
