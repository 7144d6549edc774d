"""The data of one verify run: per-node result files and synthesized records (Summary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.results import STATUSES, BandwidthRow, Record, ResultFile

#: Statuses that let a run pass. "fail" fails the run; "incomplete" (a check that could not
#: finish) or a status this version does not know makes the run incomplete, counted apart
#: from the failures and never as one.
PASSING = ("pass", "warn", "skip")


def _file_records(nr: NodeResult) -> list[Record]:
    return [r for f in nr.files for r in f.records]


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
    # slow-node findings (gpufleet.report.slownodes): one dict per named node
    slow_nodes: list[dict[str, Any]] = field(default_factory=list)
    slow_reason: str = ""  # why no comparison ran, or how many nodes were compared
    pairs: dict[str, Any] | None = None  # the pair-sweep matrix, when pairs.json exists
    # each node's figures against its system profile's floors (gpufleet.report.profile_floors)
    floors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    floors_reason: str = ""  # what was judged, in one sentence
    # the devices' digests compared (gpufleet.report.sdc): groups and mismatches
    sdc: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[tuple[str, str, Record]]:
        return [
            (n, kind, r) for n, nr in sorted(self.nodes.items()) for kind, r in nr.all_records()
        ]

    def counts(self) -> dict[str, int]:
        """Records per status: every known status (0 when none), then any other one seen (a
        node's result file may come from another gpufleet version)."""
        c: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for _, _, r in self.rows():
            c[str(r.status)] = c.get(str(r.status), 0) + 1
        return c

    def failures(self) -> list[tuple[str, str, Record]]:
        return [x for x in self.rows() if x[2].status == "fail"]

    def unfinished(self) -> list[tuple[str, str, Record]]:
        """Records that neither passed nor failed (incomplete, or a status not known here)."""
        return [x for x in self.rows() if x[2].status != "fail" and x[2].status not in PASSING]

    @property
    def status(self) -> str:
        """fail (any failure), else incomplete (any record that did not finish), else pass."""
        seen = {r.status for nr in self.nodes.values() for r in (*nr.records, *_file_records(nr))}
        if "fail" in seen:
            return "fail"
        return "incomplete" if seen - set(PASSING) else "pass"

    @property
    def exit_code(self) -> int:
        """0 only when the run passed: a failed or an incomplete run is 1."""
        return 0 if self.status == "pass" else 1

    def bandwidth(self) -> list[tuple[str, str, BandwidthRow]]:
        """(label, node, row) for every sweep; label = kind (allreduce = the cluster run)."""
        out = []
        for n, nr in sorted(self.nodes.items()):
            for f in nr.files:
                for b in f.bandwidth:
                    out.append((f.kind, n, b))
        return out
