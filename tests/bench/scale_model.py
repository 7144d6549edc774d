"""The scale curve of ``make bench-scale`` and the model that extrapolates it to 100 and 1000
nodes (docs/scale.md).

tests/bench/bench_scale.py measures, at a few testbed sizes (3, 6, 12 nodes), a converged
provisioning rerun, verify's cluster step and the localisation of one bad node. This module
holds the arithmetic, pure and typed: least-squares lines through the medians, the Ansible
mechanics the model needs (forks waves, ``serial`` batches, bisection rounds), the model
itself, and two writers (the curve as PNG, the table as Markdown).

The testbed's nodes are network namespaces on the controller's own CPUs (2 on the machine
this was written on), so every per-node figure measured there is the node's work *plus* its
share of a contended machine. The model therefore takes from the testbed only what does not
depend on where the nodes run (tasks per node, CPU seconds per host-task, the controller's
fixed work, report size), treats the per-node wall time as an upper bound, and names the one
parameter it cannot measure there (the rendezvous cost per rank) as an assumption.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.report import localise

# Figures bench_scale records per testbed size, each a list of samples (one per repeat).
# key -> (label, unit)
FIGURES: dict[str, tuple[str, str]] = {
    "provision_wall_s": ("converged provision rerun, wall", "s"),
    "provision_machine_cpu_s": ("converged provision rerun, machine CPU", "CPU-s"),
    "provision_controller_cpu_s": ("converged provision rerun, controller CPU", "CPU-s"),
    "provision_tasks": ("provision tasks per node (PLAY RECAP ok)", "tasks"),
    "verify_wall_s": ("verify cluster step, wall", "s"),
    "verify_machine_cpu_s": ("verify cluster step, machine CPU", "CPU-s"),
    "verify_controller_cpu_s": ("verify cluster step, controller CPU", "CPU-s"),
    "verify_tasks": ("verify tasks per node (PLAY RECAP ok)", "tasks"),
    "verify_step_s": ("torchrun step, first start to last end", "s"),
    "report_aggregate_s": ("gpufleet report summary of the run", "s"),
    "report_files_per_node": ("result files fetched per node", "files"),
    "report_bytes_per_node": ("result bytes fetched per node", "bytes"),
    "bisect_wall_s": ("bad-node localisation, wall", "s"),
    "bisect_tasks": ("localisation run tasks per node (PLAY RECAP ok)", "tasks"),
    # fitted over the rounds, not the nodes (bench_scale's fits_over_rounds): b is per round
    "bisect_wall_s_over_rounds": ("bad-node localisation, wall, over rounds", "s"),
}
# the figures drawn and fitted as time over node count
WALL_FIGURES = ("provision_wall_s", "verify_wall_s", "bisect_wall_s")
CPU_FIGURES = (
    "provision_machine_cpu_s",
    "provision_controller_cpu_s",
    "verify_machine_cpu_s",
    "verify_controller_cpu_s",
)
FIT_FIGURES = (
    *WALL_FIGURES,
    *CPU_FIGURES,
    "verify_step_s",
    "report_aggregate_s",
    "report_bytes_per_node",
)

# The one model input the testbed cannot measure (docs/scale.md, "Rendezvous"): seconds of
# rendezvous and process-group set-up per rank, beyond a small run's. An assumption.
DEFAULT_RDZV_PER_RANK_S = 0.002
DEFAULT_RANKS_PER_NODE = 8


# --------------------------------------------------------------------------- fits


@dataclass(frozen=True)
class Fit:
    """``t(x) = a + b*x``, least squares over ``points`` points; ``r2`` the coefficient of
    determination (1.0 when every y is the same and the line goes through them)."""

    a: float
    b: float
    r2: float
    points: int

    def at(self, x: float) -> float:
        return self.a + self.b * x

    def to_dict(self) -> dict[str, float | int]:
        return {"a": self.a, "b": self.b, "r2": self.r2, "points": self.points}


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """Ordinary least squares of ys on xs. Refuses fewer than 2 points, x values that are all
    equal (no slope can be told) and non-finite values."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} x values but {len(ys)} y values")
    if len(xs) < 2:
        raise ValueError(f"a line needs at least 2 points, got {len(xs)}")
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError("non-finite value in the points")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("every x is the same: no slope to fit")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - my) ** 2 for y in ys)
    r2 = 1.0 if ss_tot <= 0 else 1.0 - ss_res / ss_tot
    return Fit(a=a, b=b, r2=r2, points=len(xs))


