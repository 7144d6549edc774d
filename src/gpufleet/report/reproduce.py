"""The command that reproduces one record of a run, for the page's node cards and summary.json.

Two kinds of command, from what the record and the run know:

* on the record's node: the node suites (checks/, smoke_tests/) write into their result file
  how to rerun one of their tests (``meta["rerun"]``, :func:`gpufleet.results.rerun_meta`): the
  env's python, the suite's working directory and options, the pytest node id of each record
  that did not pass. The command is ``cd DIR && [ENV=...] PYTHON -m pytest ROOTDIR/NODEID
  OPTIONS``: that one test, with the options the run gave it, and no output file of the run;
* from the controller's checkout, ``make verify`` with the run's inventory (run.json
  ``inventory``): on that node alone (``VERIFY_ARGS="--limit NODE"``) for a record of a
  node step, on the whole inventory for a record of a cluster step (the all-reduce, training,
  the pair sweep, bisection, the pre-check mesh, slow nodes, Slurm jobs), which needs the
  other nodes. A run.json without ``inventory`` (written before gpufleet recorded it) gives
  the command without ``INVENTORY=``, and says so.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.results import Record, record_key

#: kinds whose records only a run of the whole inventory reproduces
CLUSTER_KINDS = frozenset(
    {"allreduce", "train", "train-1node", "pairs", "slow-nodes", "probe", "collectives", "sdc"}
)
#: kind prefixes of cluster steps (pair-<round>-<i>, bisect-<round>-<group>, slurm-<step>,
#: ibbw-<round>-<i>: a pair's ib_write_bw)
CLUSTER_PREFIXES = ("pair-", "bisect-", "slurm-", "ibbw-")
#: where a controller command runs
CONTROLLER = "controller"
NO_INVENTORY = (
    "this run's run.json names no inventory (written before gpufleet recorded it): "
    "add INVENTORY=<the inventory of this run>"
)


@dataclass(frozen=True)
class Reproducer:
    """``command`` (shell text) to run on ``where``: a node's name, or :data:`CONTROLLER`
    (the root of the checkout that ran the verify); ``what`` it reruns, and a ``note``."""

    where: str
    command: str
    what: str
    note: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"where": self.where, "command": self.command, "what": self.what}
        if self.note:
            out["note"] = self.note
        return out


def is_cluster_kind(kind: str) -> bool:
    return kind in CLUSTER_KINDS or kind.startswith(CLUSTER_PREFIXES)


def pytest_command(rerun: Mapping[str, Any], nodeid: str) -> str:
    """The shell text of one pytest test from a suite's ``meta["rerun"]``."""
    env = [f"{k}={v}" for k, v in sorted(dict(rerun.get("env") or {}).items())]
    root = str(rerun["rootdir"]).rstrip("/")
    argv = [*env, str(rerun["python"]), "-m", "pytest", f"{root}/{nodeid}"]
    argv += [str(o) for o in rerun.get("options") or []]
    return f"cd {shlex.quote(str(rerun['cwd']))} && {shlex.join(argv)}"


def verify_command(run_info: Mapping[str, Any], node: str | None) -> tuple[str, str]:
    """``make verify`` of the run's inventory, on ``node`` alone (None: every node), and a
    note when run.json does not name the inventory (or names several sources)."""
    words = ["make", "verify"]
    note = ""
    sources = run_info.get("inventory")
    if isinstance(sources, list) and len(sources) == 1:
        words.append(f"INVENTORY={sources[0]}")
    elif isinstance(sources, list) and sources:
        note = (
            f"this run read the inventory sources {', '.join(map(str, sources))}: make "
            "verify takes one (INVENTORY=); gpufleet verify -- -i A -i B takes several"
        )
    else:
        note = NO_INVENTORY
    if node is not None:
        words.append(f"VERIFY_ARGS=--limit {shlex.quote(node)}")
    return shlex.join(words), note


def reproducer(
    node: str,
    kind: str,
    record: Record,
    rerun: Mapping[str, Any] | None,
    run_info: Mapping[str, Any],
) -> Reproducer:
    """The command that reproduces ``record`` (of result kind ``kind``) of ``node``.
    ``rerun``: the ``meta["rerun"]`` of the result file that holds the record (None for a
    record the report made: a missing file, a dropped node, slow nodes, floors)."""
    tests = rerun.get("tests") if isinstance(rerun, Mapping) else None
    nodeid = tests.get(record_key(record)) if isinstance(tests, Mapping) else None
    if rerun is not None and isinstance(nodeid, str):
        return Reproducer(node, pytest_command(rerun, nodeid), f"the {kind} test {nodeid}")
    if is_cluster_kind(kind):
        command, note = verify_command(run_info, None)
        what = f"make verify on every node: the {kind} step needs them all"
        return Reproducer(CONTROLLER, command, what, note)
    command, note = verify_command(run_info, node)
    return Reproducer(CONTROLLER, command, f"make verify on {node} alone", note)
