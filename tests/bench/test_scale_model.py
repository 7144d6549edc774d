"""scale_model: the fits, the Ansible mechanics and the extrapolation model behind
make bench-scale (docs/scale.md), and its two writers."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from bench import scale_model as scale
from bench.scale_model import Fit, PlaybookCost, ScaleModel, ScalePoint

# --------------------------------------------------------------------------- fit_line


@pytest.mark.parametrize(
    ("xs", "a", "b"),
    [([3, 6, 12], 5.0, 2.0), ([1, 2], -1.5, 0.25), ([3, 6, 12, 24, 48], 40.0, 0.0)],
)
def test_a_known_line_is_recovered_exactly(xs: list[float], a: float, b: float) -> None:
    f = scale.fit_line(xs, [a + b * x for x in xs])
    assert f.a == pytest.approx(a) and f.b == pytest.approx(b)
    assert f.r2 == pytest.approx(1.0) and f.points == len(xs)
    assert f.at(1000) == pytest.approx(a + 1000 * b)


def test_noisy_points_give_numpys_least_squares_line() -> None:
    rng = random.Random(14)
    xs = [float(x) for x in range(1, 60)]
    ys = [10 + 3 * x + rng.gauss(0, 2) for x in xs]
    f = scale.fit_line(xs, ys)
    b, a = np.polyfit(xs, ys, 1)
    assert f.a == pytest.approx(a) and f.b == pytest.approx(b)
    assert f.a == pytest.approx(10, abs=2) and f.b == pytest.approx(3, abs=0.1)
    assert 0.98 < f.r2 < 1.0
    assert f.r2 == pytest.approx(np.corrcoef(xs, ys)[0, 1] ** 2)


def test_points_without_a_trend_have_a_low_r2() -> None:
    xs = [3, 6, 12, 3, 6, 12]
    ys = [10, 14, 10, 14, 10, 14]  # the noise is all there is
    f = scale.fit_line(xs, ys)
    assert f.r2 < 0.1


@pytest.mark.parametrize(
    ("xs", "ys", "why"),
    [
        ([], [], "at least 2 points"),
        ([3], [10.0], "at least 2 points"),
        ([6, 6, 6], [1.0, 2.0, 3.0], "every x is the same"),
        ([3, 6], [1.0], "2 x values but 1 y"),
        ([3, 6], [1.0, math.nan], "non-finite"),
    ],
)
def test_fit_line_refuses_what_cannot_make_a_line(
    xs: list[float], ys: list[float], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        scale.fit_line(xs, ys)


def test_figures_are_fitted_over_the_medians_of_each_size() -> None:
    points = [
        ScalePoint(3, {"provision_wall_s": [20.0, 22.0, 100.0]}),  # median 22
        ScalePoint(6, {"provision_wall_s": [28.0, 28.0]}),
        ScalePoint(12, {"provision_wall_s": [40.0], "verify_wall_s": [90.0]}),
    ]
    fits = scale.fit_figures(points)
    assert set(fits) == {"provision_wall_s"}  # verify_wall_s: one size only
    assert fits["provision_wall_s"].a == pytest.approx(16) and fits["provision_wall_s"].b == 2


# --------------------------------------------------------------------------- Ansible mechanics


@pytest.mark.parametrize(
    ("hosts", "forks", "sizes"),
    [
        (0, 32, []),
        (12, 32, [12]),
        (32, 32, [32]),
        (33, 32, [32, 1]),
        (100, 32, [32, 32, 32, 4]),
    ],
)
def test_a_task_runs_in_waves_of_forks(hosts: int, forks: int, sizes: list[int]) -> None:
    assert scale.wave_sizes(hosts, forks) == sizes
    assert scale.waves(hosts, forks) == len(sizes) == math.ceil(hosts / forks)


def test_a_thousand_hosts_take_thirty_two_waves_at_forks_32() -> None:
    assert scale.waves(1000, 32) == 32
    assert scale.wave_sizes(1000, 32)[-1] == 8


@pytest.mark.parametrize(
    ("hosts", "serial", "batches"),
    [
        (1000, "100%", [1000]),
        (1000, "10%", [100] * 10),
        (5, 2, [2, 2, 1]),
        (5, "2", [2, 2, 1]),
        (3, "25%", [1, 1, 1]),  # int(0.75) = 0 -> at least 1, as Ansible does
        (10, "30%", [3, 3, 3, 1]),
        (4, 10, [4]),
        (0, "100%", []),
    ],
)
def test_serial_batches_follow_ansible(hosts: int, serial: int | str, batches: list[int]) -> None:
    assert scale.serial_batches(hosts, serial) == batches


@pytest.mark.parametrize("serial", ["0%", "150%", 0, "-1"])
def test_a_bad_serial_is_refused(serial: int | str) -> None:
    with pytest.raises(ValueError, match="serial"):
        scale.serial_batches(10, serial)


@pytest.mark.parametrize(
    ("n", "bound"),
    [(1, (0, 0)), (2, (0, 0)), (3, (2, 4)), (12, (4, 8)), (100, (7, 14)), (1000, (10, 20))],
)
def test_bisection_bound_is_log2_rounds_of_two_launches(n: int, bound: tuple[int, int]) -> None:
    assert scale.bisection_bound(n) == bound


@pytest.mark.parametrize(
    ("n", "expected"),
    # the bench's bad node is the last one: worked out by hand from localise's halves
    [(3, (1, 1)), (6, (2, 4)), (12, (3, 6))],
)
def test_the_last_node_is_found_in_the_rounds_localise_schedules(
    n: int, expected: tuple[int, int]
) -> None:
    nodes = [f"node{i}" for i in range(1, n + 1)]
    assert scale.simulate_bisection(nodes, nodes[-1]) == expected


def test_no_position_of_the_bad_node_needs_more_than_the_bound() -> None:
    for n in (3, 5, 12, 33, 64):
        nodes = [f"n{i}" for i in range(n)]
        rounds, launches = scale.bisection_bound(n)
        for bad in nodes:
            r, lc = scale.simulate_bisection(nodes, bad)
            assert 1 <= r <= rounds and lc <= launches, (n, bad, r, lc)


def test_simulate_bisection_refuses_a_bad_node_outside_the_cluster() -> None:
    with pytest.raises(ValueError, match="not one of the nodes"):
        scale.simulate_bisection(["a", "b", "c"], "d")


# --------------------------------------------------------------------------- the model

LATENCY_BOUND = PlaybookCost(
    fixed_s=5.0, tasks_per_node=100, task_latency_s=0.1, controller_task_cpu_s=0.0
)


def model(**kw: object) -> ScaleModel:
    base = ScaleModel(
        provision=PlaybookCost(
            fixed_s=5.0, tasks_per_node=100, task_latency_s=0.1, controller_task_cpu_s=0.05
        ),
        verify=PlaybookCost(
            fixed_s=8.0, tasks_per_node=60, task_latency_s=0.1, controller_task_cpu_s=0.04
        ),
        step_s=20.0,
        report_fixed_s=1.0,
        report_s_per_byte=1e-6,
        report_node_bytes=5000.0,
        report_rank_bytes=100.0,
        bisect_tasks_per_round=12,
        timeout_s=30.0,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "seconds"), [(1, 15.0), (32, 15.0), (33, 25.0), (1000, 325.0)])
def test_latency_bound_playbook_costs_one_task_latency_per_wave(n: int, seconds: float) -> None:
    """No controller CPU to wait for: every wave of up to 32 hosts costs one task latency,
    so 1..32 nodes cost the same and 1000 nodes cost 32 waves of each task."""
    t = scale.playbook_time(n, LATENCY_BOUND, forks=32, controller_cpus=2)
    assert t == pytest.approx(seconds)


def test_controller_bound_playbook_costs_the_controller_cpu_of_every_host() -> None:
    cost = dataclasses.replace(LATENCY_BOUND, controller_task_cpu_s=0.05)
    # a wave of 32: 32 * 0.05 CPU-s on 2 CPUs = 0.8 s > 0.1 s latency; 31 such waves and one
    # of 8 hosts (0.2 s), for each of the 100 tasks
    assert scale.playbook_time(1000, cost, forks=32, controller_cpus=2) == pytest.approx(
        5 + 100 * (31 * 0.8 + 0.2)
    )
    # enough controller CPUs: back to the latency bound
    assert scale.playbook_time(1000, cost, forks=32, controller_cpus=16) == pytest.approx(325)


def test_serial_batches_run_one_after_the_other() -> None:
    one = scale.playbook_time(1000, LATENCY_BOUND, forks=32, controller_cpus=2)
    batched = scale.playbook_time(1000, LATENCY_BOUND, forks=32, controller_cpus=2, serial=100)
    # 10 batches of 100 hosts, 4 waves each
    assert batched == pytest.approx(5 + 10 * 100 * 4 * 0.1)
    assert batched > one


@pytest.mark.parametrize("serial", ["100%", 50, 1])
def test_every_prediction_grows_with_the_node_count(serial: int | str) -> None:
    m = model(serial=serial)
    preds = [scale.predict(m, n) for n in range(1, 1201, 7)]
    for field in ("provision_s", "verify_s", "bisect_s"):
        values = [getattr(p, field) for p in preds]
        assert all(b >= a for a, b in itertools.pairwise(values)), field
    assert scale.predict(m, 1000).provision_s > scale.predict(m, 100).provision_s


def test_more_forks_or_controller_cpus_never_slow_a_run() -> None:
    for n in (100, 1000):
        base = scale.predict(model(), n)
        for kw in ({"forks": 128}, {"controller_cpus": 16}):
            faster = scale.predict(model(**kw), n)
            assert faster.provision_s <= base.provision_s and faster.verify_s <= base.verify_s


def test_localisation_adds_ceil_log2_rounds_to_a_failed_run() -> None:
    m = model(rdzv_per_rank_s=0.0, bisect_tasks_per_round=0.0)
    for n, rounds in ((3, 2), (12, 4), (100, 7), (1000, 10)):
        p = scale.predict(m, n)
        assert (p.bisect_rounds, p.bisect_launches) == (rounds, 2 * rounds)
        # the full run fails at the timeout, then each round is a timeout and a step
        assert p.bisect_s - p.verify_s - m.timeout_s == pytest.approx(
            rounds * (m.timeout_s + m.step_s)
        )


def test_rendezvous_grows_with_the_ranks_and_the_step_does_not() -> None:
    m = model()
    small, big = scale.predict(m, 100).verify_terms, scale.predict(m, 1000).verify_terms
    assert big["rendezvous"] == pytest.approx(1000 * 8 * scale.DEFAULT_RDZV_PER_RANK_S)
    assert big["rendezvous"] == pytest.approx(10 * small["rendezvous"])
    assert big["step"] == small["step"] == m.step_s


def test_the_report_grows_as_n_squared_when_every_node_lists_every_rank() -> None:
    flat = model(report_rank_bytes=0.0)
    assert scale.predict(flat, 1000).report_bytes == pytest.approx(10 * 100 * 5000)
    listed = model(report_node_bytes=0.0, ranks_per_node=8)
    small, big = scale.predict(listed, 100), scale.predict(listed, 1000)
    assert big.report_bytes == pytest.approx(100 * small.report_bytes)
    assert big.report_bytes == pytest.approx(1000 * 100 * 1000 * 8)  # 0.8 GB
    assert big.verify_terms["report"] == pytest.approx(1 + 1e-6 * big.report_bytes)


def synthetic(
    nodes: list[int], rounds: dict[int, int], bytes_slope: float = 0.0
) -> list[ScalePoint]:
    """Points made from known per-node costs, two repeats each."""
    pts = []
    for n in nodes:
        s: dict[str, list[float]] = {
            "provision_controller_cpu_s": [6 + 4 * n, 6 + 4 * n],
            "provision_machine_cpu_s": [8 + 10 * n, 8 + 10 * n],
            "provision_tasks": [80, 80],
            "verify_controller_cpu_s": [10 + 3 * n, 10 + 3 * n],
            "verify_tasks": [60, 60],
            "verify_step_s": [15.0 + n, 15.0 + n],
            "report_bytes_per_node": [4000 + bytes_slope * n] * 2,
            "report_aggregate_s": [1 + 1e-5 * n * (4000 + bytes_slope * n)] * 2,
            "bisect_tasks": [60 + 5 + 12 * rounds[n]],
        }
        pts.append(ScalePoint(n, s, rounds[n], 2 * rounds[n]))
    return pts


def test_the_model_takes_its_costs_from_the_fitted_lines() -> None:
    m = scale.model_from_points(synthetic([3, 6, 12], {3: 1, 6: 2, 12: 3}), timeout_s=30)
    assert m.provision.fixed_s == pytest.approx(6)
    assert m.provision.tasks_per_node == 80
    assert m.provision.task_latency_s == pytest.approx(10 / 80)  # machine CPU per node / tasks
    assert m.provision.controller_task_cpu_s == pytest.approx(4 / 80)
    # verify's controller line (10 + 3 n) without the report aggregation's (1 + 0.04 n)
    assert m.verify.fixed_s == pytest.approx(9)
    assert m.verify.controller_task_cpu_s == pytest.approx(2.96 / 60)
    assert m.report_fixed_s == pytest.approx(1) and m.report_s_per_byte == pytest.approx(1e-5)
    assert m.report_node_bytes == pytest.approx(4000) and m.report_rank_bytes == 0
    assert m.step_s == 18  # the smallest size's step
    assert m.bisect_tasks_per_round == pytest.approx(12)
    assert m.timeout_s == 30


def test_report_bytes_that_grow_with_the_nodes_are_charged_per_rank() -> None:
    pts = synthetic([3, 6, 12], {3: 1, 6: 2, 12: 3}, bytes_slope=500)
    m = scale.model_from_points(pts, timeout_s=30, testbed_ranks_per_node=2)
    # 500 bytes per node per added node at 2 ranks per node: 250 per rank
    assert m.report_node_bytes == pytest.approx(4000) and m.report_rank_bytes == 250
    # the aggregation time is fitted over the run's total bytes, not the node count
    assert m.report_fixed_s == pytest.approx(1) and m.report_s_per_byte == pytest.approx(1e-5)


def test_the_model_needs_two_sizes_and_clamps_negative_slopes() -> None:
    with pytest.raises(ValueError, match="too few sizes"):
        scale.model_from_points(synthetic([6], {6: 2}), timeout_s=30)
    pts = synthetic([3, 6], {3: 1, 6: 1})
    pts[1].samples["provision_controller_cpu_s"] = [2.0, 2.0]  # noise: fewer CPU-s at 6 nodes
    m = scale.model_from_points(pts, timeout_s=30)
    assert m.provision.controller_task_cpu_s == 0.0
    assert m.bisect_tasks_per_round == pytest.approx(17)  # one round count: the ratio


# --------------------------------------------------------------------------- writers


def test_a_point_survives_the_json_round_trip() -> None:
    p = ScalePoint(12, {"verify_wall_s": [80.5, 90.0]}, 3, 6, [3, 6], {"bisect": "boom"}, {"x": 1})
    back = ScalePoint.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back == p
    assert p.to_dict()["medians"] == {"verify_wall_s": pytest.approx(85.25)}
    assert p.to_dict()["bisect_bound"] == [4, 8]


def test_the_table_shows_every_size_its_errors_the_fits_and_the_extrapolation() -> None:
    pts = synthetic([3, 6, 12], {3: 1, 6: 2, 12: 3})
    for p in pts:
        p.samples["provision_wall_s"] = [20.0 + p.nodes, 22.0 + p.nodes]
        p.samples["report_files_per_node"] = [4.0]
        p.samples["report_bytes_per_node"] = [2048.0]
        p.bisect_expected = [p.bisect_rounds or 0, p.bisect_launches or 0]
    pts.append(ScalePoint(24, errors={"up": "testbed up failed: no memory\nmore"}))
    fits = scale.fit_figures(pts)
    m = scale.model_from_points(pts, timeout_s=30)
    md = scale.render_markdown(pts, fits, [("as configured", scale.predict(m, 1000))])
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[1:6]] == ["3", "6", "12", "24", "figure"]
    assert "| 12 | 33.0 s (32.0–34.0) |" in md
    assert "3 / 6 (3 / 6; 4 / 8)" in md and "4.0 files, 2.0 KiB" in md
    assert "- 24 nodes, up: testbed up failed: no memory" in md and "more" not in md
    assert "| converged provision rerun, wall | 21.00 s | 1.000 s | 1.000 | 3 |" in md
    assert "| as configured | 1000 | " in md and "(10 / 20)" in md
    assert "| 32 | 1 | 2.0 MB |" in md


def test_the_curve_is_a_png(tmp_path: Path) -> None:
    pts = synthetic([3, 6, 12], {3: 1, 6: 2, 12: 3})
    for p in pts:
        p.samples["verify_wall_s"] = [40.0 + 5 * p.nodes]
    out = scale.plot_curve(pts, scale.fit_figures(pts), tmp_path / "sub" / "scale.png")
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    empty = scale.plot_curve([], {}, tmp_path / "empty.png")
    assert empty.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_fit_to_dict_is_plain_json() -> None:
    assert json.loads(json.dumps(Fit(1.0, 2.0, 0.5, 3).to_dict())) == {
        "a": 1.0,
        "b": 2.0,
        "r2": 0.5,
        "points": 3,
    }
