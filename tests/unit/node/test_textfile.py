"""gpufleet.node.textfile: node verdicts in node_exporter's textfile format, read back with a
parser of the Prometheus text exposition format (the subset the file uses)."""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.node import textfile
from gpufleet.results import STATUSES, Record

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """(TYPE of each metric, samples). Fails on any line outside the format."""
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            m = SAMPLE.match(line)
            assert m is not None, f"not an exposition line: {line!r}"
            labels = {
                lm["key"]: lm["value"].replace('\\"', '"').replace("\\\\", "\\")
                for lm in LABEL.finditer(m["labels"] or "")
            }
            samples.append((m["name"], labels, float(m["value"])))
    return types, samples


RECORDS = [
    Record("gpu_count", "pass"),
    Record("row_remap", "pass", gpu="0 (00000000:18:00.0)"),
    Record("row_remap", "fail", gpu="1 (00000000:2A:00.0)", remedy="RMA"),
    Record("xid_errors", "incomplete", remedy="--kernel-log"),
    Record('odd"name\\', "warn", remedy="x"),
]


def test_one_gauge_per_check_and_state_with_the_worst_gpu(tmp_path: Path) -> None:
    path = textfile.write(tmp_path / "gpufleet.prom", RECORDS, 1_764_900_000.5)
    types, samples = parse(path.read_text())
    assert types == {textfile.STATE: "gauge", textfile.LAST_RUN: "gauge"}
    states = {
        (labels["check"], labels["state"]): value
        for name, labels, value in samples
        if name == textfile.STATE
    }
    checks = {"gpu_count", "row_remap", "xid_errors", 'odd"name\\'}
    assert set(states) == {(c, s) for c in checks for s in STATUSES}
    on = {key for key, value in states.items() if value == 1}
    assert on == {
        ("gpu_count", "pass"),
        ("row_remap", "fail"),  # GPU 1 fails: the check is failed
        ("xid_errors", "incomplete"),
        ('odd"name\\', "warn"),
    }
    assert [v for n, _, v in samples if n == textfile.LAST_RUN] == [1_764_900_000.5]


def test_written_atomically_and_readable_by_the_collector(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.prom"
    path.write_text("old\n")
    textfile.write(path, RECORDS[:1], 0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpufleet.prom"]  # no temp left
    assert path.stat().st_mode & 0o777 == 0o644
    assert "old" not in path.read_text()
