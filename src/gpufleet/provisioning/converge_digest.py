"""The controller side of the converged fast path: the inputs digest of a role on a node.

A role is skipped on a node (``gpufleet.core.converge_state``, docs/performance.md) only
when this digest equals the one recorded by the role's last full run there *and* the node
still shows what that run left (the node side: the collection's module_utils/converge.py).
The digest covers everything that can change what the role does:

- every variable named ``<role>_*`` or ``gpufleet_*`` (templated: the planner's
  ``gpufleet_plan``, the shared settings, the role's own options), less the role's exports;
- the facts the roles branch on (distribution, release, kernel, architecture);
- the role's extra inputs (values computed from other hosts, such as the firewall's peers);
- the content of the role's directory, of the collection's plugins and of the gpufleet
  package, and of controller files the role ships (the gpufleet wheel).

Values are serialised as canonical JSON (sorted keys); a value that cannot be serialised is
written with ``repr`` so that it still changes the digest when it changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Facts a role's behaviour may depend on; a kernel update, a release upgrade or a new CPU
#: architecture forces a full run.
FACT_KEYS = (
    "architecture",
    "distribution",
    "distribution_major_version",
    "distribution_version",
    "kernel",
    "os_family",
)
#: Variables that steer the fast path itself, not what a role does: a FULL=1 run records the
#: same stamps as a normal one.
NOT_INPUTS = frozenset({"gpufleet_converge_fast", "gpufleet_converge_stamp_dir"})
#: Files of a tree that never change behaviour.
_SKIP_DIRS = frozenset({"__pycache__", ".ruff_cache", ".mypy_cache", ".pytest_cache"})


def relevant_names(names: Iterable[str], role: str, exclude: Iterable[str] = ()) -> list[str]:
    """The variable names that join the role's digest, sorted."""
    if not role or not role.replace("_", "").isalnum():
        raise ValueError(f"role {role!r}: a role name is letters, digits and underscores")
    skip = set(exclude) | NOT_INPUTS
    prefixes = (f"{role}_", "gpufleet_")
    return sorted(n for n in names if n.startswith(prefixes) and n not in skip)


def tree_digest(root: str) -> str:
    """sha256 over the relative paths and contents of every file under root (sorted), or of
    root itself when it is a file. Cached per process by real path: a playbook run reads
    each tree once (the preload callback hashes the roles, the collection's plugins and this
    package in the controller's main process, so that the forked workers inherit them)."""
    return _tree_digest(os.path.realpath(root))


def warm_trees(roots: Iterable[str]) -> int:
    """Hash each tree into the cache; returns how many could be read."""
    count = 0
    for root in roots:
        try:
            tree_digest(root)
        except OSError:
            continue
        count += 1
    return count


def clear_digest_cache() -> None:
    """Forget every tree hashed so far (tests that edit a tree)."""
    _tree_digest.cache_clear()


@lru_cache(maxsize=256)
def _tree_digest(root: str) -> str:
    top = Path(root)
    h = hashlib.sha256()
    if top.is_file():
        h.update(top.read_bytes())
        return h.hexdigest()
    if not top.is_dir():
        return "absent"
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        files.extend(Path(dirpath, f) for f in filenames if not f.endswith((".pyc", ".pyo")))
    for path in sorted(files):
        rel = path.relative_to(top).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def inputs_digest(
    role: str,
    variables: Mapping[str, Any],
    facts: Mapping[str, Any],
    extra: Mapping[str, Any],
    trees: Mapping[str, str],
) -> str:
    """The digest of everything the role is given (see the module docstring)."""
    doc = {
        "role": role,
        "vars": dict(variables),
        "facts": {k: facts.get(k) for k in FACT_KEYS},
        "extra": dict(extra),
        # by label (role, plugins, package, a shipped file), not by path: the same checkout
        # in another directory gives the same digest
        "trees": {label: tree_digest(path) for label, path in trees.items()},
    }
    return hashlib.sha256(canonical(doc).encode()).hexdigest()


def package_digest() -> str:
    """tree_digest of the installed gpufleet package: the controller's and a node env's copy
    must match for verify (gpufleet.verify.workers.gpus --package-digest,
    gpufleet.core.verify_prepare)."""
    import gpufleet  # noqa: PLC0415 - this package itself

    return tree_digest(str(Path(gpufleet.__file__).resolve().parent))
