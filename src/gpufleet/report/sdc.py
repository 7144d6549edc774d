"""Silent data corruption: the deterministic computation's digests of every device of every node,
compared (issue 40 item 3).

Every node's compute.json (:mod:`gpufleet.node.compute_run`) holds, per device, the SHA-256
of the same seeded computation, and the key it is comparable under: the device model, the
software (torch, CUDA) and the computation's parameters. Devices under one key must give
bit-identical results, within a node (8 GPUs of one board) and across nodes (every node of
that model and software). Per key, the digest most devices gave is the reference when more
than half gave it; a device with another digest fails, named with its node and index. Without
such a majority (two devices that disagree, a 2-2 split) every device of the key fails: which
one is wrong cannot be told, and each needs a rerun. A key with one device is compared with
nothing, which the record says. Each device's own repeats are judged on its node
(``sdc_repeat``, :func:`gpufleet.node.compute.judge_repeats`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpufleet.node.compute import NodeCompute, SdcKey
from gpufleet.report.model import Summary
from gpufleet.results import Record, ResultFile

KIND = "sdc"
NAME = f"{KIND}:compare"
REMEDY = (
    "this device computed different bits than its peers of the same model and software: "
    "drain the node, rerun `gpufleet compute` on it (make verify TIER=quick --limit NODE), "
    "run dcgmi diag -r 3 and the node checks (ECC, row remapping) on this GPU; RMA if it "
    "differs again"
)
REMEDY_SPLIT = (
    "the devices disagree with no majority, so which one is wrong cannot be told: rerun on "
    "more devices of this model (more nodes in the run), run dcgmi diag -r 3 on each"
)


@dataclass(frozen=True)
class Entry:
    node: str
    device: str
    digest: str
    key: SdcKey

    @property
    def label(self) -> str:
        return f"{self.node} {'CPU' if self.device == 'cpu' else 'GPU ' + self.device}"


def entries(files: Iterable[tuple[str, ResultFile]]) -> list[Entry]:
    """Each device's first digest, with its node's key, from the compute result files."""
    out = []
    for node, f in files:
        if f.kind != "compute":
            continue
        nc = NodeCompute.from_meta(node, f.meta)
        if nc.sdc_key is None:
            continue
        seen: set[str] = set()
        for fig in nc.figures:
            if fig.digests and fig.device not in seen:
                seen.add(fig.device)
                out.append(Entry(node, fig.device, fig.digests[0], nc.sdc_key))
    return out


def judge(s: Summary) -> list[Record]:
    """Fill ``s.sdc`` (the groups compared) and return a record per node with digests."""
    files = [(n, f) for n, nr in sorted(s.nodes.items()) for f in nr.files]
    found = entries(files)
    groups: dict[SdcKey, list[Entry]] = {}
    for e in found:
        groups.setdefault(e.key, []).append(e)
    verdicts: dict[str, list[tuple[Entry, str]]] = {}  # node -> [(entry, problem or "")]
    summary_groups: list[dict[str, Any]] = []
    for key, members in sorted(groups.items(), key=lambda kv: kv[0].text()):
        counts = Counter(e.digest for e in members)
        digest, most = counts.most_common(1)[0]
        majority = digest if most * 2 > len(members) else None
        bad = [e for e in members if len(counts) > 1 and e.digest != majority]
        for e in members:
            if len(members) == 1:
                why = "alone"
            elif e in bad:
                why = (
                    f"digest {e.digest[:16]} differs from {most} of {len(members)} devices "
                    f"({majority[:16]})"
                    if majority
                    else f"digest {e.digest[:16]}: the {len(members)} devices disagree "
                    f"({len(counts)} results, no majority)"
                )
            else:
                why = ""
            verdicts.setdefault(e.node, []).append((e, why))
        summary_groups.append(
            {
                "key": {"model": key.model, "software": key.software, "params": key.params},
                "devices": len(members),
                "nodes": sorted({e.node for e in members}),
                "digest": majority,
                "results": len(counts),
                "mismatches": [
                    {"node": e.node, "device": e.device, "digest": e.digest} for e in bad
                ],
            }
        )
    s.sdc = {"groups": summary_groups, "reason": _reason(found, summary_groups)}
    return [_record(node, mine) for node, mine in sorted(verdicts.items())]


def _reason(found: list[Entry], groups: list[dict[str, Any]]) -> str:
    if not found:
        return "no compute result with digests in this run (the compute step did not run)"
    bad = sum(len(g["mismatches"]) for g in groups)
    return (
        f"{len(found)} device(s) of {len({e.node for e in found})} node(s) in {len(groups)} "
        f"group(s) of the same model and software; {bad} mismatch(es)"
    )


def _record(node: str, mine: list[tuple[Entry, str]]) -> Record:
    bad = [(e, why) for e, why in mine if why and why != "alone"]
    if bad:
        split = any("no majority" in why for _, why in bad)
        return Record(
            NAME,
            "fail",
            node=node,
            gpu=bad[0][0].device if len(bad) == 1 and bad[0][0].device != "cpu" else None,
            value=len(bad),
            threshold=0,
            message="; ".join(f"{e.label}: {why} ({e.key.text()})" for e, why in bad),
            remedy=REMEDY_SPLIT if split else REMEDY,
        )
    e0 = mine[0][0]
    if all(why == "alone" for _, why in mine):
        return Record(
            NAME,
            "pass",
            node=node,
            value=e0.digest[:16],
            message=f"{e0.label}: the only device of {e0.key.text()} in this run: nothing "
            "to compare its digest with",
        )
    return Record(
        NAME,
        "pass",
        node=node,
        value=e0.digest[:16],
        message=f"{node}: {len(mine)} device(s) gave the same bits as every device of "
        f"{e0.key.text()} ({e0.digest[:16]})",
    )
