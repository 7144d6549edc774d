"""Profile floors: each node's own figures against its system profile's floors (docs/profiles.md).

The floor judged here is ``floors.allreduce_busbw_gbs``: the single-node NCCL all-reduce busbw
over all of the profile's GPUs at the floor's ``message_bytes`` (460 GB/s at 16 GiB on
``hgx-h100-8gpu``). The figure is the node's own sweep, the smoke suite's rows (smoke.json,
read as :func:`gpufleet.report.slownodes.local_busbw` reads them: the median of repeated rows
of a size). The profile is the one the node check ``profile`` chose, kept in the checks
file's ``meta["profile"]``; its figures come from :mod:`gpufleet.inputs.profile_file`
(no copy of any figure here).

Per node, one of:

* judged: the row at the largest size >= ``message_bytes``, measured with NCCL over at least
  the profile's GPU count, against the floor: ``pass``, or ``fail`` naming the node, expected
  and found, the size and the remedy (a record ``profile-floors:allreduce_busbw_gbs``, so a
  failure fails the run and its exit code like any other failed record);
* not judged, with a record ``skip`` saying why: no all-reduce rows, the sweep stopped below
  the floor's size (and how to raise it: ``verify_sizes``), fewer ranks than the profile's
  GPUs, or another backend than NCCL;
* nothing judged, no record, said once: no profile chosen, a profile this version does not
  ship, or a floor that is null in the profile (its note says why).

The collectives beside all-reduce (``floors.<op>_busbw_gbs``: all_gather, reduce_scatter,
alltoall, broadcast, sendrecv) are judged the same way where the profile sets a floor (no
shipped profile does: no public per-SKU figure; a site profile may), on the collectives
step's rows (collectives.json) when that step ran on one node with NCCL over at least the
profile's GPUs; a run across nodes is not judged against a one-node floor, which is said.

The entries go into ``Summary.floors`` (summary.json ``nodes.<node>.floors``, a line per node
in summary.md); the records into the node's records (the junit suite ``cluster.profile-floors``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.errors import GpufleetError
from gpufleet.node.profiles import Profile, load_profiles
from gpufleet.report.model import Summary
from gpufleet.results import BandwidthRow, Record, ResultFile
from gpufleet.units import human_size

#: the kind of the records this module adds (their names are ``<KIND>:<floor>``)
KIND = "profile-floors"
ALLREDUCE = "allreduce_busbw_gbs"
#: how the smoke all-reduce sweep's largest size is raised (roles/verify/defaults/main.yml;
#: the smoke suite alone takes --sizes)
SIZES_VARIABLE = "verify_sizes"
REMEDY_ALLREDUCE = (
    "check NVLink, NVSwitch and Fabric Manager: checks nvlink, gpu_fabric_state and "
    "fabric_manager in this run "
    "(systemctl status nvidia-fabricmanager, at the driver's exact version), nvidia-smi topo -m "
    "(every GPU pair NV<links>), nvidia-smi nvlink --status, clock throttling "
    "(nvidia-smi -q -d PERFORMANCE); rerun make verify after fixing it"
)

Verdict = Literal["pass", "fail", "not judged"]


@dataclass(frozen=True)
class FloorResult:
    """One floor of one node: judged (pass/fail) or not (``why``)."""

    node: str
    floor: str
    profile: str | None
    status: Verdict
    expected: float | None = None
    unit: str = ""
    found: float | None = None
    size_bytes: int | None = None  # the size judged at
    floor_size_bytes: int | None = None  # the size the floor applies at (message_bytes)
    world_size: int | None = None
    why: str = ""  # not judged: why
    remedy: str = ""
    source: str = ""
    record: bool = True  # False: nothing to judge (no profile, null floor): no record

    def text(self) -> str:
        """One line: ``FAIL allreduce_busbw_gbs: expected >= 460 GB/s at 16G, found 412.0``."""
        if self.status == "not judged":
            return f"{self.floor} not judged: {self.why}"
        at = "" if self.size_bytes is None else f" at {human_size(self.size_bytes)}"
        ranks = "" if self.world_size is None else f", {self.world_size} ranks"
        return (
            f"{self.status.upper()} {self.floor}: expected >= {self.expected} {self.unit}, "
            f"found {self.found} {self.unit}{at}{ranks} (profile {self.profile})"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "floor": self.floor,
            "profile": self.profile,
            "status": self.status,
            "expected": self.expected,
            "found": self.found,
            "unit": self.unit,
            "size_bytes": self.size_bytes,
            "floor_size_bytes": self.floor_size_bytes,
            "world_size": self.world_size,
            "text": self.text(),
        }
        if self.status == "fail":
            out["remedy"] = self.remedy
        if self.status == "not judged":
            out["why"] = self.why
        if self.source:
            out["source"] = self.source
        return out

    def to_record(self) -> Record:
        name = f"{KIND}:{self.floor}"
        if self.status == "not judged":
            message = f"{self.node}: {self.text()}"
            return Record(
                name, "skip", node=self.node, threshold=self.expected, message=message,
                remedy=self.remedy,
            )  # fmt: skip
        message = f"{self.node}: {self.text()}"
        if self.status == "fail":
            message += f"; below the floor ({self.source})"
        return Record(
            name,
            "fail" if self.status == "fail" else "pass",
            node=self.node,
            value=self.found,
            threshold=self.expected,
            message=message,
            remedy=self.remedy if self.status == "fail" else "",
        )


def profile_meta(files: Iterable[ResultFile]) -> dict[str, Any] | None:
    """The node's system profile as the node check ``profile`` recorded it (the checks
    file's ``meta["profile"]``); None when no checks file holds one."""
    for f in files:
        meta = f.meta.get("profile") if f.kind == "checks" else None
        if isinstance(meta, dict):
            return meta
    return None


