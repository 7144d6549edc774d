# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Drive the dnf command line with real idempotency (the logic behind gpufleet.core.dnf_cli).

Why: ansible-core >= 2.17 cannot use EL8's platform Python 3.6, and EL8's dnf Python
bindings exist only for 3.6, so ``ansible.builtin.dnf`` cannot manage EL8 from the pinned
ansible-core. The dnf and rpm *commands* work from any interpreter.

Idempotency: the rpm database and ``dnf module list`` are queried first; dnf runs only when
something is missing / enabled differently; ``changed`` is computed by comparing the rpm
database (NEVRAs) and the module state before and after, so a dnf run that did nothing
reports no change. GPG checking is never weakened: no option of this module adds
``--nogpgcheck`` or ``gpgcheck=0``.

``runner(argv) -> (rc, stdout, stderr)`` is injected so that tests drive fake dnf/rpm
executables. Python 3.8 compatible: the types are in type comments (checked by mypy in
`make lint`), and the names they use exist only while type checking.
"""

from __future__ import absolute_import, division, print_function

import fnmatch
import re
from typing import TYPE_CHECKING

__metaclass__ = type

if TYPE_CHECKING:  # never true on a node: nothing below is imported or evaluated there
    from typing import Callable, TypedDict

    # runner(argv) -> (rc, stdout, stderr), e.g. AnsibleModule.run_command
    Runner = Callable[[list[str]], tuple[int, str, str]]

    class Params(TypedDict, total=False):
        """The module's parameters (plugins/modules/dnf_cli.py argument_spec)."""

        name: list[str]
        state: str
        module_stream: str | None
        module_action: str
        allowerasing: bool
        enablerepo: list[str]
        disablerepo: list[str]
        install_weak_deps: bool
        update_cache: bool

    class ModuleState(TypedDict):
        streams: list[str]
        enabled: str | None
        disabled: bool

    class Result(TypedDict):
        """What the module returns (its RETURN documentation, plus changed and msg)."""

        changed: bool
        msg: str
        module_before: str | None
        module_after: str | None
        installed: list[str]
        removed: list[str]
        commands: list[list[str]]
        to_install: list[str]
        to_remove: list[str]


STATES = ("present", "absent", "latest")
MODULE_ACTIONS = ("enable", "switch-to", "reset")
_REL = re.compile(r"^\s*(\S+)\s*(==|=|<=|>=|<|>)\s*(\S+)\s*$")
_GLOB = re.compile(r"[*?\[]")
_FLAG = re.compile(r"^(\[[a-z]\])+$")
_STREAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
RPM_QF = "%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}\\n"
FORBIDDEN = ("--nogpgcheck", "gpgcheck=0", "gpgcheck=false", "gpgcheck=False")


# Known dnf failures -> what to do (the raw dnf output is kept in the message above it).
_REMEDIES = (
    (
        ("GPG check FAILED", "not correct for this package", "public key for", "NOKEY"),
        "a package is not signed by the key pinned for its repository: the mirror serves a "
        "package signed by another key (tampered, stale or wrong mirror). Do not disable "
        "gpgcheck; fix the mirror, or pin the right key and its fingerprint in the inventory. "
        "Nothing was installed (dnf checks signatures before the transaction).",
    ),
    (
        (
            "Cannot download",
            "Curl error",
            "Failed to download metadata",
            "Cannot retrieve repository",
            "Connection refused",
            "Could not resolve host",
            "No more mirrors to try",
        ),
        "the node cannot reach a repository: check that the mirror is up and reachable from "
        "this node (baseurl in /etc/yum.repos.d, proxy, firewall, DNS), then rerun. Nothing "
        "was installed (dnf downloads every package before the transaction).",
    ),
)


def remedy(output):
    # type: (str) -> str
    """The advice for a known dnf failure in ``output``, else ''."""
    for needles, advice in _REMEDIES:
        if any(n in output for n in needles):
            return advice
    return ""


