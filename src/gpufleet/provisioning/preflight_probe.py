"""Preflight verdicts: observations about one node -> one message per problem.

Each message names the node, the variable (or fact) involved and the fix, so that an admin
reading the failed play knows what to change without reading the role. The preflight
role's node step (action ``gpufleet.core.preflight``) runs :data:`PROBE_SCRIPT` on the
node, then :func:`observe`, :func:`judge` and :func:`preflight_problems` here; refuse.yml
calls :func:`preflight_problems` through the filter ``gpufleet.core.preflight_problems``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.inputs import credentials as creds
from gpufleet.planning import driver_choice as driverchoice
from gpufleet.planning import gpuarch
from gpufleet.planning import planner as planmod
from gpufleet.planning import torch_lock as torchlock
from gpufleet.planning import torch_source as torchsource
from gpufleet.provisioning import fabric_packages as fabricpkg


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
    fabricmanager (the verdict of :func:`gpufleet.provisioning.fabric_packages.probe_verdict`: a
    problem when the
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
    for error in obs.get("torch_step_errors") or []:
        problem, _, fix = error.partition(" -> fix: ")
        out.append(
            _msg(
                node,
                "gpufleet_torch_source / gpufleet_pip_index_url / gpufleet_torch_lock",
                "torch_env cannot install the planned torch build: " + problem,
                fix
                or "write a lock of this node's plan (make torch-lock, gpufleet lock) or set "
                'gpufleet_torch_lock: ""',
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


#: The line before each section of preflight's one-command probe (PROBE_SCRIPT).
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


# --------------------------------------------------------------------------- the node step
# preflight's probe and its verdicts as one step (action gpufleet.core.preflight): one
# command on the node, everything else here, on the controller. The task files used to do
# this in five tasks of Jinja (each task a worker process per node, and the planner run once
# per reference to it).

#: One command, read-only, every probe of a node (bash: pipefail). Positional parameters:
#: kernel (uname -r as the facts give it), 1/0 (query kernel-devel), the id of the mirror's
#: repository or "" (its definition comes on stdin: :func:`probe_repo_file`; a mirror URL may
#: carry credentials, which never go on a command line), the env prefix, then "variable
#: path" pairs for free space.
#: Each section follows a ``PROBE_MARK`` line. The command fails only where listing the PCI
#: devices fails. kernel-devel: the mirror goes in under a repository id of its own
#: (gpufleet-base-probe): nvidia_driver writes gpufleet-base.repo, and a
#: ``--repofrompath=gpufleet-base,...`` beside it makes dnf refuse the whole query ("listed
#: more than once"). dnf's stderr is kept: a failed query prints "error" and what dnf said,
#: never "missing".
PROBE_SCRIPT = r"""
set -o pipefail
kernel=$1; kdevel=$2; repoid=$3; prefix=$4; shift 4
rc=0
repodir=""
if [ -n "$repoid" ]; then
  # the mirror's repository file (0600 in a 0700 directory), beside the system's
  repodir=$(mktemp -d) || exit 1
  trap 'rm -rf "$repodir"' EXIT
  (umask 077; cat > "$repodir/$repoid.repo")
fi
section() { printf '@@gpufleet-probe %s\n' "$1"; }
section lspci
if command -v lspci >/dev/null 2>&1; then
  lspci -nn -d 10de: || { echo "lspci -nn -d 10de: failed" >&2; rc=1; }
else
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
    c=$(cat "$d/class"); dev=$(cat "$d/device")
    case "$c" in
      0x0300*|0x0302*)
        printf '%s 3D controller [%s]: NVIDIA Corporation Device [10de:%s] (no lspci)\n' \
          "$(basename "$d" | cut -d: -f2-)" "$(echo "$c" | cut -c3-6)" \
          "$(echo "$dev" | cut -c3-)" ;;
      0x0680*)
        printf '%s Bridge [0680]: NVIDIA Corporation Device [10de:%s] (NVSwitch, no lspci)\n' \
          "$(basename "$d" | cut -d: -f2-)" "$(echo "$dev" | cut -c3-)" ;;
    esac
  done
fi
section driver
cat /sys/module/nvidia/version 2>/dev/null || modinfo -F version nvidia 2>/dev/null || true
if [ "$kdevel" = 1 ]; then
  section kernel-devel
  (
    spec="kernel-devel-$kernel"
    if rpm -q "$spec" >/dev/null 2>&1 || rpm -q --whatprovides "$spec" >/dev/null 2>&1; then
      echo installed; exit 0
    fi
    err=$(mktemp) || { echo error; echo "mktemp failed"; exit 0; }
    trap 'rm -f "$err"' EXIT
    repo=()
    sysdirs=/etc/yum.repos.d,/etc/yum/repos.d,/etc/distro.repos.d
    [ -n "$repodir" ] && repo=("--setopt=reposdir=$sysdirs,$repodir")
    for how in "" --whatprovides; do
      if ! out=$(dnf -q -y repoquery "${repo[@]}" $how "$spec" 2>"$err"); then
        echo error; tail -c 2000 "$err"; exit 0
      fi
      if [ -n "$out" ]; then echo available; exit 0; fi
    done
    echo missing; tail -c 2000 "$err"
  )
