"""gpufleet.core.preflight: probe a node read-only in one command and judge it against the
plan (the preflight role's one node step; gpufleet.provisioning.preflight_probe has the script and
the rules).

    - gpufleet.core.preflight:
        distribution: Rocky                 # the facts preflight reads
        major: 9
        architecture: x86_64
        release: Blue Onyx
        kernel: 5.14.0-503.el9.x86_64
        torch: 2.13.0                       # the plan request
        variant: ""                         # "" = the planner chooses
        python: "3.11"
        gpu_archs: []                       # [] = from the PCI bus
        plan_installed_driver: auto
        allow_no_gpu: false
        secure_boot_ok: false
        driver_install: true                # nvidia_driver's settings
        flavor: ""
        branch: ""
        packaging: dkms
        compute_only: false
        fabricmanager: auto
        nvlsm: auto
        wheel_variant: ""                   # torch_env's
        kernel_devel: true                  # query kernel-devel (DKMS)
        base_repo_baseurl: ""
        env_prefix: /opt/gpufleet/env
        disks: [{path, required_mb, variable}]

Runs ``bash -c <gpufleet.provisioning.preflight_probe.PROBE_SCRIPT>`` under the task's environment
(a plain
command: no module shipped), also in check mode (it changes nothing). Fails when the probe
cannot list the PCI devices or the plan request cannot be read, and on the node's problems
(``msg``: one per line). Returns ``target``
(gpufleet.planning.osinfo.el_target of the facts), the observations (``gpus``, ``nvswitches``,
``driver``, ``kernel_devel``, ``kernel_devel_detail``, ``secure_boot``, ``disks``), and from
gpufleet.provisioning.preflight_probe.judge: ``answer`` ({plan, refused}), ``choice``, ``fabric``,
``observations`` and ``problems`` (one message each).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    gpufleet_required_by,
    output_tail,
    run_plain,
)

_NAME = "gpufleet.core.preflight"
_BOOLS = (
    "allow_no_gpu",
    "secure_boot_ok",
    "driver_install",
    "compute_only",
    "kernel_devel",
    "check_fabricmanager",
)
_TEXTS = (
    "distribution",
    "architecture",
    "release",
    "kernel",
    "torch",
    "variant",
    "python",
    "plan_installed_driver",
    "flavor",
    "branch",
    "packaging",
    "fabricmanager",
    "nvlsm",
    "wheel_variant",
    "base_repo_baseurl",
    "env_prefix",
    "cuda_repo_baseurl",
)
_LISTS = ("gpu_archs", "disks", "fabricmanager_packages", "nvlsm_packages")
_VALID = frozenset((*_BOOLS, *_TEXTS, *_LISTS, "major"))


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = _VALID

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        with gpufleet_required_by(_NAME):
            from gpufleet.planning import osinfo
            from gpufleet.provisioning import preflight_probe as preflight
        args = dict(self._task.args)
        node = str(task_vars.get("inventory_hostname", "?"))
        inputs: dict[str, Any] = {k: str(args.get(k) or "") for k in _TEXTS}
        defaults = {"driver_install": True, "check_fabricmanager": True}
        for k in _BOOLS:
            inputs[k] = boolean(args.get(k, defaults.get(k, False)), strict=False)
        for k in _LISTS:
            value = args.get(k) or []
            if not isinstance(value, list):
                raise AnsibleActionFail(f"{_NAME}: {k} must be a list, got {value!r}")
            inputs[k] = value
        try:
            major = int(args.get("major") or 0)
        except (TypeError, ValueError):
            raise AnsibleActionFail(
                f"{_NAME}: major must be an integer, got {args.get('major')!r}"
            ) from None
        inputs["target"] = osinfo.el_target(
            inputs["distribution"], major, inputs["architecture"], inputs["release"]
        )

        argv = preflight.probe_argv(
            inputs["kernel"],
            inputs["kernel_devel"],
            inputs["base_repo_baseurl"],
            inputs["env_prefix"],
            inputs["disks"],
        )
        res = run_plain(self, _NAME, argv)
        if res.get("rc") != 0:
            why = output_tail(res, 1000)
            raise AnsibleActionFail(
                f"{node}: the preflight probe failed (rc {res.get('rc')}): {why or 'no output'}"
                " -> fix: run `lspci -nn -d 10de:` on the node and fix what it reports"
            )
        seen = preflight.observe(res.get("stdout") or "", inputs["disks"])
        try:
            verdict = preflight.judge(node, inputs, seen)
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from None
        fabric, choice = verdict["fabric"], verdict["choice"]
        if (
            fabric["fabricmanager"]
            and inputs["check_fabricmanager"]
            and choice
            and "error" not in choice
        ):
            fm = self._fabricmanager(node, inputs, fabric, choice)
            verdict["fm_verdict"] = fm
            verdict["observations"]["fabricmanager"] = fm
            verdict["problems"] = preflight.preflight_problems(verdict["observations"])
        else:
            verdict["fm_verdict"] = {}
        result.update(seen)
        result.update(verdict)
        result.update(target=inputs["target"], changed=False)
        if verdict["problems"]:
            # the node's every problem, one line each, in this task (a fail task after it
            # would cost a worker process per node on every run)
            result.update(failed=True, msg="\n".join(verdict["problems"]))
        return result

    def _fabricmanager(
        self,
        node: str,
        inputs: dict[str, Any],
        fabric: dict[str, Any],
        choice: dict[str, Any],
    ) -> dict[str, Any]:
        """NVSwitch nodes: does the configured CUDA repository carry Fabric Manager of
        exactly the driver version this node will run (the installed one when it is of the
        wanted branch, else the newest of the branch)? One more read-only command."""
        from gpufleet.provisioning import fabric_packages as fabricpkg
        from gpufleet.provisioning import preflight_probe as preflight

        target = inputs["target"]
        el_major = int(target["el_major"])
        repo_url = "/".join(
            (inputs["cuda_repo_baseurl"].rstrip("/"), target["repo"], target["repo_arch"])
        )
        override = [str(n) for n in inputs["fabricmanager_packages"]]
        fm_names = override or (["nvidia-fabricmanager"] if el_major >= 10 else [])
        nvlsm = ([str(n) for n in inputs["nvlsm_packages"]] or ["nvlsm"]) if fabric["nvlsm"] else []
        script = preflight.fabricmanager_probe_script(
            el_major, repo_url, str(choice.get("stream") or ""), fm_names, nvlsm
        )
        res = run_plain(self, _NAME, ["bash", "-c", script])
        if res.get("rc") != 0:
            why = output_tail(res, 1000)
            raise AnsibleActionFail(
                f"{node}: the Fabric Manager repository probe failed (rc {res.get('rc')}): "
                f"{why or 'no output'}"
            )
        return fabricpkg.probe_verdict(
            res.get("stdout") or "",
            el_major,
            branch=choice.get("branch"),
            stream=choice.get("stream"),
            override=override,
            nvlsm=nvlsm,
            repo=repo_url,
        )
