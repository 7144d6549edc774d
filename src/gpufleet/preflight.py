"""Preflight verdicts: observations about one node -> one message per problem.

Each message names the node, the variable (or fact) involved and the fix, so that an admin
reading the failed play knows what to change without reading the role. Pure function;
the preflight role gathers the observations read-only and calls this through the filter
``gpufleet.core.preflight_problems``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def _msg(node: object, variable: object, problem: object, fix: object) -> str:
    return f"{node}: {problem} [{variable}] -> fix: {fix}"


def _dnf_said(obs: Mapping[str, Any]) -> str:
    detail = str(obs.get("kernel_devel_detail") or "").strip()
    return f" (dnf said: {detail})" if detail else ""


def preflight_problems(obs: Mapping[str, Any]) -> list[str]:
    """``obs`` keys (all optional except node):

    node, target (el_target dict), plan_error (refusal paragraph), choice_error
    ({variable, message}), gpus (list of device dicts), allow_no_gpu, gpu_archs_var (list),
    kernel, kernel_devel ("installed"/"available"/"missing"/"error"/"skipped"),
    kernel_devel_detail (dnf's stderr of the query, quoted in the message), secure_boot
    ("enabled"/"disabled"/"unsupported"/"unknown"), secure_boot_ok, packaging, disks (list of
    {path, free_mb, required_mb, variable}), driver_required (bool: nvidia_driver will run),
    fabricmanager (the verdict of :func:`gpufleet.fabricpkg.probe_verdict`: a problem when the
    repository has no Fabric Manager of the driver version an NVSwitch node will run).
    """
    node = obs.get("node") or "?"
    out: list[str] = []
    target = obs.get("target") or {}
    for refusal in target.get("refusals") or []:
        out.append(
            _msg(
                node,
                "ansible_distribution",
                refusal,
                "provision this node with a supported EL 8/9/10 release",
            )
        )
    if target.get("is_el7") and obs.get("plan_error"):
        out.append(
            _msg(
                node,
                "gpufleet_torch_version",
                "the planner's answer for EL7: " + obs["plan_error"],
                "upgrade the OS to EL8+ (recommended), or provision it by hand with "
                "the versions named above",
            )
        )
        return out
    if target.get("refusals"):
        return out

    gpus = obs.get("gpus") or []
    archs_var = obs.get("gpu_archs_var") or []
    if not gpus and not archs_var and not obs.get("allow_no_gpu"):
        out.append(
            _msg(
                node,
                "gpufleet_allow_no_gpu",
                "no NVIDIA GPU found by `lspci -nn -d 10de:`",
                "seat/enable the GPU (check BIOS and `lspci`), or set "
                "gpufleet_allow_no_gpu: true for image-baking and CPU test nodes "
                "(packages are installed, no module is loaded, no reboot)",
            )
        )
    unknown = [g for g in gpus if not g.get("arch")]
    if unknown and not archs_var:
        out.append(
            _msg(
                node,
                "gpufleet_gpu_archs",
                "GPU(s) {} not known to gpufleet (newer than its table?)".format(
                    ", ".join("{} {}".format(g.get("pci"), g.get("name")) for g in unknown)
                ),
                "set gpufleet_gpu_archs to their compute capability, e.g. ['sm_100']",
            )
        )

    if obs.get("plan_error"):
        out.append(
            _msg(
                node,
                "gpufleet_torch_version / gpufleet_cuda_variant / gpufleet_python_version",
                "the planner refused this node: " + obs["plan_error"],
                "choose one of the combinations the planner names",
            )
        )
    ce = obs.get("choice_error")
    if ce:
        out.append(
            _msg(
                node,
                ce.get("variable") or "nvidia_driver_*",
                ce.get("message"),
                "change %s as described" % (ce.get("variable") or "the variable"),
            )
        )

    dkms = obs.get("packaging", "dkms") == "dkms"
    if obs.get("driver_required", True):
        kd = obs.get("kernel_devel")
        if dkms and kd == "missing":
            out.append(
                _msg(
                    node,
                    "gpufleet_base_repo_baseurl",
                    "no kernel-devel for the running kernel {} in the enabled "
                    "repositories (DKMS cannot build the module)".format(obs.get("kernel")),
                    "update the kernel and reboot (`dnf update kernel`), or point "
                    "gpufleet_base_repo_baseurl at a mirror that still carries "
                    "kernel-devel-{} (e.g. the vault repository)".format(obs.get("kernel")),
                )
                + _dnf_said(obs)
            )
        if dkms and kd == "error":
            out.append(
                _msg(
                    node,
                    "gpufleet_base_repo_baseurl",
                    f"the repository query for kernel-devel-{obs.get('kernel')} failed, so its "
                    "availability is unknown",
                    "fix what dnf reports below (run `dnf repoquery "
                    f"kernel-devel-{obs.get('kernel')}` on the node), then rerun",
                )
                + _dnf_said(obs)
            )
        sb = obs.get("secure_boot")
        if sb == "enabled" and dkms and not obs.get("secure_boot_ok"):
            out.append(
                _msg(
                    node,
                    "preflight_secure_boot_ok",
                    "Secure Boot is enabled and DKMS-built NVIDIA modules are unsigned, "
                    "so the kernel would refuse to load them",
                    "disable Secure Boot, or use signed precompiled kmods "
                    "(nvidia_driver_packaging: precompiled, EL8/9; enrol NVIDIA's key "
                    "with mokutil --import), or sign the modules with your own enrolled "
                    "MOK and set preflight_secure_boot_ok: true",
                )
            )
        fm = obs.get("fabricmanager") or {}
        if fm.get("problem"):
            out.append(
                _msg(
                    node,
                    fm.get("variable") or "nvidia_driver_branch",
                    "NVSwitch system: " + str(fm["problem"]),
                    str(fm.get("fix") or "set nvidia_driver_fabricmanager: never to skip it")
                    + " (or nvidia_driver_fabricmanager: never where Fabric Manager is "
                    "managed elsewhere)",
                )
            )

    for d in obs.get("disks") or []:
        free, need = d.get("free_mb"), d.get("required_mb")
        if free is None:
            out.append(
                _msg(
                    node,
                    d.get("variable"),
                    "cannot measure free space for {}".format(d.get("path")),
                    "create the directory's parent file system or set {} to 0".format(
                        d.get("variable")
                    ),
                )
            )
        elif need and int(free) < int(need):
            out.append(
                _msg(
                    node,
                    d.get("variable"),
                    f"{d.get('path')} has {int(free)} MiB free, {int(need)} MiB needed",
                    "free space on the file system holding {}, or lower {}".format(
                        d.get("path"), d.get("variable")
                    ),
                )
            )
    return out


#: The line before each section of preflight's one-command probe (roles/preflight/tasks/probes.yml).
PROBE_MARK = "@@gpufleet-probe "


def probe_sections(stdout: str) -> dict[str, str]:
    """The one-command probe's output -> {section name: its text}. Text before the first
    mark is dropped; a section named twice keeps its last text."""
    out: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in str(stdout or "").splitlines():
        if line.startswith(PROBE_MARK):
            if name is not None:
                out[name] = "\n".join(lines)
            name, lines = line[len(PROBE_MARK) :].strip(), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        out[name] = "\n".join(lines)
    return out


def disk_rows(
    items: Iterable[Mapping[str, Any]] | None, sections: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The df items the probe measured -> [{path, required_mb, variable, free_mb}]; free_mb is
    None where the probe's ``df <variable>`` section holds no number (df failed)."""
    rows = []
    for it in items or []:
        item = dict(it)
        out = str(sections.get(f"df {item.get('variable')}", "")).strip()
        item["free_mb"] = int(out) if out.isdigit() else None
        item["required_mb"] = int(item.get("required_mb") or 0)
        rows.append(item)
    return rows
