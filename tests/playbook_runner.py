"""The one way the tests run ansible-playbook (used by roles_driver_helpers, roles_env_helpers
and test_bad_input): the repository's ansible.cfg, roles and collections, the venv first on
PATH, no colour, no retry files, and nothing inherited from the caller's ANSIBLE_* or PIP_*
variables, so a developer's shell cannot change what a test sees."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: The roles of playbooks/provision.yml, in the order they must run.
PROVISION_ROLES = (
    "python_bootstrap",
    "preflight",
    "nvidia_driver",
    "infiniband",
    "dcgm",
    "cuda_toolkit",
    "torch_env",
    "cluster_network",
    "slurm_health",
    "health_timer",
)


def ansible_env(
    extra: Mapping[str, str] | None = None, *, json_results: bool = False
) -> dict[str, str]:
    """The environment of an ansible run. ``json_results`` prints task results as one JSON
    object per line (``fatal: [h]: FAILED! => {...}``) for tests that parse them; without it
    the result format of ansible.cfg applies. ``extra`` is applied last."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    if json_results:
        env.update(
            ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
            ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        )
    env.update(extra or {})
    return env


#: The role tests run roles on this machine (localhost) against scripted dnf/rpm fakes, whose
#: changes the converged fast path cannot see: every role runs in full, and the stamps go to
#: a directory of this test process, never to the machine's /var/lib/gpufleet. The fast
#: path itself is tested by tests/unit/provisioning/test_converge_digest.py and on the testbed (test_demo.py).
_STAMPS = tempfile.mkdtemp(prefix="gpufleet-test-stamps-")
atexit.register(shutil.rmtree, _STAMPS, True)
FULL_RUN_ARGS = (
    "-e",
    "gpufleet_converge_fast=false",
    "-e",
    f"gpufleet_converge_stamp_dir={_STAMPS}",
)


def run_playbook(
    playbook: Path,
    *args: str,
    inventory: str | Path,
    env: Mapping[str, str],
    timeout: int,
) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i INVENTORY PLAYBOOK ARGS...`` from the repository root; never
    raises on a failed play (the tests assert on rc and output)."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *FULL_RUN_ARGS, *args],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def task_keys(tasks: object) -> set[str]:
    """Every key of every task of a task file's YAML (blocks, rescues and always included):
    the modules and keywords it can run, for tests that prove a file cannot reboot."""
    keys: set[str] = set()
    for task in tasks if isinstance(tasks, list) else []:
        if isinstance(task, dict):
            keys.update(task)
            for nested in ("block", "rescue", "always"):
                keys |= task_keys(task.get(nested))
    return keys
