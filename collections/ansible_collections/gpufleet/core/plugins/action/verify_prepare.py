"""gpufleet.core.verify_prepare: what verify needs from a node before it launches anything,
in two commands on the node instead of four module runs.

    - gpufleet.core.verify_prepare:
        manifest: /etc/gpufleet/manifest.json   # the node manifest (may be missing)
        run_dir: /var/lib/gpufleet/verify/<run>/<node>
        python: ""                              # verify_python; empty: from the manifest
        default_python: /opt/gpufleet/env/bin/python
        timeout: 120                            # for counting the GPUs
        env_file: /etc/gpufleet/nccl.env        # the ranks' KEY=VALUE file (verify_env_file)

1. One shell command reads the manifest (base64) and creates the run directory (its parent
   as needed; the directory itself must not exist: a run id names one run only).
2. Unless that failed or the manifest is broken: ``timeout T <python> -m
gpufleet.verify.workers.gpus``
   with the env python (``python``, else the manifest's ``env_python``, else
   ``default_python``), which checks that the env has torch and counts the GPUs the ranks
   will see (CUDA_VISIBLE_DEVICES, with ``env_file`` on top as supervise applies it).

It fails nothing itself: the role's tasks name each problem. Returns ``manifest``
({data, error}: :func:`gpufleet.provisioning.node_env.read_manifest`, the filter the role used on
slurp's
answer), ``python``, ``run_dir_error`` ('' when created), ``gpus`` ({rc, stdout: the count,
stderr}; rc null when not run) and ``package`` ({node, controller, stale}: the digests of the
node env's gpufleet package and of the controller's; verify runs the node's, so they must
match: ``make provision`` installs this checkout's wheel).
"""

from __future__ import annotations

import shlex
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    gpufleet_required_by,
    output_tail,
    require_args,
)

_NAME = "gpufleet.core.verify_prepare"

_STEP1 = r"""
m=$1; d=$2
if [ -e "$m" ]; then
  if c=$(base64 < "$m" | tr -d '\n'); then echo "manifest $c"; else echo "manifest-unreadable"; fi
else echo "manifest-missing"; fi
if err=$(mkdir -p -- "$(dirname -- "$d")" 2>&1 && mkdir -m 0755 -- "$d" 2>&1); then echo "rundir-ok"
else echo "rundir-error $(printf '%s' "$err" | tr '\n' ' ')"; fi
"""


def _step1_parse(stdout: str) -> tuple[str | None, bool, str]:
    """(manifest base64 or None when missing, manifest unreadable, run dir error)."""
    content: str | None = None
    unreadable = False
    run_dir_error = "the node did not say whether the run directory was created"
    for line in stdout.splitlines():
        if line.startswith("manifest "):
            content = line[len("manifest ") :].strip()
        elif line.strip() == "manifest":  # an empty file: base64 prints nothing
            content = ""
        elif line.strip() == "manifest-unreadable":
            unreadable = True
        elif line.strip() == "rundir-ok":
            run_dir_error = ""
        elif line.startswith("rundir-error"):
            run_dir_error = line[len("rundir-error") :].strip() or "mkdir failed"
    return content, unreadable, run_dir_error


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        {"manifest", "run_dir", "python", "default_python", "timeout", "env_file"}
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        require_args(_NAME, args, ("manifest", "run_dir", "default_python"))
        with gpufleet_required_by(_NAME):
            from gpufleet.provisioning import converge_digest as converge
            from gpufleet.provisioning import node_env as nodeenv
        host = str(task_vars.get("inventory_hostname", "?"))
        manifest_path = str(args["manifest"])
        cmd = shlex.join(
            ["sh", "-c", _STEP1, "verify-prepare", manifest_path, str(args["run_dir"])]
        )
        res = self._low_level_execute_command(cmd, sudoable=True)
        content, unreadable, run_dir_error = _step1_parse(res.get("stdout") or "")
        if res.get("rc") != 0 and run_dir_error.startswith("the node did not say"):
            run_dir_error += f" (rc {res.get('rc')}: {output_tail(res, 300, stdout=False)})"
        manifest: dict[str, Any]
        if unreadable:
            manifest = {"data": {}, "error": f"{host}: {manifest_path} cannot be read"}
        else:
            manifest = nodeenv.read_manifest(content, manifest_path, host)
        python = str(args.get("python") or "")
        if not python:
            env_python = manifest["data"].get("env_python")
            python = env_python if isinstance(env_python, str) and env_python else ""
        python = python or str(args["default_python"])
        gpus: dict[str, Any] = {"rc": None, "stdout": "", "stderr": ""}
        package: dict[str, Any] = {"node": "", "controller": "", "stale": False}
        if manifest["error"] is None and not run_dir_error:
            timeout = int(args.get("timeout") or 120)
            argv = [
                "timeout", str(timeout), python, "-m", "gpufleet.verify.workers.gpus",
                "--package-digest"
            ]  # fmt: skip
            if args.get("env_file"):
                argv += ["--env-file", str(args["env_file"])]
            r = self._low_level_execute_command(shlex.join(argv), sudoable=True)
            lines = (r.get("stdout") or "").strip().splitlines()
            gpus = {
                "rc": r.get("rc"),
                "stdout": lines[0].strip() if lines else "",
                "stderr": (r.get("stderr") or "").strip(),
            }
            if r.get("rc") == 0:
                theirs = next((ln.split()[1] for ln in lines[1:] if ln.startswith("gpufleet ")), "")
                ours = converge.package_digest()
                package = {"node": theirs, "controller": ours, "stale": theirs != ours}
        result.update(
            changed=not run_dir_error,
            manifest=manifest,
            python=python,
            run_dir_error=run_dir_error,
            gpus=gpus,
            package=package,
        )
        return result