def _rows(files: Iterable[ResultFile]) -> list[BandwidthRow]:
    return [row for f in files if f.kind == "smoke" for row in f.bandwidth]


def judge_allreduce(node: str, profile: Profile, rows: Sequence[BandwidthRow]) -> FloorResult:
    """``floors.allreduce_busbw_gbs`` of ``profile`` against the node's smoke rows."""
    fig = profile.floor(ALLREDUCE)

    def result(status: Verdict, **kw: Any) -> FloorResult:
        return FloorResult(
            node=node, floor=ALLREDUCE, profile=profile.name, status=status, unit=fig.unit,
            floor_size_bytes=fig.message_bytes, source=fig.source, **kw,
        )  # fmt: skip

    if fig.value is None:
        why = f"profile {profile.name} has no {ALLREDUCE} floor ({fig.note})"
        return result("not judged", why=why, record=False)
    expected = float(fig.value)
    want = int(fig.message_bytes) if fig.message_bytes else None
    if not rows:
        at = f"at {human_size(want)}" if want else "at the largest size measured"
        why = (
            f"no single-node all-reduce rows from {node} (smoke.json missing, or its "
            f"all-reduce did not run); the floor applies {at}"
        )
        remedy = "run the smoke suite (verify_run_smoke) and rerun make verify"
        return result("not judged", expected=expected, why=why, remedy=remedy)
    largest = max(r.size_bytes for r in rows)
    if want is not None and largest < want:
        why = (
            f"largest size measured {human_size(largest)}, the floor applies at "
            f"{human_size(want)}; raise the all-reduce sweep's largest size with "
            f'{SIZES_VARIABLE} (make verify VERIFY_ARGS="-e {SIZES_VARIABLE}=1M,16M,1G,'
            f'{human_size(want)}"; the smoke suite alone: --sizes)'
        )
        remedy = f"raise {SIZES_VARIABLE} to {human_size(want)} or more"
        return result("not judged", expected=expected, why=why, remedy=remedy)
    size = largest  # the largest size >= message_bytes (the largest measured, without one)
    at_size = [r for r in rows if r.size_bytes == size]
    ranks = min(r.world_size for r in at_size)
    measured = {"expected": expected, "size_bytes": size, "world_size": ranks}
    backends = sorted({r.backend for r in at_size})
    if backends != ["nccl"]:
        why = (
            f"the sweep at {human_size(size)} ran with {', '.join(backends)}; the floor is "
            "NCCL's (a GPU node whose smoke ran on CPU: see its torch checks)"
        )
        return result("not judged", why=why, remedy="fix CUDA torch on the node", **measured)
    if ranks < profile.gpu_count:
        why = (
            f"the sweep at {human_size(size)} ran on {ranks} rank(s); the floor is for all "
            f"{profile.gpu_count} GPUs of {profile.name}"
        )
        remedy = "see the node's gpu_count and torch_device_count checks"
        return result("not judged", why=why, remedy=remedy, **measured)
    found = round(statistics.median(r.busbw for r in at_size), 3)
    if found >= expected:
        return result("pass", found=found, **measured)
    return result("fail", found=found, remedy=REMEDY_ALLREDUCE, **measured)


