"""Log analysis: torchrun's root-cause block, JUnit XML, log tails and the remedy a
launcher log points at."""

from __future__ import annotations

import re
import signal
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from gpufleet.report.logscan import first_error, launch_first_error
from gpufleet.results import Record


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def launch_root_cause(log: Path, text: str | None = None) -> dict[str, Any]:
    """:func:`root_cause` of a launch log (``text``: its content, when already read), with
    the failing rank's error line from :func:`gpufleet.report.logscan.launch_first_error`, which
    prefers the rank's own stderr copy; ``first_error.file`` names where the line is from."""
    cause = root_cause(read_text(log) if text is None else text)
    if not cause:
        return cause
    cause.pop("first_error", None)
    found = launch_first_error(log, int(cause["local_rank"]))
    if found is not None:
        cause["first_error"] = {**found[1].as_dict(), "file": found[0]}
    return cause


def log_tail(path: Path, lines: int = 12) -> str:
    return "\n".join(read_text(path).strip().splitlines()[-lines:])


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
    err = first_error(log_text)  # the line naming the cause (gpufleet.report.logscan)
    m = blocks[-1]  # torchrun prints one block per failed launch
    code = int(m["code"])
    out: dict[str, Any] = {
        "host": m["host"],
        "time": m["time"],
        "rank": int(m["rank"]),
        "local_rank": int(m["local"]),
        "exitcode": code,
    }
    if err is not None:
        out["first_error"] = err.as_dict()
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
                message = (child.get("message") or "")[:500]
                # the checks suite writes an incomplete check as a skip "incomplete: ..."
                status = "incomplete" if message.startswith("incomplete:") else "skip"
        recs.append(Record(name=name, status=status, node=node, message=message))
    return recs


def remedy_for(log_tail: str) -> str:
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
