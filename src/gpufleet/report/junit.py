"""The cluster JUnit file: reports/<run-id>/junit.xml, for CI systems that read JUnit.

One ``<testsuites>`` holding a ``<testsuite>`` per node (its own suites: checks, smoke,
dcgm, probe, compute, burnin, ...) and one per cluster step (all-reduce, training,
bisection, slow nodes, profile floors, collectives, SDC, ib_write_bw, Slurm jobs), a
``<testcase>`` per record. The shape is the Apache Ant JUnit
schema that Jenkins and GitLab read (https://github.com/windyroad/JUnit-Schema/blob/master/JUnit.xsd):
``<testsuites>`` has no attributes; each ``<testsuite>`` has ``name``, ``package``, ``id``,
``timestamp`` (ISO 8601 without a zone: UTC here), ``hostname``, ``tests``, ``failures``,
``errors``, ``skipped`` and ``time``, then ``<properties>``, the test cases,
``<system-out>`` and ``<system-err>``.

Status mapping: fail -> ``<failure message=... type="fail">`` whose text carries the
message, the value, the threshold and the remedy; skip -> ``<skipped message=reason>``;
incomplete -> ``<skipped message="incomplete: reason">``; a status this module does not know
-> ``<error type=status>`` (it is not a pass). A warning passes, and is listed in its
suite's ``<system-out>`` with its remedy.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.report.model import Summary
from gpufleet.results import Record, ResultFile

#: the file name in the run folder (summary.json "junit")
FILE = "junit.xml"

#: cluster step -> the result kinds it holds: a kind itself, or "<prefix>-*"; any other
#: kind is one of a node's own suites
CLUSTER_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("all-reduce", ("allreduce",)),
    ("training", ("train", "train-*")),  # train-1node: the one-node baseline
    ("bisection", ("bisect-*",)),
    ("pair-sweep", ("pair-*",)),
    ("slow-nodes", ("slow-nodes",)),
    ("profile-floors", ("profile-floors",)),  # gpufleet.report.profile_floors
    ("collectives", ("collectives",)),  # gpufleet.verify.workers.collectives
    ("sdc", ("sdc",)),  # gpufleet.report.sdc
    ("ib-write-bw", ("ibbw-*", "ibbw")),  # gpufleet.node.ib_bw, one per pair
    ("slurm", ("slurm-*",)),
)
# characters XML 1.0 cannot carry (log tails hold ANSI escapes and the like)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@functools.cache
def cluster_step(kind: str) -> str | None:
    """The cluster step a result kind belongs to; None for a node's own suites."""
    for step, kinds in CLUSTER_STEPS:
        for k in kinds:
            if kind == k or (k.endswith("-*") and kind.startswith(k[:-1])):
                return step
    return None


def xml_text(text: object) -> str:
    """``text`` as a string XML 1.0 can hold (forbidden control characters become '?')."""
    return _NOT_XML.sub("?", str(text))


def iso_utc(stamp: str) -> str | None:
    """``2026-01-01T00:00:00Z`` (or with an offset) as UTC ``2026-01-01T00:00:00``, the
    schema's zone-less form; None when ``stamp`` is not an ISO 8601 time."""
    try:
        t = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    if t.tzinfo is not None:
        t = t.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return t.replace(microsecond=0).isoformat()


@dataclass
class Suite:
    name: str
    package: str
    hostname: str
    cases: list[tuple[str, str, Record]] = field(default_factory=list)  # (node, kind, rec)
    files: dict[tuple[str, str], ResultFile] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        c = {"tests": len(self.cases), "failures": 0, "errors": 0, "skipped": 0}
        for _, _, r in self.cases:
            key = {"fail": "failures", "skip": "skipped", "incomplete": "skipped"}.get(r.status)
            if key:
                c[key] += 1
            elif r.status not in ("pass", "warn"):
                c["errors"] += 1
        return c

    def timestamp(self, default: str) -> str:
        stamps = [t for f in self.files.values() if (t := iso_utc(f.started))]
        return min(stamps) if stamps else default

    def seconds(self) -> float:
        return sum(f.duration_s for f in self.files.values())