class DnfCliError(Exception):
    def __init__(self, msg, **extra):
        # type: (str, **object) -> None
        super(DnfCliError, self).__init__(msg)
        self.msg = msg
        self.extra = extra


def normalize_spec(spec):
    # type: (object) -> str
    """'kernel-devel-uname-r == 4.18.0-553.el8.x86_64' -> 'kernel-devel-uname-r = 4.18...'."""
    spec = str(spec).strip()
    m = _REL.match(spec)
    if m:
        op = "=" if m.group(2) == "==" else m.group(2)
        return "%s %s %s" % (m.group(1), op, m.group(3))
    return spec


def is_relation(spec):
    # type: (str) -> bool
    return _REL.match(spec) is not None


def is_glob(spec):
    # type: (str) -> bool
    return _GLOB.search(spec) is not None


def split_nevra(entry):
    # type: (str) -> tuple[str, str, str, str]
    """'nvidia-open-3:580.95.05-1.el10.x86_64' (RPM_QF) -> (name, version, release, arch)."""
    ne, _, vra = entry.partition(":")
    name = ne.rsplit("-", 1)[0]
    vr, _, arch = vra.rpartition(".")
    version, _, release = vr.rpartition("-")
    return name, version, release, arch


def glob_matches(entry, pattern):
    # type: (str, str) -> bool
    name, version, release, arch = split_nevra(entry)
    forms = (
        name,
        "%s-%s" % (name, version),
        "%s-%s-%s" % (name, version, release),
        "%s-%s-%s.%s" % (name, version, release, arch),
        "%s.%s" % (name, arch),
    )
    return any(fnmatch.fnmatchcase(form, pattern) for form in forms)


def parse_module_list(text, name):
    # type: (str, str) -> dict[str, set[str]]
    """Parse `dnf module list NAME` output -> {stream: set(flags)} for module NAME.

    Flags: d (default), e (enabled), x (disabled), i (installed).
    """
    streams = {}  # type: dict[str, set[str]]
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) < 2 or tokens[0] != name:
            continue
        stream = tokens[1]
        flags = set()  # type: set[str]
        for tok in tokens[2:]:
            if not _FLAG.match(tok):
                break
            flags.update(re.findall(r"\[([a-z])\]", tok))
        streams.setdefault(stream, set()).update(flags)
    return streams


def split_module_spec(spec):
    # type: (object) -> tuple[str, str | None]
    """'nvidia-driver:580-open' -> ('nvidia-driver', '580-open'); 'nvidia-driver' -> (.., None)."""
    spec = str(spec).strip()
    if spec.startswith("@"):
        spec = spec[1:]
    name, _, rest = spec.partition(":")
    stream = rest.split("/")[0] or None
    if not name or not _STREAM.match(name) or (stream is not None and not _STREAM.match(stream)):
        raise DnfCliError("module_stream %r is not NAME or NAME:STREAM" % spec)
    return name, stream


