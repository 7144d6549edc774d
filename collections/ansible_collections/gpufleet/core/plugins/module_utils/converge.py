# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The node side of the converged fast path (the logic behind gpufleet.core.converge_state).

A role that ran in full on a node records a *stamp*: the digest of everything the role was
given (computed on the controller by the action plugin) and an *observation* of what the
role left on the node (its watch list: file contents, path metadata, JSON keys, systemd
unit states, the output of a few cheap commands, and the rpm database's identity). On the
next run the role is skipped when the digest is the same and a fresh observation equals
the recorded one; anything else (inputs changed, a watched file edited, a unit disabled,
any rpm transaction) runs the role in full. A check that does not pass removes the stamp
first, so a full run that fails half way can never leave a stamp behind that skips the
next run.

Python 3.8 compatible (runs on the node's Python): types are in comments, checked by mypy.
"""

from __future__ import absolute_import, division, print_function

import glob
import hashlib
import json
import os
import stat
from typing import TYPE_CHECKING

__metaclass__ = type

if TYPE_CHECKING:  # never true on a node
    from typing import Any, Callable, Dict, List, Tuple  # noqa: F401 - used in type comments

    # runner(argv) -> (rc, stdout, stderr), e.g. AnsibleModule.run_command
    Runner = Callable[[List[str]], Tuple[int, str, str]]

STAMP_SCHEMA = 1
# The rpm database: its directory comes from `rpm --eval %{_dbpath}` (EL8/9 /var/lib/rpm,
# EL10 /usr/lib/sysimage/rpm); these files in it change on every rpm transaction (install,
# update, erase, key import) and not on queries (sqlite's -shm file does, so it is left
# out). The stat of each (size, mtime, inode) is the database's identity.
RPMDB_DIRS = ("/var/lib/rpm", "/usr/lib/sysimage/rpm")
RPMDB_FILES = ("rpmdb.sqlite", "rpmdb.sqlite-wal", "Packages", "Packages.db")
WATCH_KINDS = ("files", "paths", "listings", "json_keys", "services", "commands", "rpmdb")


def _file_digest(path):
    # type: (str) -> str
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stat_or_word(path):
    # type: (str) -> Tuple[Any, str]
    """(lstat result, "") for a path that is neither missing nor a symlink; else (None,
    "absent" or "link -> <target>"): what both observers report for those two."""
    try:
        st = os.lstat(path)
    except OSError:
        return None, "absent"
    if stat.S_ISLNK(st.st_mode):
        return None, "link -> %s" % os.readlink(path)
    return st, ""


def _owner(st):
    # type: (Any) -> str
    return "mode=%o uid=%d gid=%d" % (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def observe_file(path):
    # type: (str) -> str
    """Content and ownership of a file (a symlink: its target), or "absent"."""
    st, word = _stat_or_word(path)
    if st is None:
        return word
    if not stat.S_ISREG(st.st_mode):
        return "not a file (mode %o)" % st.st_mode
    return "sha256:%s %s" % (_file_digest(path), _owner(st))


def observe_path(path):
    # type: (str) -> str
    """Type and ownership of a path (a directory's entries come and go: see listings)."""
    st, word = _stat_or_word(path)
    if st is None:
        return word
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    return "%s %s" % (kind, _owner(st))


def observe_listing(pattern):
    # type: (str) -> Dict[str, str]
    """For each directory matching the glob: a digest of its sorted entry names. A venv's
    site-packages lists one NAME-VERSION.dist-info per package, so any pip install,
    removal or version change shows; no file is read."""
    out = {}
    for path in sorted(glob.glob(pattern)):
        try:
            # bytecode caches come and go with every import (a verify run as root writes
            # site-packages/__pycache__ for the single-file modules): not package state
            names = sorted(n for n in os.listdir(path) if n != "__pycache__")
        except OSError as exc:
            out[path] = "unreadable: %s" % exc
            continue
        out[path] = "%d entries sha256:%s" % (
            len(names),
            hashlib.sha256("\n".join(names).encode("utf-8", "surrogateescape")).hexdigest(),
        )
    return out or {pattern: "no match"}


def observe_json_keys(path, keys):
    # type: (str, List[str]) -> Dict[str, Any]
    """The listed top-level keys of a JSON file (several roles share one manifest; each
    watches its own keys only)."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    if not isinstance(data, dict):
        return {"error": "not a JSON object"}
    return {k: data.get(k, "<absent>") for k in keys}


def observe_service(unit, runner):
    # type: (str, Runner) -> str
    """'<is-enabled> <is-active>' from systemctl (e.g. 'enabled active')."""
    states = []
    for verb in ("is-enabled", "is-active"):
        try:
            rc, out, _err = runner(["systemctl", verb, unit])
        except OSError as exc:
            return "systemctl: %s" % exc
        lines = (out or "").strip().splitlines()
        states.append(lines[-1].strip() if lines else "unknown(rc=%d)" % rc)
    return " ".join(states)


def observe_command(argv, runner):
    # type: (List[str], Runner) -> str
    """rc and a digest of stdout: for state that lives in a daemon (firewalld's runtime)."""
    try:
        rc, out, _err = runner(list(argv))
    except OSError as exc:
        return "cannot run %s: %s" % (argv[0] if argv else "?", exc)
    return "rc=%d stdout-sha256:%s" % (rc, hashlib.sha256((out or "").encode("utf-8")).hexdigest())


def observe_rpmdb(runner):
    # type: (Runner) -> Dict[str, str]
    try:
        rc, out, _err = runner(["rpm", "--eval", "%{_dbpath}"])
    except OSError:
        rc, out = 1, ""
    dirs = [out.strip()] if rc == 0 and out.strip().startswith("/") else list(RPMDB_DIRS)
    found = {}
    for d in dirs:
        for name in RPMDB_FILES:
            path = os.path.join(d, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            found[path] = "size=%d mtime_ns=%d ino=%d" % (st.st_size, st.st_mtime_ns, st.st_ino)
    return found or {"rpmdb": "not found in %s" % ", ".join(dirs)}


def observe(watch, runner):
    # type: (Dict[str, Any], Runner) -> Dict[str, Any]
    """What the watch list names, as it is on this node now."""
    unknown = sorted(set(watch) - set(WATCH_KINDS))
    if unknown:
        raise ValueError(
            "unknown watch kind(s) %s; allowed: %s" % (", ".join(unknown), ", ".join(WATCH_KINDS))
        )
    seen = {}  # type: Dict[str, Any]
    # files: paths or globs (a glob that matches nothing is observed as absent)
    files = set()  # type: set[str]
    for pattern in watch.get("files") or []:
        files.update(glob.glob(pattern) if glob.has_magic(pattern) else [pattern])
    seen["files"] = {p: observe_file(p) for p in sorted(files)}
    seen["paths"] = {p: observe_path(p) for p in sorted(set(watch.get("paths") or []))}
    seen["listings"] = {p: observe_listing(p) for p in sorted(set(watch.get("listings") or []))}
    # a list of {path, keys} (Ansible does not template dict keys)
    seen["json_keys"] = {
        str(item["path"]): observe_json_keys(str(item["path"]), sorted(set(item.get("keys") or [])))
        for item in (watch.get("json_keys") or [])
    }
    seen["services"] = {
        u: observe_service(u, runner) for u in sorted(set(watch.get("services") or []))
    }
    seen["commands"] = {
        name: observe_command(argv, runner)
        for name, argv in sorted((watch.get("commands") or {}).items())
    }
    seen["rpmdb"] = observe_rpmdb(runner) if watch.get("rpmdb", True) else {}
    return seen


def first_difference(old, new, where=""):
    # type: (Any, Any, str) -> str
    """A short human path to the first thing that differs ('' when equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            label = "%s%s" % (where + " " if where else "", key)
            if key not in old:
                return "%s: not in the stamp" % label
            if key not in new:
                return "%s: no longer watched" % label
            diff = first_difference(old[key], new[key], label)
            if diff:
                return diff
        return ""
    if old != new:
        return "%s: was %s, now %s" % (where or "value", _short(old), _short(new))
    return ""


def _short(value):
    # type: (Any) -> str
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def stamp_path(stamp_dir, role):
    # type: (str, str) -> str
    if not role.replace("_", "").isalnum():
        raise ValueError("role %r: a role name is letters, digits and underscores" % role)
    return os.path.join(stamp_dir, role + ".json")


def read_stamp(path):
    # type: (str) -> Dict[str, Any] | None
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != STAMP_SCHEMA:
        return None
    return data


def drift(stamp, watch, runner):
    # type: (Dict[str, Any], Dict[str, Any], Runner) -> str
    """'the node drifted: <first difference>' between the stamp's observation and the
    watch list as observed now; '' when they are equal."""
    diff = first_difference(stamp.get("observed", {}), observe(watch, runner))
    return "the node drifted: %s" % diff if diff else ""


def stamps(stamp_dir):
    # type: (str) -> List[Tuple[str, str, Dict[str, Any]]]
    """(role, path, stamp) for every readable stamp in the directory, by role name; files
    whose name is no role name, unreadable and foreign files are no stamps."""
    if not os.path.isdir(stamp_dir):
        return []
    found = []
    for name in sorted(os.listdir(stamp_dir)):
        role = name[: -len(".json")]
        if not name.endswith(".json") or not role.replace("_", "").isalnum():
            continue
        path = os.path.join(stamp_dir, name)
        stamp = read_stamp(path)
        if stamp is not None:
            found.append((role, path, stamp))
    return found


def check(stamp_dir, role, digest, watch, runner, remove=True):
    # type: (str, str, str, Dict[str, Any], Runner, bool) -> Dict[str, Any]
    """{converged, reason, exports, removed}. Not converged: the stamp is removed (unless
    remove is false: check mode), so that only a full run that ends records a new one."""
    path = stamp_path(stamp_dir, role)
    stamp = read_stamp(path)
    reason = ""
    if stamp is None:
        reason = "no stamp from a completed full run (%s)" % path
    elif stamp.get("digest") != digest:
        reason = (
            "inputs changed since the last full run (variables, plan, facts, role or plugin code)"
        )
    else:
        reason = drift(stamp, watch, runner)
    if not reason and stamp is not None:
        return {
            "converged": True,
            "reason": "",
            "exports": stamp.get("exports", {}),
            "removed": False,
        }
    removed = False
    if remove and stamp is not None:
        try:
            os.unlink(path)
            removed = True
        except OSError:
            pass
    return {"converged": False, "reason": reason, "exports": {}, "removed": removed}


def record(stamp_dir, role, digest, watch, exports, runner, write=True):
    # type: (str, str, str, Dict[str, Any], Dict[str, Any], Runner, bool) -> bool
    """Write the stamp (atomically, mode 0600); True when its content changed. The stamp
    keeps the watch list too, so that survey() can observe it without the role."""
    path = stamp_path(stamp_dir, role)
    data = {
        "schema": STAMP_SCHEMA,
        "role": role,
        "digest": digest,
        "watch": watch,
        "observed": observe(watch, runner),
        "exports": exports,
    }
    text = json.dumps(data, sort_keys=True, indent=1) + "\n"
    try:
        with open(path) as fh:
            if fh.read() == text:
                return False
    except OSError:
        pass
    if not write:
        return True
    if not os.path.isdir(stamp_dir):
        os.makedirs(stamp_dir, 0o700)
    _write_atomic(path, text)
    return True


def memo_runner(runner):
    # type: (Runner) -> Runner
    """The runner, running each argv once: one survey observes several roles' watch lists,
    which share commands (rpm --eval, systemctl on the same unit)."""
    done = {}  # type: Dict[Tuple[str, ...], Tuple[int, str, str]]
    failed = {}  # type: Dict[Tuple[str, ...], OSError]

    def run(argv):
        # type: (List[str]) -> Tuple[int, str, str]
        key = tuple(argv)
        if key in failed:
            raise failed[key]
        if key not in done:
            try:
                done[key] = runner(list(argv))
            except OSError as exc:
                failed[key] = exc
                raise
        return done[key]

    return run


def survey(stamp_dir, runner):
    # type: (str, Runner) -> Dict[str, Any]
    """Every role's check at once, for the roles' gates to use (one node call per node
    instead of one per role). For each stamp: its digest and watch list as recorded, and
    whether a fresh observation of that watch list equals the recorded one (with the
    reason when not) and its exports. ``settled``: every stamp that watches the rpm
    database holds the database as it is now, so settle() would change nothing.

    Read-only: a stamp that would not pass stays; the role's own check (which the gate
    falls back to whenever the survey does not answer yes) removes it."""
    roles = {}  # type: Dict[str, Any]
    run = memo_runner(runner)
    for role, _path, stamp in stamps(stamp_dir):
        if not isinstance(stamp.get("watch"), dict):
            continue  # recorded before stamps kept their watch list: the role checks itself
        try:
            reason = drift(stamp, stamp["watch"], run)
        except ValueError as exc:
            reason = "the node drifted: cannot observe the recorded watch list: %s" % exc
        roles[role] = {
            "digest": stamp.get("digest"),
            "watch": stamp["watch"],
            "converged": not reason,
            "reason": reason,
            "exports": {} if reason else stamp.get("exports", {}),
        }
    # settle's own answer, without writing (the memo runner asks rpm once for both)
    return {"roles": roles, "settled": not settle(stamp_dir, run, write=False)}


def settle(stamp_dir, runner, write=True):
    # type: (str, Runner, bool) -> List[str]
    """At the end of a provisioning run that succeeded on this node: set the rpm database
    identity of every stamp to the database as the run leaves it. A role records its stamp
    when it ends, and later roles of the same run install packages too (CUDA, Python,
    firewalld); those are gpufleet's own transactions, not drift. Any rpm transaction
    after the run still moves the identity and runs the roles in full. Returns the roles
    whose stamp changed."""
    found = stamps(stamp_dir)
    if not found:
        return []
    now = observe_rpmdb(runner)
    settled = []
    for role, path, stamp in found:
        if not (stamp.get("observed") or {}).get("rpmdb"):
            continue  # a role without rpmdb watch (a broken stamp is no stamp at all)
        if stamp["observed"]["rpmdb"] == now:
            continue
        stamp["observed"]["rpmdb"] = now
        settled.append(role)
        if write:
            _write_atomic(path, json.dumps(stamp, sort_keys=True, indent=1) + "\n")
    return settled


def _write_atomic(path, text):
    # type: (str, str) -> None
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
