"""Helpers for the roles-driver tests: import the in-repo collection, fake dnf/rpm, run plays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from playbook_runner import ansible_env, run_playbook

REPO = Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / "collections"
FAKES = Path(__file__).resolve().parent / "fakes"


def install_collection_finder() -> None:
    """Make `ansible_collections.gpufleet.core...` importable the way Ansible does it."""
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if any(type(f).__name__ == "_AnsibleCollectionFinder" for f in sys.meta_path):
        return
    _AnsibleCollectionFinder(paths=[str(COLLECTIONS)], scan_sys_paths=True)._install()


def fake_pm(tmp_path: Path, state: dict[str, Any]) -> tuple[Path, Path]:
    """Create bin/dnf and bin/rpm (symlinks to fake_pm.py) and the state file."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("dnf", "rpm"):
        link = bindir / name
        if not link.exists():
            link.symlink_to(FAKES / "fake_pm.py")
    state = {"installed": [], "available": [], "modules": {}, "calls": [], **state}
    path = tmp_path / "pm-state.json"
    path.write_text(json.dumps(state), encoding="utf-8")
    return bindir, path


def read_state(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def pkg(
    name: str,
    version: str,
    *,
    release: str = "1.el9",
    arch: str = "x86_64",
    epoch: int = 0,
    provides: list[str] | None = None,
    module: str | None = None,
    stream: str | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "release": release,
        "arch": arch,
        "epoch": epoch,
        "provides": provides or [],
        "module": module,
        "stream": stream,
    }


def ansible_playbook(
    playbook: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: int = 180,
    interpreter: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a play against localhost (local connection); ``interpreter`` passes the venv's
    Python as ansible_python_interpreter (extra var: nothing can override it)."""
    return run_playbook(
        playbook,
        "-c",
        "local",
        *(["-e", f"ansible_python_interpreter={sys.executable}"] if interpreter else []),
        *args,
        inventory="localhost,",
        env=ansible_env(env, json_results=True),
        timeout=timeout,
    )


def write_role_play(
    play: Path,
    role: str,
    facts: dict[str, Any],
    role_vars: dict[str, Any],
    bindir: Path,
    state: Path,
) -> Path:
    """A play on localhost that looks like an EL node (``facts``), runs with the scripted
    dnf/rpm of ``bindir`` first on PATH, and includes ``role`` with ``role_vars``."""
    import yaml

    tasks = [
        {"name": "look like EL", "gpufleet_test_facts": {"facts": facts}},
        {"name": role, "ansible.builtin.include_role": {"name": role}, "vars": role_vars},
    ]
    doc = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "environment": {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_PM_STATE": str(state)},
            "tasks": tasks,
        }
    ]
    play.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return play


def gpg_test_key(home: Path) -> tuple[Path, str]:
    """A throw-away ed25519 signing key in GNUPGHOME ``home``: (armored public key file,
    fingerprint), for the repository-key checks of the driver and toolkit roles."""
    env = dict(os.environ, GNUPGHOME=str(home))
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "gpufleet test <test@gpufleet.invalid>",
            "ed25519",
            "sign",
            "never",
        ],
        env=env,
        check=True,
        capture_output=True,
    )

    def gpg(*args: str) -> str:
        return subprocess.run(
            ["gpg", "--batch", *args], env=env, check=True, capture_output=True, text=True
        ).stdout

    key = home / "test.asc"
    key.write_text(gpg("--armor", "--export"), encoding="utf-8")
    colons = gpg("--with-colons", "--fingerprint")
    # the key generation started a gpg-agent for this home: end it, nothing else uses it
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
    return key, next(x.split(":")[9] for x in colons.splitlines() if x.startswith("fpr"))


def write_results_task(dest: Path, **extra: Any) -> dict[str, Any]:
    """The last task of a block/rescue case play: write the collected ``r`` as JSON to
    ``dest``; ``extra`` adds task keywords (``check_mode: false``)."""
    return {
        "name": "write",
        "ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(dest), "mode": "0644"},
        **extra,
    }