class DnfCli:
    """One invocation: optional module stream step, then packages."""

    def __init__(self, runner, check_mode=False, dnf="dnf", rpm="rpm"):
        # type: (Runner, bool, str, str) -> None
        self.runner = runner
        self.check_mode = check_mode
        self.dnf = dnf
        self.rpm = rpm
        # argv of every state-changing command run (or planned in check mode)
        self.commands = []  # type: list[list[str]]

    # -- queries (read-only, also run in check mode) ---------------------------------------
    def _run(self, argv):
        # type: (list[str]) -> tuple[int, str, str]
        for arg in argv:
            if any(f in arg for f in FORBIDDEN):
                raise DnfCliError("refusing to run %r: GPG checking is never disabled" % arg)
        return self.runner(argv)

    def rpmdb(self):
        # type: () -> set[str]
        rc, out, err = self._run([self.rpm, "-qa", "--qf", RPM_QF])
        if rc != 0:
            raise DnfCliError("rpm -qa failed: %s" % (err or out).strip())
        return {line.strip() for line in out.splitlines() if line.strip()}

    def installed(self, spec):
        # type: (str) -> bool
        """True when an installed package matches the name / NEVRA / glob / provide spec."""
        if is_glob(spec) and not is_relation(spec):
            # `rpm -qa PATTERN` matches the name only (rpm 4.16+), so "nvidia-open-580.*" would
            # never match; match like dnf does: name, name-version, -release, .arch.
            return any(glob_matches(entry, spec) for entry in self.rpmdb())
        if not is_relation(spec) and not spec.startswith("/"):
            rc, _, _ = self._run([self.rpm, "-q", spec])
            if rc == 0:
                return True
        rc, _, _ = self._run([self.rpm, "-q", "--whatprovides", spec])
        return rc == 0

    def module_state(self, name, base):
        # type: (str, list[str]) -> ModuleState
        rc, out, err = self._run([self.dnf, "-q", "-y"] + base + ["module", "list", name])
        if rc != 0:
            raise DnfCliError(
                "dnf module list %s failed (is the repository that carries module %s "
                "configured?): %s" % (name, name, (err or out).strip())
            )
        streams = parse_module_list(out, name)
        if not streams:
            raise DnfCliError("no module %s in the enabled repositories" % name)
        enabled = sorted(s for s, f in streams.items() if "e" in f)
        disabled = any("x" in f for f in streams.values())
        return {
            "streams": sorted(streams),
            "enabled": enabled[0] if enabled else None,
            "disabled": disabled,
        }

    def updates_available(self, names, base):
        # type: (list[str], list[str]) -> bool
        rc, out, err = self._run([self.dnf, "-q", "-y"] + base + ["check-update"] + names)
        if rc not in (0, 100):
            raise DnfCliError("dnf check-update failed: %s" % (err or out).strip())
        return rc == 100

    # -- changes ---------------------------------------------------------------------------
    def _change(self, argv):
        # type: (list[str]) -> tuple[str, str]
        self.commands.append(argv)
        if self.check_mode:
            return "", ""
        rc, out, err = self._run(argv)
        if rc != 0:
            text = (err or out).strip()[-4000:]
            hint = remedy(err + "\n" + out)
            raise DnfCliError(
                "%s failed (rc=%d): %s%s"
                % (" ".join(argv), rc, text, ("\nWhat to do: " + hint) if hint else ""),
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return out, err

    def base_opts(self, p):
        # type: (Params) -> list[str]
        opts = []  # type: list[str]
        for repo in p.get("disablerepo") or []:
            opts.append("--disablerepo=%s" % repo)
        for repo in p.get("enablerepo") or []:
            opts.append("--enablerepo=%s" % repo)
        if p.get("install_weak_deps") is False:
            opts.append("--setopt=install_weak_deps=False")
        return opts

    def run(self, p):
        # type: (Params) -> Result
        """p: module parameters. Returns the result dict (changed, msg, ...)."""
        state = p.get("state") or "present"
        if state not in STATES:
            raise DnfCliError("state=%r: one of %s" % (state, ", ".join(STATES)))
        names = [normalize_spec(n) for n in (p.get("name") or []) if str(n).strip()]
        base = self.base_opts(p)
        write = [self.dnf, "-y"] + base
        if p.get("allowerasing"):
            write.append("--allowerasing")
        if p.get("update_cache") and not self.check_mode:
            self._run([self.dnf, "-q", "-y"] + base + ["makecache", "--refresh"])

        result = {
            "changed": False,
            "msg": "",
            "module_before": None,
            "module_after": None,
            "installed": [],
            "removed": [],
            "commands": self.commands,
            "to_install": [],
            "to_remove": [],
        }  # type: Result
        msgs = []  # type: list[str]
        before_db = None  # type: set[str] | None

        module_spec = p.get("module_stream")
        action = p.get("module_action") or "enable"
        if module_spec:
            if action not in MODULE_ACTIONS:
                raise DnfCliError(
                    "module_action=%r: one of %s" % (action, ", ".join(MODULE_ACTIONS))
                )
            mname, stream = split_module_spec(module_spec)
            if action != "reset" and not stream:
                raise DnfCliError("module_action=%s needs module_stream NAME:STREAM" % action)
            st = self.module_state(mname, base)
            result["module_before"] = st["enabled"]
            if action != "reset" and stream not in st["streams"]:
                raise DnfCliError(
                    "module %s has no stream %s (available: %s)"
                    % (mname, stream, ", ".join(st["streams"]))
                )
            if before_db is None and not self.check_mode:
                before_db = self.rpmdb()
            if action == "reset":
                if st["enabled"] or st["disabled"]:
                    self._change(write + ["module", "reset", mname])
                    msgs.append("module %s reset" % mname)
            elif st["enabled"] == stream:
                pass
            elif st["enabled"] is None:
                if st["disabled"]:
                    self._change(write + ["module", "reset", mname])
                self._change(write + ["module", "enable", "%s:%s" % (mname, stream)])
                msgs.append("module %s:%s enabled" % (mname, stream))
            elif action == "enable":
                raise DnfCliError(
                    "module %s has stream %s enabled, not %s: use module_action: switch-to "
                    "(with allowerasing when the flavour changes)" % (mname, st["enabled"], stream)
                )
            else:
                self._change(write + ["module", "switch-to", "%s:%s" % (mname, stream)])
                msgs.append("module %s switched %s -> %s" % (mname, st["enabled"], stream))
            if self.check_mode:
                result["module_after"] = None if action == "reset" else stream
            else:
                after = self.module_state(mname, base)
                result["module_after"] = after["enabled"]
                if action != "reset" and after["enabled"] != stream:
                    raise DnfCliError(
                        "module %s: stream %s is still not enabled after dnf ran (enabled: %s)"
                        % (mname, stream, after["enabled"])
                    )
                if after["enabled"] != st["enabled"] or (st["disabled"] and not after["disabled"]):
                    result["changed"] = True

        if names:
            if state in ("present", "latest"):
                missing = [n for n in names if not self.installed(n)]
                present = [n for n in names if n not in missing]
                result["to_install"] = missing
                if missing:
                    if before_db is None and not self.check_mode:
                        before_db = self.rpmdb()
                    self._change(write + ["install"] + missing)
                    msgs.append("installed %s" % ", ".join(missing))
                if state == "latest" and present and self.updates_available(present, base):
                    if before_db is None and not self.check_mode:
                        before_db = self.rpmdb()
                    self._change(write + ["upgrade"] + present)
                    msgs.append("upgraded %s" % ", ".join(present))
            else:
                installed = [n for n in names if self.installed(n)]
                result["to_remove"] = installed
                if installed:
                    if before_db is None and not self.check_mode:
                        before_db = self.rpmdb()
                    self._change(write + ["remove"] + installed)
                    msgs.append("removed %s" % ", ".join(installed))

        if self.check_mode:
            result["changed"] = bool(self.commands)
        elif before_db is not None:
            after_db = self.rpmdb()
            result["installed"] = sorted(after_db - before_db)
            result["removed"] = sorted(before_db - after_db)
            if result["installed"] or result["removed"]:
                result["changed"] = True
            if state in ("present", "latest"):
                still = [n for n in result["to_install"] if not self.installed(n)]
                if still:
                    raise DnfCliError(
                        "dnf finished but %s is still not installed" % ", ".join(still),
                        commands=self.commands,
                    )
        if not msgs:
            msgs.append("nothing to do")
        result["msg"] = ("would: " if self.check_mode and self.commands else "") + "; ".join(msgs)
        return result
