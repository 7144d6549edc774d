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
        torch_source: {source, index_url, find_links, index_root}
        torch_lock: ""                      # controller path of a gpufleet lock
        torch_packages: []                  # what torch_env installs beside torch
        node_python: /usr/bin/python3       # reads a wheelhouse source's find-links
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
    "torch_lock",
    "node_python",
)
_LISTS = ("gpu_archs", "disks", "fabricmanager_packages", "nvlsm_packages", "torch_packages")
_VALID = frozenset((*_BOOLS, *_TEXTS, *_LISTS, "major", "torch_source"))


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = _VALID

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        with gpufleet_required_by(_NAME):
            from gpufleet.planning import osinfo, torch_source
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
        base = inputs["base_repo_baseurl"]
        repo_file = preflight.probe_repo_file(preflight.BASE_PROBE_REPO, base) if base else None
        res = run_plain(
            self, _NAME, argv, in_data=repo_file.encode() if repo_file is not None else None
        )
        if res.get("rc") != 0:
            why = output_tail(res, 1000)
            raise AnsibleActionFail(
                f"{node}: the preflight probe failed (rc {res.get('rc')}): {why or 'no output'}"
                " -> fix: run `lspci -nn -d 10de:` on the node and fix what it reports"
            )
        seen = preflight.observe(res.get("stdout") or "", inputs["disks"])
        inputs["torch_source"] = dict(args.get("torch_source") or {})
        if inputs["torch_lock"]:
            inputs["torch_lock_text"] = self._lock_text(node, inputs["torch_lock"])
        try:
            verdict = preflight.judge(node, inputs, seen)
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from None
        # a wheelhouse source: its find-links must hold the build, unless the env already
        # does (a converged node needs no wheelhouse on a rerun)
        step = verdict.get("torch_step")
        if (
            step
            and step["source"] == "wheelhouse"
            and not torch_source.dist_info_holds(
                seen["installed_torch"], torch_source.TorchInstall(**step)
            )
        ):
            error = self._wheelhouse(node, inputs, step)
            if error:
                verdict["observations"]["torch_step_errors"].append(error)
                verdict["problems"] = preflight.preflight_problems(verdict["observations"])
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

    def _lock_text(self, node: str, path: str) -> str:
        """The lock file's text, read on the controller (where the inventory names it)."""
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except OSError as exc:
            raise AnsibleActionFail(
                f"{node}: gpufleet_torch_lock={path!r} cannot be read on the controller "
                f"({exc.strerror}) -> fix: give the path of a lock `gpufleet lock` wrote, "
                'or "" for none'
            ) from None

    def _wheelhouse(self, node: str, inputs: dict[str, Any], step: dict[str, Any]) -> str:
        """A wheelhouse source: do the node's find-links hold the planned torch wheel?
        One read-only command (the find-links on stdin); the reason it cannot serve the
        build, or ''."""
        import inspect
        import json

        from gpufleet.planning import torch_source
        from gpufleet.provisioning import torch_probe

        settings = torch_source.SourceSettings.from_mapping(inputs["torch_source"])
        python = inputs["node_python"] or "/usr/bin/python3"
        script = inspect.getsource(torch_probe)
        res = run_plain(
            self,
            _NAME,
            [python, "-I", "-c", script, "--find-links"],
            in_data=json.dumps(list(settings.find_links)).encode(),
        )
        try:
            seen = json.loads(str(res.get("stdout") or "").strip().splitlines()[-1])["wheelhouse"]
        except (IndexError, KeyError, TypeError, json.JSONDecodeError):
            raise AnsibleActionFail(
                f"{node}: reading the wheelhouse failed (rc {res.get('rc')}): "
                f"{output_tail(res, 500) or 'no output'}"
            ) from None
        try:
            torch_source.wheelhouse_pin(
                seen.get("names") or [],
                str(step["torch"]),
                str(step["variant"]),
                str(step.get("pypi_variant") or ""),
                settings,
            )
        except torch_source.TorchSourceError as exc:
            unread = "; ".join(seen.get("errors") or [])
            return str(exc) + (f" (could not read: {unread})" if unread else "")
        return ""

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
        from gpufleet.inputs import credentials
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
            el_major, str(choice.get("stream") or ""), fm_names, nvlsm
        )
        repo_file = preflight.probe_repo_file(preflight.CUDA_PROBE_REPO, repo_url)
        res = run_plain(self, _NAME, ["bash", "-c", script], in_data=repo_file.encode())
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
            repo=credentials.split(repo_url).url,  # messages name the mirror, not its password
        )
