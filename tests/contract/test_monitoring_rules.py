"""The shipped Prometheus rules (monitoring/prometheus/gpufleet.rules.yml) against the metrics
gpufleet writes: every gpufleet_ metric a rule reads is one gpufleet.node.textfile renders,
with the labels the rule selects on, and every alert has a unit test in the rules' promtool
test file (make lint runs promtool check rules and promtool test rules)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpufleet.node import textfile
from gpufleet.node.fast_checks import GpuFigures, PassFacts
from gpufleet.node.pass_state import PassState
from gpufleet.results import Record

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "monitoring" / "prometheus" / "gpufleet.rules.yml"
TESTS = RULES.with_name("gpufleet.rules.test.yml")
METRIC = re.compile(r"\b(gpufleet_[a-z0-9_]+)(\{[^}]*\})?")


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def rendered() -> dict[str, set[str]]:
    """Every metric a full pass renders (Slurm asked, facts read) -> its label names."""
    ex = textfile.Exposition(
        [Record("xid_errors", "fail"), Record("row_remap", "pass", gpu="0 (0:1:0.0)")],
        1.0,
        PassState(1, "failed", 1.0, 1.0, 2.0, drained=True),
        PassFacts(
            gpus=8, gpus_expected=8, xid_events={79: 1}, gpu_figures={"0": GpuFigures(0, 0, 0, 0)}
        ),
        duration_s=1.0,
    )
    out: dict[str, set[str]] = {}
    for line in textfile.render(ex).splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-z_]+)(?:\{(.*)\})? ", line)
        assert m is not None, line
        labels = set(re.findall(r'([a-z_]+)="', m.group(2) or ""))
        out.setdefault(m.group(1), set()).update(labels)
    return out


def test_every_metric_a_rule_reads_is_written_with_the_labels_it_selects_on() -> None:
    have = rendered()
    for rule in rules():
        for name, selector in METRIC.findall(rule["expr"]):
            assert name in have, f"{rule['alert']} reads {name}, which gpufleet does not write"
            wanted = set(re.findall(r"([a-z_]+)\s*=", selector))
            assert wanted <= have[name], (
                f"{rule['alert']}: {name} has no label {wanted - have[name]}"
            )


def test_every_alert_is_unit_tested_and_says_what_to_do() -> None:
    tested = {
        case["alertname"]
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = [rule["alert"] for rule in rules()]
    assert sorted(alerts) == sorted(tested), "an alert without a firing case in the test file"
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert "What to do:" in rule["annotations"]["description"], rule["alert"]
