"""The data of one verify run: per-node result files and synthesized records (Summary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.results import BandwidthRow, Record, ResultFile


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
    # "bisection, N launches", "killed by a signal", "dropped out of the run"
    suspect_reason: str = ""
    bisect_results: list[dict[str, Any]] = field(default_factory=list)  # every group run
    bisect_reason: str = ""

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
