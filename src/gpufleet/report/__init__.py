"""Aggregate one verify run: reports/<run-id>/<node>/*.json (+ JUnit XML) into
summary.json, summary.md (Jinja2, templates/summary.md.j2), index.html (the page,
templates/index.html.j2) and junit.xml, print a table, and return the exit code (0 ok, 1 any
failure).

Layout read::

    reports/<run-id>/run.json              written by playbooks/verify.yml (optional):
                                           {"run_id", "nodes": [...], "expect": {kind: [node]},
                                            "bisect": [[group, ...] per round], "mode", ...}
    reports/<run-id>/<node>/<kind>.json    ResultFile envelopes (gpufleet.results)
    reports/<run-id>/<node>/<kind>.xml     JUnit; used when its JSON is missing
    reports/<run-id>/<node>/<kind>.log     launcher/pytest output; its tail explains a
                                           missing result

A node that was expected to produce a kind and did not gets a failing record naming the
file and the last lines of its log. Bisection reruns (kind "bisect-<round>-<group>") name the
node at fault in O(log n) launches (``localise``).

The package is split by job: ``logs`` (log analysis), ``localise`` (the bisection schedule
and its verdict), ``aggregate`` (collect + summary.json), ``render`` (summary.md, table,
report files), ``page`` (index.html) with ``svg`` (its pictures), ``reproduce`` (the command
that reproduces a record), ``changes`` (what changed since the previous run),
``slownodes`` (each node against the fleet median), ``profile_floors`` (each node against
its system profile's floors), ``sdc`` (the devices' digests compared), ``acceptance`` (the
compute, collectives, burn-in, IB and tier sections); ``model`` holds the Summary
dataclasses. The command line is ``gpufleet report`` (gpufleet.commands.cmd_report).
"""

from __future__ import annotations

from gpufleet.report.aggregate import collect, to_json
from gpufleet.report.localise import next_groups
from gpufleet.report.logs import junit_records, launch_root_cause, root_cause
from gpufleet.report.model import NodeResult, Summary
from gpufleet.report.render import (
    SUMMARY_FILES,
    render_markdown,
    table,
    update_latest,
    write_report,
)

__all__ = [
    "SUMMARY_FILES",
    "NodeResult",
    "Summary",
    "collect",
    "junit_records",
    "launch_root_cause",
    "next_groups",
    "render_markdown",
    "root_cause",
    "table",
    "to_json",
    "update_latest",
    "write_report",
]
