"""gpufleet.node.textfile: a health pass as Prometheus metrics, read back with a parser of the
text exposition format (the subset the file uses), and `gpufleet health --prom` on NVML
recordings checked by Prometheus' own promtool."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checks_helpers import MANIFEST, RECORDINGS
from gpufleet.node import textfile
from gpufleet.node.fast_checks import GpuFigures, PassFacts
from gpufleet.node.pass_state import PassState
from gpufleet.results import Record

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')
Sample = tuple[str, dict[str, str], float]


def parse(text: str) -> tuple[dict[str, str], list[Sample]]:
    """(TYPE of each metric, samples). Fails on any line outside the format, on a sample
    before its TYPE and on a metric typed twice."""
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in types, f"{name} typed twice"
            types[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            m = SAMPLE.match(line)
            assert m is not None, f"not an exposition line: {line!r}"
            assert m["name"] in types, f"{m['name']} has no TYPE before its samples"
            labels = {
                lm["key"]: lm["value"].replace('\\"', '"').replace("\\\\", "\\")
                for lm in LABEL.finditer(m["labels"] or "")
            }
            samples.append((m["name"], labels, float(m["value"])))
    return types, samples


def values(samples: list[Sample], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(lab.items())): v for n, lab, v in samples if n == name}


RECORDS = [
    Record("gpu_count", "pass"),
    Record("row_remap", "pass", gpu="0 (00000000:18:00.0)"),
    Record("row_remap", "fail", gpu="1 (00000000:2A:00.0)", remedy="RMA"),
    Record("xid_errors", "incomplete", remedy="--kernel-log"),
    Record("page_retirement", "skip", gpu="0 (00000000:18:00.0)"),
    Record('odd"name\\', "warn", remedy="x"),
]
FACTS = PassFacts(
    driver="580.95.05", cuda="13.0", torch="2.13.0+cu130", torch_cuda="13.0",
    profile="hgx-h100-8gpu", gpus=7, gpus_expected=8, xid_window_s=7200.0,
    xid_events={79: 2, 13: 1},
    gpu_figures={"1": GpuFigures(3, 1, None, 2), "0": GpuFigures(0, 0, 4, 0)},
)  # fmt: skip


def test_a_status_per_check_and_gpu_with_the_documented_values() -> None:
    ex = textfile.Exposition(RECORDS, 1_764_900_000.5, PassState(failed_passes=1))
    types, samples = parse(textfile.render(ex))
    assert set(types.values()) == {"gauge"}
    status = values(samples, textfile.CHECK_STATUS)
    assert status == {
        (("check", "gpu_count"),): 0,
        (("check", "row_remap"), ("gpu", "0")): 0,
        (("check", "row_remap"), ("gpu", "1")): 4,
        (("check", "xid_errors"),): 3,
        (("check", "page_retirement"), ("gpu", "0")): 1,
        (("check", 'odd"name\\'),): 2,
    }
    assert values(samples, textfile.STATUS) == {(): 4}  # the worst: GPU 1's row_remap
    assert values(samples, textfile.LAST_RUN) == {(): 1_764_900_000.5}
    assert values(samples, textfile.FAILED_PASSES) == {(): 1}


def test_what_is_not_known_is_left_out_rather_than_guessed() -> None:
    """Never judged: no last success, no validity; Slurm not asked: no drained gauge; the
    pass read nothing (timed out): no versions, no figures."""
    ex = textfile.Exposition([Record("health_timeout", "incomplete")], 5.0, PassState())
    types, _ = parse(textfile.render(ex))
    assert set(types) == {
        textfile.CHECK_STATUS, textfile.STATUS, textfile.LAST_RUN, textfile.FAILED_PASSES,
    }  # fmt: skip


def test_freshness_slurm_versions_and_figures() -> None:
    state = PassState(2, "failed", 100.0, 100.0, 1000.0, drained=True)
    ex = textfile.Exposition(RECORDS, 100.0, state, FACTS, duration_s=1.25)
    _, samples = parse(textfile.render(ex))
    assert values(samples, textfile.LAST_SUCCESS) == {(): 100.0}
    assert values(samples, textfile.VALID_UNTIL) == {(): 1000.0}
    assert values(samples, textfile.SLURM_DRAINED) == {(): 1}
    assert values(samples, "gpufleet_health_duration_seconds") == {(): 1.25}
    info = values(samples, textfile.INFO)
    assert info == {
        (("cuda", "13.0"), ("driver", "580.95.05"), ("gpufleet", FACTS.gpufleet),
         ("profile", "hgx-h100-8gpu"), ("torch", "2.13.0+cu130"), ("torch_cuda", "13.0")): 1,
    }  # fmt: skip
    assert values(samples, textfile.GPUS) == {(): 7}
    assert values(samples, textfile.GPUS_EXPECTED) == {(): 8}
    assert values(samples, textfile.XID_EVENTS) == {
        (("critical", "false"), ("xid", "13")): 1,
        (("critical", "true"), ("xid", "79")): 2,
    }
    assert values(samples, "gpufleet_health_gpu_ecc_volatile_uncorrected_errors") == {
        (("gpu", "0"),): 0, (("gpu", "1"),): 3,
    }  # fmt: skip
    assert values(samples, "gpufleet_health_gpu_retired_pages") == {(("gpu", "0"),): 4}
    assert values(samples, "gpufleet_health_gpu_nvlink_inactive_links")[(("gpu", "1"),)] == 2
    drained_off = textfile.Exposition(RECORDS, 1.0, PassState(drained=False))
    assert values(parse(textfile.render(drained_off))[1], textfile.SLURM_DRAINED) == {(): 0}


def test_no_unbounded_label() -> None:
    """Labels are check names, GPU indexes, Xid numbers and versions: never a message, a
    value, a PCI address or a time."""
    ex = textfile.Exposition(RECORDS, 1.0, PassState(), FACTS, 1.0)
    _, samples = parse(textfile.render(ex))
    keys = {k for _, labels, _ in samples for k in labels}
    assert keys == {"check", "gpu", "xid", "critical", *(f for f in
                    ("driver", "cuda", "torch", "torch_cuda", "profile", "gpufleet"))}  # fmt: skip
    gpus = {labels["gpu"] for _, labels, _ in samples if "gpu" in labels}
    assert gpus == {"0", "1"}


def test_written_atomically_and_readable_by_the_collector(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.prom"
    path.write_text("old\n")
    textfile.write(path, "new 1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpufleet.prom"]  # no temp left
    assert path.stat().st_mode & 0o777 == 0o644
    assert path.read_text() == "new 1\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "gpufleet.prom"
    path.write_text("old 1\n")

    def broken(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="No space"):
        textfile.write(path, "new 1\n")
    assert path.read_text() == "old 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpufleet.prom"]


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: run `make monitor-deps`")
@pytest.mark.parametrize(
    "recording", ["healthy-h100x8", "real-h200x1", "xid-recent", "gpu-lost", "no-driver"]
)
def test_gpufleet_health_prom_passes_promtool_check_metrics(recording: str) -> None:
    """The real command's output on a recording: Prometheus' own parser and linter accept
    it (promtool check metrics: format, names, HELP, unit suffixes)."""
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "health", "--prom", "--manifest", str(MANIFEST),
         "--nvml-recording", str(RECORDINGS / f"{recording}.json")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr
    assert "healthy" in r.stderr or "failed" in r.stderr  # the verdict went to stderr
    types, _ = parse(r.stdout)
    assert textfile.CHECK_STATUS in types and textfile.LAST_SUCCESS in types
    assert all(name.startswith("gpufleet_health_") for name in types)
    assert PROMTOOL is not None
    lint = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=r.stdout, capture_output=True, text=True,
        check=False, timeout=60,
    )  # fmt: skip
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