# --------------------------------------------------------------------------- measured points


@dataclass
class ScalePoint:
    """Everything measured at one testbed size. ``samples`` maps a FIGURES key to one value
    per repeat; ``errors`` maps a phase (up, provision, verify, bisect) to what went wrong."""

    nodes: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    bisect_rounds: int | None = None
    bisect_launches: int | None = None
    # what gpufleet.report.localise needs for this bad node in this node order
    bisect_expected: list[int] | None = None
    errors: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def median(self, key: str) -> float | None:
        xs = self.samples.get(key) or []
        return float(statistics.median(xs)) if xs else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "samples": self.samples,
            "medians": {k: self.median(k) for k in self.samples},
            "bisect_rounds": self.bisect_rounds,
            "bisect_launches": self.bisect_launches,
            "bisect_expected": self.bisect_expected,
            "bisect_bound": list(bisection_bound(self.nodes)),
            "errors": self.errors,
            "info": self.info,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScalePoint:
        return cls(
            nodes=int(d["nodes"]),
            samples={str(k): [float(x) for x in v] for k, v in d.get("samples", {}).items()},
            bisect_rounds=d.get("bisect_rounds"),
            bisect_launches=d.get("bisect_launches"),
            bisect_expected=d.get("bisect_expected"),
            errors=dict(d.get("errors", {})),
            info=dict(d.get("info", {})),
        )


def series(points: Sequence[ScalePoint], key: str) -> tuple[list[float], list[float]]:
    """(node counts, medians) of one figure over the points that have it."""
    xs, ys = [], []
    for p in sorted(points, key=lambda p: p.nodes):
        m = p.median(key)
        if m is not None:
            xs.append(float(p.nodes))
            ys.append(m)
    return xs, ys


def fit_figures(points: Sequence[ScalePoint], keys: Sequence[str] = FIT_FIGURES) -> dict[str, Fit]:
    """A line over the node count for every figure measured at 2 sizes or more."""
    out = {}
    for key in keys:
        xs, ys = series(points, key)
        if len(set(xs)) >= 2:
            out[key] = fit_line(xs, ys)
    return out


# --------------------------------------------------------------------------- Ansible mechanics


def wave_sizes(hosts: int, forks: int) -> list[int]:
    """Hosts handled at once per task: Ansible runs a task on at most ``forks`` hosts at a
    time, so ``hosts`` take ceil(hosts / forks) waves, the last one partial."""
    if hosts < 0 or forks < 1:
        raise ValueError(f"hosts {hosts} must be >= 0 and forks {forks} >= 1")
    full, rest = divmod(hosts, forks)
    return [forks] * full + ([rest] if rest else [])


def waves(hosts: int, forks: int) -> int:
    return len(wave_sizes(hosts, forks))


def serial_batch_size(hosts: int, serial: int | str) -> int:
    """Ansible's ``serial`` (gpufleet_provision_serial): a count, or a percentage of the
    play's hosts rounded down and at least 1 (ansible.utils.helpers.pct_to_int)."""
    if isinstance(serial, str) and serial.strip().endswith("%"):
        pct = float(serial.strip()[:-1])
        if not 0 < pct <= 100:
            raise ValueError(f"serial {serial!r}: a percentage must be in (0, 100]")
        return int(pct / 100.0 * hosts) or 1
    size = int(serial)
    if size < 1:
        raise ValueError(f"serial {serial!r}: a count must be >= 1")
    return size


def serial_batches(hosts: int, serial: int | str) -> list[int]:
    """Sizes of the batches the provisioning play runs one after the other."""
    if hosts <= 0:
        return []
    size = min(serial_batch_size(hosts, serial), hosts)
    full, rest = divmod(hosts, size)
    return [size] * full + ([rest] if rest else [])


def bisection_bound(n: int) -> tuple[int, int]:
    """(rounds, launches) bisection needs at most to name one bad node among ``n``:
    ceil(log2 n) rounds of at most 2 concurrent launches (gpufleet.report.localise). Verify
    bisects only from 3 nodes on: (0, 0) below."""
    if n < 3:
        return 0, 0
    rounds = math.ceil(math.log2(n))
    return rounds, 2 * rounds


