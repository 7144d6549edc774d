"""Checks of the node as gpufleet provisioned it (``gpufleet health`` only): the manifest is
readable, the env python it names runs, the interfaces named in nccl.env exist."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.node import netprobe
from gpufleet.node.health.names import ENV_PYTHON, MANIFEST, NCCL_ENV
from gpufleet.results import Record


@dataclass
class NodeFacts:
    """What the provisioning checks read (a test passes its own)."""

    manifest_path: Path
    manifest: dict[str, Any] | None  # None: missing or unreadable
    manifest_error: str = ""
    env: dict[str, str] = field(default_factory=dict)  # nccl.env contents
    env_file: Path | None = None
    interfaces: list[str] = field(default_factory=list)


def manifest(facts: NodeFacts) -> Record:
    where = str(facts.manifest_path)
    if facts.manifest_error:
        return Record(
            name=MANIFEST,
            status="fail",
            value="unreadable",
            threshold="a JSON object",
            message=f"the gpufleet manifest is broken: {facts.manifest_error}. Fix: run "
            "`make provision` for this node (it rebuilds the manifest)",
            remedy="make provision (rebuilds the manifest)",
        )
    if facts.manifest is None:
        return Record(
            name=MANIFEST,
            status="skip",
            message=f"no gpufleet manifest at {where}: the node was not provisioned by "
            "gpufleet (node checks that need it are skipped)",
        )
    return Record(name=MANIFEST, status="pass", value=where, message=f"{where} readable")


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def env_python(facts: NodeFacts, is_exec: Callable[[str], bool] = _runnable) -> Record:
    py = (facts.manifest or {}).get("env_python")
    if not isinstance(py, str) or not py:
        return Record(name=ENV_PYTHON, status="skip", message="the manifest names no env")
    if is_exec(py):
        return Record(name=ENV_PYTHON, status="pass", value=py, message=f"{py} runs")
    return Record(
        name=ENV_PYTHON,
        status="fail",
        value=py,
        threshold="an executable file",
        message=f"the training env's python {py} (manifest env_python) is missing or "
        "not executable: jobs on this node cannot start. Fix: make provision",
        remedy="make provision (reinstalls the env)",
    )


def nccl_env_interfaces(facts: NodeFacts) -> Record:
    if facts.env_file is None:
        return Record(name=NCCL_ENV, status="skip", message="no nccl.env on this node")
    problems = netprobe.ifname_problems(facts.env, facts.interfaces)
    if not problems:
        return Record(
            name=NCCL_ENV,
            status="pass",
            value="ok",
            threshold="every named interface exists",
            message=f"every interface named in {facts.env_file} exists",
        )
    return Record(
        name=NCCL_ENV,
        status="fail",
        value="; ".join(problems),
        threshold="every named interface exists",
        message="; ".join(problems) + f". Fix: correct {facts.env_file} "
        "(cluster_network_interface, then make provision)",
        remedy=f"fix {facts.env_file} (make provision)",
    )