def failure_text(r: Record) -> str:
    parts = [r.message or f"{r.name}: {r.status}"]
    if r.value is not None:
        parts.append(f"value: {r.value}")
    if r.threshold is not None:
        parts.append(f"threshold: {r.threshold}")
    if r.gpu:
        parts.append(f"GPU: {r.gpu}")
    parts.append(f"remedy: {r.remedy or 'see the node report (summary.md)'}")
    return "\n".join(parts)


def suites(s: Summary) -> list[Suite]:
    """The node suites (sorted by node), then the cluster steps in CLUSTER_STEPS order."""
    by_node = {n: Suite(f"node.{n}", "gpufleet.node", n) for n in sorted(s.nodes)}
    steps: dict[str, Suite] = {}
    for node, nr in sorted(s.nodes.items()):
        files = {f.kind: f for f in nr.files}
        for kind, r in nr.all_records():
            step = cluster_step(kind)
            if step is None:
                suite = by_node[node]
            else:
                suite = steps.setdefault(
                    step, Suite(f"cluster.{step}", "gpufleet.cluster", "controller")
                )
            suite.cases.append((node, kind, r))
            if kind in files:
                suite.files[(node, kind)] = files[kind]
    order = {step: i for i, (step, _) in enumerate(CLUSTER_STEPS)}
    return [*by_node.values(), *sorted(steps.values(), key=lambda x: order[x.name[8:]])]


def _case(parent: ET.Element, suite: Suite, node: str, kind: str, r: Record) -> None:
    name = r.name if not r.gpu else f"{r.name} [GPU {r.gpu}]"
    where = f"{node}.{kind}" if suite.package == "gpufleet.node" else f"{kind}.{node}"
    tc = ET.SubElement(parent, "testcase", name=xml_text(name), classname=xml_text(where), time="0")
    if r.status in ("pass", "warn"):
        return
    reason = xml_text(r.message or r.remedy or r.status)
    if r.status == "fail":
        el = ET.SubElement(tc, "failure", message=reason, type="fail")
        el.text = xml_text(failure_text(r))
    elif r.status == "skip":
        ET.SubElement(tc, "skipped", message=reason)
    elif r.status == "incomplete":
        ET.SubElement(tc, "skipped", message=f"incomplete: {reason}")
    else:
        el = ET.SubElement(tc, "error", message=reason, type=xml_text(r.status))
        el.text = xml_text(failure_text(r))


def to_element(s: Summary, generated: str | None = None) -> ET.Element:
    """The ``<testsuites>`` element of a run (``generated``: the default timestamp)."""
    now = generated or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    root = ET.Element("testsuites")
    status = s.status  # one pass over every record, not one per suite
    for i, suite in enumerate(suites(s)):
        c = suite.counts()
        el = ET.SubElement(
            root,
            "testsuite",
            name=xml_text(suite.name),
            package=suite.package,
            id=str(i),
            timestamp=suite.timestamp(now),
            hostname=xml_text(suite.hostname),
            tests=str(c["tests"]),
            failures=str(c["failures"]),
            errors=str(c["errors"]),
            skipped=str(c["skipped"]),
            time=f"{suite.seconds():.3f}",
        )
        props = ET.SubElement(el, "properties")
        ET.SubElement(props, "property", name="run_id", value=xml_text(s.run_id))
        ET.SubElement(props, "property", name="run_status", value=status)
        for node, kind, r in suite.cases:
            _case(el, suite, node, kind, r)
        warns = [
            f"WARN {node} {kind}/{r.name}: {r.message}" + (f" -> {r.remedy}" if r.remedy else "")
            for node, kind, r in suite.cases
            if r.status == "warn"
        ]
        ET.SubElement(el, "system-out").text = xml_text("\n".join(warns))
        ET.SubElement(el, "system-err").text = ""
    return root


def render(s: Summary, generated: str | None = None) -> bytes:
    root = to_element(s, generated)
    ET.indent(root)
    # to a str first: ElementTree's utf-8 writer goes through a TextIOWrapper, one small
    # write per token (3 times slower at 1000 nodes, tests/bench/bench_report.py)
    text = ET.tostring(root, encoding="unicode")
    return f"<?xml version='1.0' encoding='utf-8'?>\n{text}\n".encode()


def write(s: Summary, path: Path) -> Path:
    """Write the run's junit.xml atomically (a CI reader never sees half a file)."""
    return write_bytes_atomic(path, render(s))


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` (mode 0644) so that a reader never sees half of it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
