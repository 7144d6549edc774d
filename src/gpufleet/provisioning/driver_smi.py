"""The driver role's check after the install: what ``nvidia-smi`` says against the plan.

``nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader`` answering is not
enough (exit code 0 from an old driver still loaded, or from another branch than the plan
chose, passed before). :func:`problems` reads its lines and names each mismatch:

* no GPU listed, or GPUs on different driver versions;
* a loaded driver other than the module installed on disk (``modinfo -F version nvidia``):
  the node still runs the old driver, it needs the reboot it did not get;
* a driver outside the branch the role chose (``nvidia_driver_branch``, else the plan's
  ``driver_branch``);
* a driver older than the plan's ``min_driver`` (what the wheel's CUDA needs).

Used through the filter ``gpufleet.core.nvidia_smi_problems``
(roles/nvidia_driver/tasks/reboot.yml).
"""

from __future__ import annotations

from gpufleet.planning import versions as V


def driver_versions(csv_text: str) -> list[str]:
    """The driver_version column of each GPU line (the last comma-separated field)."""
    out = []
    for line in csv_text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and fields[-1]:
            out.append(fields[-1])
    return out


def problems(
    node: str,
    csv_text: str,
    *,
    module_version: str = "",
    branch: str | int | None = "",
    min_driver: str | None = "",
) -> list[str]:
    """One message per way the running driver differs from the install and the plan."""
    found = driver_versions(csv_text)
    if not found:
        return [
            f"{node}: nvidia-smi listed no GPU with a driver version ({csv_text.strip()[:200]!r})"
        ]
    distinct = sorted(set(found))
    if len(distinct) > 1:
        return [f"{node}: nvidia-smi reports several driver versions {', '.join(distinct)}"]
    running = distinct[0]
    if not V.is_driver_version(running):
        return [f"{node}: nvidia-smi's driver version {running!r} is not a version like 570.86.15"]
    out = []
    module = (module_version or "").strip()
    if module and module not in ("none", running):
        out.append(
            f"{node}: the running driver is {running} but the installed module is {module}: the "
            "node still runs the old driver -> reboot it (nvidia_driver_reboot) and rerun "
            "make provision"
        )
    want = str(branch or "").strip()
    if (
        want
        and want != "latest"
        and V.is_driver_branch(want)
        and V.driver_branch(running) != int(want)
    ):
        out.append(
            f"{node}: the running driver {running} is not of branch {want}, the branch the role "
            "chose (nvidia_driver_branch, else the plan's driver_branch) -> check the dnf module "
            "stream / versionlock and rerun make provision"
        )
    floor = (min_driver or "").strip()
    if floor and V.is_driver_version(floor) and not V.at_least(V.parse(running), V.parse(floor)):
        out.append(
            f"{node}: the running driver {running} is older than the plan's min_driver {floor} "
            "(the torch wheel's CUDA needs it) -> install a newer driver (nvidia_driver_branch)"
        )
    return out