def simulate_bisection(nodes: Sequence[str], bad: str) -> tuple[int, int]:
    """(rounds, launches) verify's bisection takes for this node order when exactly ``bad``
    breaks every group it is in: the schedule of gpufleet.report.localise, replayed."""
    if bad not in nodes:
        raise ValueError(f"{bad} is not one of the nodes")
    history: list[list[dict[str, Any]]] = []
    launches = 0
    while groups := localise.next_groups(list(nodes), history):
        history.append([{"nodes": g, "passed": bad not in g} for g in groups])
        launches += len(groups)
    return len(history), launches


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class PlaybookCost:
    """One playbook run, reduced to what does not depend on where the nodes run.

    - ``fixed_s``: controller work per run, whatever the node count (intercept of the
      controller-CPU line; it runs on one core, so seconds = CPU seconds);
    - ``tasks_per_node``: tasks each node runs (PLAY RECAP ok);
    - ``task_latency_s``: one task on one node with nothing else competing: the machine's
      CPU seconds per added node (slope of the machine-CPU line: the controller's worker,
      ssh and the module on the node, one after the other) over the tasks per node. Measured
      where the nodes share the controller's CPUs, so an upper bound;
    - ``controller_task_cpu_s``: controller CPU seconds per host and task (slope of the
      controller-CPU line over the tasks per node): the part that stays on the controller
      however many machines the nodes are.
    """

    fixed_s: float
    tasks_per_node: float
    task_latency_s: float
    controller_task_cpu_s: float


def task_time(hosts: int, cost: PlaybookCost, *, forks: int, controller_cpus: int) -> float:
    """Seconds one task takes over ``hosts`` hosts: each wave of w hosts (w <= forks) lasts
    as long as the longer of one task's latency and the controller CPU its w results need on
    ``controller_cpus`` cores: max(latency, w * controller_cpu / cpus)."""
    if controller_cpus < 1:
        raise ValueError("controller_cpus must be >= 1")
    return sum(
        max(cost.task_latency_s, w * cost.controller_task_cpu_s / controller_cpus)
        for w in wave_sizes(hosts, forks)
    )


def playbook_time(
    hosts: int,
    cost: PlaybookCost,
    *,
    forks: int,
    controller_cpus: int,
    serial: int | str = "100%",
) -> float:
    """Seconds of a playbook run over ``hosts`` hosts: the fixed controller work once, then
    every batch of ``serial`` one after the other, each running its tasks_per_node tasks
    (Ansible's linear strategy: a task ends on every host of the batch before the next)."""
    return cost.fixed_s + sum(
        cost.tasks_per_node * task_time(b, cost, forks=forks, controller_cpus=controller_cpus)
        for b in serial_batches(hosts, serial)
    )


@dataclass(frozen=True)
class ScaleModel:
    """The model of docs/scale.md. Costs come from the testbed (model_from_points); the
    cluster's shape (forks, controller CPUs, serial, ranks per node) and the rendezvous cost
    per rank are the scenario's.

    - provisioning rerun(n) = playbook_time(n, provision)
    - verify cluster step(n) = playbook_time(n, verify) + step_s + rendezvous(n * ranks)
      + report(n), where the torchrun step runs on every node at once (one blocking task
      per node, or one Slurm job), rendezvous(r) = r * rdzv_per_rank_s, and report(n) =
      report_fixed_s + report_s_per_byte * report_bytes(n) is gpufleet report, one process
      on the controller (no forks, no CPUs to spread over), reading report_bytes(n) =
      n * (report_node_bytes + report_rank_bytes * n * ranks_per_node): every node's
      all-reduce result lists every rank, so the report grows as n squared;
    - the SSH launcher starts torchrun as a detached job (each start gives its fork back
      once the job has its PID), so every node starts within the first waves of starts,
      and waits with one cheap shell loop per node; the step itself is therefore counted
      once, not per wave;
    - localisation(n) = verify(n) + timeout_s (the full run fails at the timeout) +
      rounds(n) * round(n), rounds(n) = ceil(log2 n), each round = timeout_s (the half with
      the bad node waits it out) + step_s + rendezvous of half the ranks + the round's
      tasks over all n hosts (bisect_tasks_per_round * task_time(n)).
    """

    provision: PlaybookCost
    verify: PlaybookCost
    step_s: float
    report_fixed_s: float
    report_s_per_byte: float
    report_node_bytes: float
    report_rank_bytes: float
    bisect_tasks_per_round: float
    timeout_s: float
    forks: int = 32
    controller_cpus: int = 2
    serial: int | str = "100%"
    ranks_per_node: int = DEFAULT_RANKS_PER_NODE
    rdzv_per_rank_s: float = DEFAULT_RDZV_PER_RANK_S

    def to_dict(self) -> dict[str, Any]:
        return {
            "provision": vars(self.provision),
            "verify": vars(self.verify),
            "step_s": self.step_s,
            "report_fixed_s": self.report_fixed_s,
            "report_s_per_byte": self.report_s_per_byte,
            "report_node_bytes": self.report_node_bytes,
            "report_rank_bytes": self.report_rank_bytes,
            "bisect_tasks_per_round": self.bisect_tasks_per_round,
            "timeout_s": self.timeout_s,
            "forks": self.forks,
            "controller_cpus": self.controller_cpus,
            "serial": self.serial,
            "ranks_per_node": self.ranks_per_node,
            "rdzv_per_rank_s": self.rdzv_per_rank_s,
        }