fi
section secure-boot
if command -v mokutil >/dev/null 2>&1; then
  mokutil --sb-state 2>&1 || true
elif [ -d /sys/firmware/efi ]; then
  echo "efi-without-mokutil"
else
  echo "no-efi"
fi
# what is installed already (free space is needed only for the rest): the torch builds in
# the site-packages of the env, the CUDA toolkit packages
section installed-env
if [ -x "$prefix/bin/python" ]; then
  for d in "$prefix"/lib/python*/site-packages/torch-*.dist-info; do
    [ -d "$d" ] && basename "$d"
  done
fi
section installed-toolkit
rpm -qa 'cuda-toolkit-*' 2>/dev/null || true
while [ $# -ge 2 ]; do
  section "df $1"
  p=$2
  while [ ! -e "$p" ]; do p=$(dirname "$p"); done
  df -Pm "$p" | awk 'NR == 2 { print $4 }' || true
  shift 2
done
exit "$rc"
"""


def probe_argv(
    kernel: str,
    kernel_devel: bool,
    base_repo_baseurl: str,
    env_prefix: str,
    disks: Iterable[Mapping[str, Any]] | None,
) -> list[str]:
    """The probe command as an argv (``bash -c PROBE_SCRIPT ...``): every value a parameter
    of its own, nothing of the inventory in the script's text. With a base mirror, its
    repository file (:func:`probe_repo_file`) goes on the command's stdin."""
    repo = BASE_PROBE_REPO if base_repo_baseurl else ""
    argv = ["bash", "-c", PROBE_SCRIPT, "gpufleet-probe", str(kernel)]
    argv += ["1" if kernel_devel else "0", repo, str(env_prefix)]
    for d in disks or []:
        argv += [str(d.get("variable")), str(d.get("path"))]
    return argv


#: the repository id of the base mirror in the probe (never gpufleet-base: nvidia_driver
#: writes that one, and the same id twice makes dnf refuse the query)
BASE_PROBE_REPO = "gpufleet-base-probe"


def probe_repo_file(repo_id: str, baseurl: str, gpgkey: str = "") -> str:
    """A dnf repository file of ``baseurl`` for a command that adds a mirror for one run (the
    probes' queries, python_bootstrap's install): the URL without its credentials, which go
    in as ``username=``/``password=``; with ``gpgkey`` (its credentials dropped: dnf fetches it
    with the repository's) packages are checked against it. The command writes the file
    0600 in a private directory it removes; the text travels on stdin or in a script file,
    never on a command line (filter ``gpufleet.core.repo_file``)."""
    auth = creds.split(baseurl)
    lines = [f"[{repo_id}]", f"name={repo_id}", f"baseurl={auth.url}", "enabled=1"]
    if gpgkey:
        lines += ["gpgcheck=1", f"gpgkey={creds.split(gpgkey).url}"]
    if auth.present:
        lines += [f"username={auth.username}", f"password={auth.password}"]
    return "\n".join(lines) + "\n"


def secure_boot_state(text: str) -> str:
    """mokutil --sb-state (or the probe's stand-ins) -> enabled/disabled/unsupported/unknown."""
    if "SecureBoot enabled" in text:
        return "enabled"
    if "SecureBoot disabled" in text:
        return "disabled"
    if "not supported" in text or text.strip() == "no-efi":
        return "unsupported"
    return "unknown"


def observe(stdout: str, disks: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The probe's output -> what it saw: gpus, nvswitches, driver (version or ''),
    kernel_devel (installed/available/missing/error/skipped) and its detail, secure_boot,
    disks (:func:`disk_rows`), installed_torch (dist-info names), installed_toolkits
    (package names without version-release)."""
    sections = probe_sections(stdout)
    lspci = sections.get("lspci", "")
    if "kernel-devel" in sections:
        lines = sections["kernel-devel"].strip().splitlines()
        kernel_devel = (lines[0].strip() if lines else "") or "skipped"
        detail = " ".join(lines[1:]).strip()
    else:
        kernel_devel, detail = "skipped", ""
    return {
        "gpus": [d.to_dict() for d in gpuarch.parse_lspci(lspci)],
        "nvswitches": fabricpkg.nvswitches_from_lspci(lspci),
        "driver": sections.get("driver", "").strip(),
        "kernel_devel": kernel_devel,
        "kernel_devel_detail": detail,
        "secure_boot": secure_boot_state(sections.get("secure-boot", "")),
        "disks": disk_rows(disks, sections),
        "installed_torch": sections.get("installed-env", "").split(),
        "installed_toolkits": [
            re.sub(r"^(.+)-[^-]+-[^-]+$", r"\1", p)
            for p in sections.get("installed-toolkit", "").split()
        ],
    }


def judge(node: str, inputs: Mapping[str, Any], seen: Mapping[str, Any]) -> dict[str, Any]:
    """One node's verdict from its inputs and what :func:`observe` saw.

    ``inputs``: target (:func:`gpufleet.planning.osinfo.el_target` of the facts), torch, variant,
    python, gpu_archs (the variable: [] = from the PCI bus), plan_installed_driver
    (auto/always/never), allow_no_gpu, secure_boot_ok, kernel, driver_install, flavor,
    branch, packaging, compute_only, fabricmanager, nvlsm (nvidia_driver's settings),
    wheel_variant (torch_env's).

    Returns answer ({plan, refused}), choice (nvidia_driver's overrides; {} where no driver
    is chosen: no plan, no install, CPU wheel; {error} where the settings cannot work),
    fabric (:func:`gpufleet.provisioning.fabric_packages.fabric_needs`), observations (what
    :func:`preflight_problems` judged, to judge again with a Fabric Manager verdict) and
    problems. A request the planner cannot even read raises ValueError.
    """
    target = inputs["target"]
    archs = list(inputs.get("gpu_archs") or []) or list(
        dict.fromkeys(g["arch"] for g in seen["gpus"] if g.get("arch"))
    )
    how = inputs.get("plan_installed_driver", "auto")
    driver_install = bool(inputs.get("driver_install", True))
    plan_driver = (
        seen["driver"] if how == "always" or (how == "auto" and not driver_install) else ""
    )
    request = {
        "torch": inputs.get("torch"),
        "variant": inputs.get("variant"),
        "os": target.get("os"),
        "python": inputs.get("python"),
        "gpu_archs": archs,
        "driver": plan_driver,
    }
    try:
        req = planmod.PlanRequest.from_mapping(request)
    except RefusedError as exc:
        raise ValueError(f"gpufleet.core.plan: {exc}") from None
    plan: dict[str, Any] | None
    try:
        plan, refused = dict(planmod.make_plan(req).to_dict()), None
    except (RefusedError, ValueError) as exc:
        plan, refused = None, str(exc)

    choice: dict[str, Any] = {}
    if plan is not None and driver_install and plan.get("variant") != "cpu":
        try:
            choice = driverchoice.driver_choice(
                plan,
                target["el_major"],
                flavor=str(inputs.get("flavor") or ""),
                branch=str(inputs.get("branch") or ""),
                packaging=str(inputs.get("packaging") or "dkms"),
                compute_only=bool(inputs.get("compute_only", False)),
            )
        except driverchoice.ChoiceError as exc:
            choice = {"error": {"variable": exc.variable, "message": exc.message}}
    fabric = fabricpkg.fabric_needs(
        seen["nvswitches"],
        (plan.get("gpu_archs") or []) if plan is not None else [],
        inputs.get("fabricmanager", "auto"),
        inputs.get("nvlsm", "auto"),
    )

    # the torch step: a build the configured source cannot serve, or a lock that is not of
    # it, is refused here, before any role changes the node
    step, step_errors = torch_step(plan, inputs)

    # free space only for what is still to be installed: a node whose env holds the planned
    # torch build, or whose toolkit package is installed, needs none for that part
    installed: list[str] = []
    if plan is not None:
        if step is not None and torchsource.dist_info_holds(seen["installed_torch"], step):
            installed.append("preflight_env_free_mb")
        toolkit = plan.get("toolkit_package") or ""
        if toolkit and toolkit in seen["installed_toolkits"]:
            installed.append("preflight_toolkit_free_mb")
    observations = {
        "node": node,
        "target": target,
        "plan_error": refused,
        "choice_error": choice.get("error"),
        "gpus": seen["gpus"],
        "allow_no_gpu": bool(inputs.get("allow_no_gpu", False)),
        "gpu_archs_var": list(inputs.get("gpu_archs") or []),
        "kernel": inputs.get("kernel"),
        "kernel_devel": seen["kernel_devel"],
        "kernel_devel_detail": seen["kernel_devel_detail"],
        "secure_boot": seen["secure_boot"],
        "secure_boot_ok": bool(inputs.get("secure_boot_ok", False)),
        "packaging": str(inputs.get("packaging") or "dkms"),
        "driver_required": driver_install,
        "fabricmanager": {},
        "disks": [d for d in seen["disks"] if d.get("variable") not in installed],
        "torch_step_errors": step_errors,
    }
    return {
        "answer": {"plan": plan, "refused": refused},
        "choice": choice,
        "fabric": fabric,
        "torch_step": step.as_dict() if step is not None else None,
        "observations": observations,
        "problems": preflight_problems(observations),
    }


def torch_step(
    plan: Mapping[str, Any] | None, inputs: Mapping[str, Any]
) -> tuple[torchsource.TorchInstall | None, list[str]]:
    """torch_env's torch step for ``plan`` (:func:`gpufleet.planning.torch_source.torch_install`
    of the inputs torch_source, wheel_variant, torch_lock_text, torch_lock, torch_packages)
    and the reasons it cannot work: the source cannot serve the build, the lock is not of
    it. (None, []) without a plan."""
    if plan is None:
        return None, []
    settings = torchsource.SourceSettings.from_mapping(inputs.get("torch_source") or {})
    try:
        step = torchsource.torch_install(plan, str(inputs.get("wheel_variant") or ""), settings)
    except torchsource.TorchSourceError as exc:
        return None, [str(exc)]
    lock_text = inputs.get("torch_lock_text")
    if not lock_text:
        return step, []
    where = f"gpufleet_torch_lock {inputs.get('torch_lock')}"
    try:
        lock = torchlock.parse(str(lock_text), where)
    except torchlock.LockError as exc:
        return step, [str(exc)]
    python = str(inputs.get("python") or plan.get("python") or "")
    packages = [str(p) for p in inputs.get("torch_packages") or []]
    return step, torchlock.lock_problems(lock, step.as_dict(), python, packages, where)


CUDA_PROBE_REPO = "gpufleet-cuda-probe"


def fabricmanager_probe_script(
    el_major: int,
    stream: str,
    fm_names: Iterable[str],
    nvlsm: Iterable[str],
    repo_id: str = CUDA_PROBE_REPO,
) -> str:
    """NVSwitch nodes: the read-only command that asks the CUDA repository for Fabric
    Manager of the driver's version (and NVLSM), for
    :func:`gpufleet.provisioning.fabric_packages.probe_verdict`. Every value is shell-quoted. The
    repository
    goes in under an id of its own (``--repo`` limits the query to it), never the id of the
    cuda-rhel<N> repository nvidia_driver writes, so a rerun never clashes with it. dnf's
    stderr is kept: a failed query says "failed" and quotes dnf. EL8/9: ``dnf module
    info`` lists the stream's artifacts and profiles whether the stream is enabled or not
    (a repoquery would hide them behind modular filtering); EL10: repoquery. The repository
    file (:func:`probe_repo_file`: the URL may carry credentials) comes on stdin."""
    q = shlex.quote
    nvlsm = [q(n) for n in nvlsm]
    lines = [
        "set -o pipefail",
        "err=$(mktemp) || exit 1",
        "repodir=$(mktemp -d) || exit 1",
        'trap \'rm -rf "$err" "$repodir"\' EXIT',
        f'(umask 077; cat > "$repodir"/{q(repo_id)}.repo)',
        f'repo=(--setopt=reposdir="$repodir" --repo={q(repo_id)})',
        "section() {",
        "  local name=$1 out rc=0",
        "  shift",
        '  out=$("$@" 2>"$err") || rc=$?',
        '  echo "=== $name (rc=$rc)"',
        '  if [ "$rc" -eq 0 ]; then printf \'%s\\n\' "$out"; else tail -c 2000 "$err"; echo; fi',
        "}",
        "v=$(rpm -q --qf '%{VERSION}\\n' nvidia-kmod-common 2>/dev/null | tail -n 1) || v=\"\"",
        'echo "installed: $v"',
    ]
    query = "dnf -q -y \"${repo[@]}\" repoquery --qf '%{name} %{version}'"
    if int(el_major) in (8, 9):
        module = q(f"nvidia-driver:{stream}")
        lines.append(f'section artifacts dnf -q -y "${{repo[@]}}" module info {module}')
        lines.append(f'section profiles dnf -q -y "${{repo[@]}}" module info --profile {module}')
        if nvlsm:
            lines.append(f"section packages {query} {' '.join(nvlsm)}")
    else:
        names = ["nvidia-kmod-common", *(q(n) for n in fm_names), *nvlsm]
        lines.append(f"section packages {query} {' '.join(names)}")
    return "\n".join(lines) + "\n"