#: the collectives with a floor field of their own (``floors.<op>_busbw_gbs``)
COLLECTIVE_OPS = ("all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
REMEDY_COLLECTIVE = (
    "compare with the all-reduce of this node (smoke.json) and its NVLink/NVSwitch checks; a "
    "collective alone below its floor points at its algorithm (NCCL_ALGO, NCCL_PROTO) or the "
    "NCCL version: run nccl-tests' binary of it with NCCL_DEBUG=INFO"
)


def judge_collectives(
    node: str, profile: Profile, files: Sequence[ResultFile]
) -> list[FloorResult]:
    """``floors.<op>_busbw_gbs`` that the profile sets, against the collectives step's rows
    of this node (the first node of the step holds them); [] where no floor is set."""
    out = []
    coll = next((f for f in files if f.kind == "collectives" and f.bandwidth), None)
    nnodes = int(coll.meta.get("nnodes") or 1) if coll is not None else 1
    for op in COLLECTIVE_OPS:
        floor = f"{op}_busbw_gbs"
        fig = profile.floor(floor)
        if fig.value is None or coll is None:
            continue
        expected = float(fig.value)

        def result(
            status: Verdict,
            floor: str = floor,
            expected: float = expected,
            unit: str = fig.unit,
            source: str = fig.source,
            **kw: Any,
        ) -> FloorResult:
            return FloorResult(
                node=node, floor=floor, profile=profile.name, status=status, expected=expected,
                unit=unit, source=source, **kw,
            )  # fmt: skip

        rows = [r for r in coll.bandwidth if r.op == op]
        if not rows:
            out.append(
                result("not judged", why=f"no {op} rows (skipped or failed: see its record)")
            )
            continue
        last = max(rows, key=lambda r: r.size_bytes)
        at: dict[str, Any] = {"size_bytes": last.size_bytes, "world_size": last.world_size}
        if nnodes != 1 or last.backend != "nccl" or last.world_size < profile.gpu_count:
            why = (
                f"the floor is for one node's {profile.gpu_count} GPUs over NCCL; this run's "
                f"{op} ran on {nnodes} node(s), {last.world_size} ranks, {last.backend}"
            )
            out.append(result("not judged", why=why, **at))
            continue
        found = round(last.busbw, 3)
        if found >= expected:
            out.append(result("pass", found=found, **at))
        else:
            out.append(result("fail", found=found, remedy=REMEDY_COLLECTIVE, **at))
    return out


def judge_node(
    node: str,
    files: Sequence[ResultFile],
    profiles: Mapping[str, Profile] | None,
    load_error: str = "",
) -> list[FloorResult]:
    """The floors of one node: its profile from its checks file, judged on its smoke rows.
    ``profiles``: the shipped profiles (None: they could not be loaded, ``load_error``)."""
    meta = profile_meta(files)
    if meta is None:  # no checks result with a profile: no Hardware profile line either
        return []
    name = meta.get("name")
    if not name:
        why = f"no system profile chosen ({meta.get('requested')}): see the node's profile record"
        return [FloorResult(node, ALLREDUCE, None, "not judged", why=why, record=False)]
    if profiles is None:
        why = f"the profiles could not be loaded: {load_error}"
        return [FloorResult(node, ALLREDUCE, str(name), "not judged", why=why, record=False)]
    profile = profiles.get(str(name))
    if profile is None:
        why = (
            f"profile {name} is not one this gpufleet ships ({', '.join(sorted(profiles))}): "
            "its floors are unknown here"
        )
        return [FloorResult(node, ALLREDUCE, str(name), "not judged", why=why, record=False)]
    return [judge_allreduce(node, profile, _rows(files)), *judge_collectives(node, profile, files)]


def judge(s: Summary, profiles: Mapping[str, Profile] | None = None) -> list[Record]:
    """Fill ``s.floors`` (node -> its floors; none for a node without a profile in its checks
    result) and ``s.floors_reason``, and return the records to add to the nodes: one per
    floor the profile sets (pass, fail, or skip when not judged). The profiles: the shipped
    ones and the site's of run.json ``profiles_dir`` (gpufleet_profiles_dir of the run)."""
    load_error = ""
    if profiles is None and any(profile_meta(nr.files) for nr in s.nodes.values()):
        try:
            profiles = load_profiles(site_dir=str(s.run_info.get("profiles_dir") or "") or None)
        except GpufleetError as exc:  # a broken profile file: said per node, no crash
            load_error = str(exc)
    out: list[Record] = []
    seen: list[FloorResult] = []
    for node, nr in sorted(s.nodes.items()):
        results = judge_node(node, nr.files, profiles, load_error)
        s.floors[node] = [r.to_dict() for r in results]
        out += [r.to_record() for r in results if r.record]
        seen += results
    s.floors_reason = reason(seen, len(s.nodes))
    return out


def reason(results: Sequence[FloorResult], nodes: int) -> str:
    """One sentence on what was judged: ``2 node(s) with a system profile: allreduce_busbw_gbs
    judged on 1 (1 fail), not judged on 1; 1 node(s) without one``."""
    with_profile = {r.node for r in results}
    if not with_profile:
        return (
            "no node has a system profile in its checks result (the node check profile): no "
            "floor judged"
        )
    judged = [r for r in results if r.status != "not judged"]
    fails = sum(r.status == "fail" for r in judged)
    text = (
        f"{len(with_profile)} node(s) with a system profile: {ALLREDUCE} judged on "
        f"{len(judged)} ({fails} fail), not judged on {len(results) - len(judged)}"
    )
    rest = nodes - len(with_profile)
    return text + (f"; {rest} node(s) without one" if rest else "")