@dataclass(frozen=True)
class Prediction:
    nodes: int
    provision_s: float
    verify_s: float
    bisect_s: float
    bisect_rounds: int
    bisect_launches: int
    report_bytes: float  # result bytes fetched from all nodes
    waves: int  # per task, at forks
    batches: int  # provisioning batches at serial
    # verify's parts: ansible, step, rendezvous, report
    verify_terms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def predict(model: ScaleModel, n: int) -> Prediction:
    """The model at ``n`` nodes (ScaleModel's docstring has the formulas)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    shape = {"forks": model.forks, "controller_cpus": model.controller_cpus}
    report_bytes = n * (
        model.report_node_bytes + model.report_rank_bytes * n * model.ranks_per_node
    )
    provision = playbook_time(n, model.provision, serial=model.serial, **shape)
    terms = {
        "ansible": playbook_time(n, model.verify, **shape),
        "step": model.step_s,
        "rendezvous": n * model.ranks_per_node * model.rdzv_per_rank_s,
        "report": model.report_fixed_s + model.report_s_per_byte * report_bytes,
    }
    verify = sum(terms.values())
    rounds, launches = bisection_bound(n)
    round_s = (
        model.timeout_s
        + model.step_s
        + math.ceil(n / 2) * model.ranks_per_node * model.rdzv_per_rank_s
        + model.bisect_tasks_per_round * task_time(n, model.verify, **shape)
    )
    bisect = verify + model.timeout_s + rounds * round_s
    return Prediction(
        nodes=n,
        provision_s=provision,
        verify_s=verify,
        bisect_s=bisect,
        bisect_rounds=rounds,
        bisect_launches=launches,
        report_bytes=report_bytes,
        waves=waves(n, model.forks),
        batches=len(serial_batches(n, model.serial)),
        verify_terms=terms,
    )


def _median_of(points: Sequence[ScalePoint], key: str) -> float:
    vals = [m for p in points if (m := p.median(key)) is not None]
    if not vals:
        raise ValueError(f"no measurement of {key}")
    return float(statistics.median(vals))


def model_from_points(
    points: Sequence[ScalePoint],
    *,
    timeout_s: float,
    forks: int = 32,
    controller_cpus: int = 2,
    serial: int | str = "100%",
    ranks_per_node: int = DEFAULT_RANKS_PER_NODE,
    rdzv_per_rank_s: float = DEFAULT_RDZV_PER_RANK_S,
    testbed_ranks_per_node: int = 2,
) -> ScaleModel:
    """The model's costs from the testbed (at least 2 sizes with provisioning and verify
    figures). Negative intercepts or slopes (noise over few points) count as 0.

    verify's tasks are taken to cost one provisioning task's latency each (ordinary module
    runs over SSH); its node-side CPU is mostly the torchrun step, which the model keeps
    apart (``step_s``: the step at the smallest size, the least contended). The report
    aggregation's own line (timed apart by the bench) is taken out of verify's controller
    line so that it is not counted twice. Report bytes per node = a + b*n on the testbed
    (``testbed_ranks_per_node`` ranks per node, verify_cpu_nproc): a per node, b per
    node and testbed rank; the aggregation time is fitted over the total bytes of a run.
    """
    fits = fit_figures(points)
    need = (
        "provision_machine_cpu_s",
        "provision_controller_cpu_s",
        "verify_controller_cpu_s",
    )
    missing = [k for k in need if k not in fits]
    if missing:
        raise ValueError(f"too few sizes measured for {', '.join(missing)} (2 needed)")
    t_prov = _median_of(points, "provision_tasks")
    t_ver = _median_of(points, "verify_tasks")
    if t_prov <= 0 or t_ver <= 0:
        raise ValueError("tasks per node must be > 0")
    pm, pc = fits["provision_machine_cpu_s"], fits["provision_controller_cpu_s"]
    latency = max(pm.b, pc.b, 0.0) / t_prov
    provision = PlaybookCost(
        fixed_s=max(pc.a, 0.0),
        tasks_per_node=t_prov,
        task_latency_s=latency,
        controller_task_cpu_s=max(pc.b, 0.0) / t_prov,
    )
    vc = fits["verify_controller_cpu_s"]
    rep = fits.get("report_aggregate_s", Fit(a=0.0, b=0.0, r2=1.0, points=0))
    verify = PlaybookCost(
        fixed_s=max(vc.a - max(rep.a, 0.0), 0.0),
        tasks_per_node=t_ver,
        task_latency_s=latency,
        controller_task_cpu_s=max(vc.b - max(rep.b, 0.0), 0.0) / t_ver,
    )
    size = fits.get("report_bytes_per_node", Fit(a=0.0, b=0.0, r2=1.0, points=0))
    by_bytes = [
        (p.nodes * b, t)
        for p in points
        if (b := p.median("report_bytes_per_node")) is not None
        and (t := p.median("report_aggregate_s")) is not None
    ]
    agg = (
        fit_line([x for x, _ in by_bytes], [y for _, y in by_bytes])
        if len({x for x, _ in by_bytes}) >= 2
        else Fit(a=max(rep.a, 0.0), b=0.0, r2=1.0, points=0)
    )
    steps = sorted((p.nodes, m) for p in points if (m := p.median("verify_step_s")) is not None)
    step = steps[0][1] if steps else None
    # tasks a bisection round adds per node: the slope of (localisation run's tasks - a
    # healthy run's) over the rounds when 2 round counts were seen, else the ratio
    extra = [
        (float(p.bisect_rounds), b - v)
        for p in points
        if p.bisect_rounds
        and (b := p.median("bisect_tasks")) is not None
        and (v := p.median("verify_tasks")) is not None
    ]
    if len({r for r, _ in extra}) >= 2:
        per_round = fit_line([r for r, _ in extra], [t for _, t in extra]).b
    else:
        per_round = float(statistics.median([t / r for r, t in extra])) if extra else 0.0
    return ScaleModel(
        provision=provision,
        verify=verify,
        step_s=max(step or 0.0, 0.0),
        report_fixed_s=max(agg.a, 0.0),
        report_s_per_byte=max(agg.b, 0.0),
        report_node_bytes=max(size.a, 0.0),
        report_rank_bytes=max(size.b, 0.0) / max(testbed_ranks_per_node, 1),
        bisect_tasks_per_round=max(per_round, 0.0),
        timeout_s=timeout_s,
        forks=forks,
        controller_cpus=controller_cpus,
        serial=serial,
        ranks_per_node=ranks_per_node,
        rdzv_per_rank_s=rdzv_per_rank_s,
    )


# --------------------------------------------------------------------------- writers


def human_s(s: float | None) -> str:
    """12.3 s, 4.5 min, 2.1 h; '-' for None."""
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _spread(p: ScalePoint, key: str, unit: str = "s") -> str:
    xs = p.samples.get(key) or []
    if not xs:
        return "-"
    m = float(statistics.median(xs))
    if min(xs) == max(xs):
        return f"{m:.1f} {unit}"
    return f"{m:.1f} {unit} ({min(xs):.1f}–{max(xs):.1f})"


def render_markdown(
    points: Sequence[ScalePoint],
    fits: Mapping[str, Fit],
    predictions: Sequence[tuple[str, Prediction]] = (),
) -> str:
    """The measured table (medians, min to max over the repeats), the fits, and the
    extrapolation rows (scenario label, prediction)."""
    lines = [
        "| nodes | provision rerun, wall | machine CPU | controller CPU | verify cluster step, "
        "wall | torchrun step | localisation, wall | rounds / launches (expected; bound) "
        "| report per node |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(points, key=lambda p: p.nodes):
        exp = p.bisect_expected
        bound = bisection_bound(p.nodes)
        rl = (
            f"{p.bisect_rounds} / {p.bisect_launches} "
            f"({f'{exp[0]} / {exp[1]}' if exp else '-'}; {bound[0]} / {bound[1]})"
            if p.bisect_rounds is not None
            else "-"
        )
        files, size = p.median("report_files_per_node"), p.median("report_bytes_per_node")
        report = f"{files:.1f} files, {size / 1024:.1f} KiB" if files and size else "-"
        lines.append(
            f"| {p.nodes} | {_spread(p, 'provision_wall_s')} "
            f"| {_spread(p, 'provision_machine_cpu_s', 'CPU-s')} "
            f"| {_spread(p, 'provision_controller_cpu_s', 'CPU-s')} "
            f"| {_spread(p, 'verify_wall_s')} | {_spread(p, 'verify_step_s')} "
            f"| {_spread(p, 'bisect_wall_s')} | {rl} | {report} |"
        )
    errors = [(p.nodes, ph, e) for p in points for ph, e in sorted(p.errors.items())]
    if errors:
        lines += ["", "Errors:", ""]
        lines += [
            f"- {n} nodes, {ph}: {e.splitlines()[0][:300] if e else ''}" for n, ph, e in errors
        ]
    if fits:
        lines += [
            "",
            "| figure | a | b (per node; per round for the line over rounds) | r² | points |",
            "|---|---|---|---|---|",
        ]
        for key, f in fits.items():
            label, unit = FIGURES.get(key, (key, ""))
            lines.append(
                f"| {label} | {f.a:.2f} {unit} | {f.b:.3f} {unit} | {f.r2:.3f} | {f.points} |"
            )
    if predictions:
        lines += [
            "",
            "| scenario | nodes | provision rerun | verify cluster step (Ansible + step + "
            "rendezvous + report) | localisation (rounds / launches) | waves per task "
            "| batches | report fetched |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, pr in predictions:
            t = pr.verify_terms
            parts = " + ".join(
                human_s(t.get(k)) for k in ("ansible", "step", "rendezvous", "report")
            )
            lines.append(
                f"| {label} | {pr.nodes} | {human_s(pr.provision_s)} "
                f"| {human_s(pr.verify_s)} ({parts}) "
                f"| {human_s(pr.bisect_s)} ({pr.bisect_rounds} / {pr.bisect_launches}) "
                f"| {pr.waves} | {pr.batches} | {pr.report_bytes / 1e6:.1f} MB |"
            )
    return "\n".join(lines) + "\n"


def plot_curve(points: Sequence[ScalePoint], fits: Mapping[str, Fit], path: Path) -> Path:
    """Three panels over the node count: wall seconds (samples, medians, fitted lines), CPU
    seconds, and bisection rounds/launches against the ceil(log2 n) bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_wall, ax_cpu, ax_bis) = plt.subplots(1, 3, figsize=(15, 4.5), dpi=100)
    ns = sorted({p.nodes for p in points})
    span = [min(ns, default=1), max(ns, default=1)]

    def draw(ax: Any, key: str) -> None:
        label = FIGURES.get(key, (key, ""))[0]
        xs = [p.nodes for p in points for _ in p.samples.get(key, [])]
        ys = [y for p in points for y in p.samples.get(key, [])]
        if not xs:
            return
        (line,) = ax.plot(*series(points, key), marker="o", label=label)
        ax.scatter(xs, ys, s=12, alpha=0.5, color=line.get_color())
        f = fits.get(key)
        if f:
            ax.plot(
                span,
                [f.at(x) for x in span],
                linestyle="--",
                color=line.get_color(),
                label=f"fit {f.a:.1f} + {f.b:.2f}·n (r² {f.r2:.2f})",
            )

    for key in WALL_FIGURES:
        draw(ax_wall, key)
    ax_wall.set_title("wall seconds")
    for key in CPU_FIGURES:
        draw(ax_cpu, key)
    ax_cpu.set_title("CPU seconds (testbed: nodes share the controller's CPUs)")
    bis = sorted((p for p in points if p.bisect_rounds is not None), key=lambda p: p.nodes)
    grid = list(range(max(3, span[0]), span[1] + 1))
    for i, (what, marker, color) in enumerate((("rounds", "o", "C0"), ("launches", "s", "C1"))):
        if bis:
            ax_bis.plot(
                [p.nodes for p in bis],
                [p.bisect_rounds if i == 0 else p.bisect_launches for p in bis],
                marker=marker,
                color=color,
                label=f"{what}, measured",
            )
        if grid:
            ax_bis.step(
                grid,
                [bisection_bound(n)[i] for n in grid],
                where="post",
                linestyle=":",
                color=color,
                label=f"{what}, bound: {'ceil(log2 n)' if i == 0 else '2 per round'}",
            )
    ax_bis.set_title("bad-node localisation")
    for ax in (ax_wall, ax_cpu, ax_bis):
        ax.set_xlabel("testbed nodes")
        ax.set_xticks(ns or [1])
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
