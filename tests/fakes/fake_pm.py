#!/usr/bin/env python3
"""A scripted stand-in for `dnf` and `rpm` (the name it is called by decides), for the
dnf_cli idempotency tests. State lives in the JSON file $FAKE_PM_STATE:

    {"installed": [pkg...], "available": [pkg...],
     "modules": {"nvidia-driver": {"streams": [...], "enabled": null, "disabled": false}},
     "calls": [[argv0, args...], ...]}

pkg = {"name", "version", "release", "arch", "epoch", "provides": [...], "module", "stream",
"requires": [names installed with it, newest visible]}.
Only what dnf_cli uses is implemented; anything else exits 64 so that a test notices.
``repoquery --repofrompath=ID,URL`` fails like dnf when ID is one of "repos" (a .repo file
has it) or URL contains "unreachable"; so does a repository file in a directory that
``--setopt=reposdir=...`` adds (the probes' private mirror files), and it records the file's
options and mode in the state ("repo_files").
``--nogpgcheck`` or ``gpgcheck=0`` anywhere exits 99.

``dnf module info [--profile] NAME:STREAM`` prints the stream's artifacts (available packages
of that module and stream) or its profiles (``modules[NAME]["profiles"][STREAM]``) the way
dnf 4 does; ``repoquery --qf '%{name} %{version}'`` prints those two fields; ``rpm -q --qf
FMT NAME`` formats %{NAME} and %{VERSION}. Called as ``systemctl`` it answers show,
is-enabled, enable, start and restart for the units in ``$FAKE_UNIT_DIR`` (state "units":
a service by its bare name, a timer by its full name).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the state file's shape (the docstring above); nothing at run time
    from typing import NotRequired, TypedDict

    class Pkg(TypedDict):
        name: str
        version: str
        release: str
        arch: str
        epoch: NotRequired[int]
        provides: NotRequired[list[str]]
        files: NotRequired[list[str]]
        module: NotRequired[str | None]
        stream: NotRequired[str | None]
        requires: NotRequired[list[str]]  # names installed with it (dnf's dependencies)

    class Module(TypedDict):
        streams: list[str]
        default: NotRequired[str]
        enabled: NotRequired[str | None]
        disabled: NotRequired[bool]
        profiles: NotRequired[dict[str, dict[str, list[str]]]]  # stream -> profile -> rpms

    class State(TypedDict):
        installed: list[Pkg]
        available: list[Pkg]
        modules: dict[str, Module]
        calls: list[list[str]]
        keys: NotRequired[list[str]]  # armored keys rpm --import read
        repos: NotRequired[dict[str, bool]]  # repo id -> enabled (dnf repolist)
        units: NotRequired[dict[str, dict[str, bool]]]  # systemd unit -> {enabled, active}
        repo_files: NotRequired[list[dict[str, str]]]  # the probes' private repository files


STATE = os.environ["FAKE_PM_STATE"]
REL = re.compile(r"^\s*(\S+)\s*(==|=|>=|<=|<|>)\s*(\S+)\s*$")


def load() -> State:
    with open(STATE, encoding="utf-8") as fh:
        state: State = json.load(fh)
    return state


def save(state: State) -> None:
    with open(STATE, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=1)


def vkey(v: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\-]", v))


def nevra(p: Pkg) -> str:
    return f"{p['name']}-{p.get('epoch', 0)}:{p['version']}-{p['release']}.{p['arch']}"


def nvr(p: Pkg) -> str:
    return f"{p['name']}-{p['version']}-{p['release']}"


def matches(p: Pkg, spec: str) -> bool:
    """name, name-version(-release)(.arch) with globs, or a provide (with relation)."""
    m = REL.match(spec)
    if m:
        cap, _, ver = m.groups()
        return any(pr == f"{cap} = {ver}" for pr in p.get("provides", []))
    if spec.startswith("/"):
        return spec in p.get("files", [])
    for cand in (p["name"], f"{p['name']}-{p['version']}", nvr(p), f"{nvr(p)}.{p['arch']}"):
        if fnmatch.fnmatchcase(cand, spec):
            return True
    return spec in p.get("provides", [])


def rpm(args: list[str]) -> int:
    state = load()
    state["calls"].append(["rpm", *args])
    save(state)
    inst = state["installed"]
    if args[:1] == ["--import"]:
        with open(args[1], encoding="utf-8") as fh:
            state.setdefault("keys", []).append(fh.read())
        save(state)
        return 0
    if args[:2] == ["-q", "gpg-pubkey"]:
        keys = state.get("keys", [])
        if not keys:
            print("package gpg-pubkey is not installed")
            return 1
        if "--qf" in args:
            sys.stdout.write("".join(keys))
        return 0
    if args[:1] == ["-qa"]:
        rest = args[1:]
        if rest[:1] == ["--qf"]:
            fmt = rest[1]
            for p in inst:
                if fmt.startswith("%{NAME}-%{EPOCHNUM}"):
                    print(nevra(p))
                elif fmt.startswith("%{NAME} %{VERSION}"):
                    print(f"{p['name']} {p['version']}")
                else:
                    return 64
            return 0
        for p in inst:
            if any(
                fnmatch.fnmatchcase(nvr(p), pat) or fnmatch.fnmatchcase(p["name"], pat)
                for pat in rest
            ):
                print(nvr(p))
        return 0
    if args[:2] == ["-q", "--whatprovides"]:
        spec = args[2]
        hits = [p for p in inst if matches(p, spec)]
        for p in hits:
            print(nvr(p))
        if not hits:
            print(f"no package provides {spec}")
            return 1
        return 0
    if args[:2] == ["-q", "--qf"]:
        fmt, names = args[2], args[3:]
        rc = 0
        for spec in names:
            hits = [p for p in inst if spec in (p["name"], f"{p['name']}-{p['version']}")]
            if not hits:
                print(f"package {spec} is not installed")
                rc = 1
            for p in hits:
                sys.stdout.write(
                    fmt.replace("%{NAME}", p["name"])
                    .replace("%{VERSION}", p["version"])
                    .replace("\\n", "\n")
                )
        return rc
    if args[:1] == ["-q"]:
        spec = args[1]
        hits = [p for p in inst if spec in (p["name"], f"{p['name']}-{p['version']}", nvr(p))]
        if not hits:
            print(f"package {spec} is not installed")
            return 1
        for p in hits:
            print(nvr(p))
        return 0
    return 64


def visible(state: State, p: Pkg) -> bool:
    """Module filtering: a module package is visible only from the enabled stream."""
    mod = p.get("module")
    if not mod:
        return True
    m = state["modules"].get(mod)
    return (m.get("enabled") if m is not None else None) == p.get("stream")


def best(state: State, spec: str) -> Pkg | None:
    cands = [p for p in state["available"] if visible(state, p) and matches(p, spec)]
    if not cands:
        return None
    return max(cands, key=lambda p: vkey(p["version"]))


def put(state: State, p: Pkg) -> None:
    state["installed"] = [q for q in state["installed"] if q["name"] != p["name"]]
    state["installed"].append(p.copy())


def dnf(args: list[str]) -> int:
    state = load()
    state["calls"].append(["dnf", *args])
    save(state)
    if any("nogpgcheck" in a or "gpgcheck=0" in a for a in args):
        print("FORBIDDEN: gpg check disabled", file=sys.stderr)
        return 99
    opts = [a for a in args if a.startswith("-")]
    words = [a for a in args if not a.startswith("-")]
    allowerasing = "--allowerasing" in opts
    if not words:
        return 64
    cmd, rest = words[0], words[1:]
    mods = state["modules"]
    if cmd == "makecache":
        return 0
    repos = state.setdefault("repos", {})
    if cmd == "repolist":
        print("repo id          repo name                 status")
        for rid, enabled in repos.items():
            print(f"{rid:<16} {rid} repository    {'enabled' if enabled else 'disabled'}")
        return 0
    if cmd == "config-manager" and "--set-enabled" in opts:
        for rid in rest:
            if rid not in repos:
                print(f"Error: No matching repo to modify: {rid}.", file=sys.stderr)
                return 1
            repos[rid] = True
        save(state)
        return 0
    if cmd == "module":
        sub, rest = rest[0], rest[1:]
        if sub == "info":
            return module_info(state, args, rest)
        if sub == "list":
            name = rest[0]
            if name not in mods:
                print("Error: No matching Modules to list", file=sys.stderr)
                return 1
            m = mods[name]
            print("Last metadata expiration check: 0:00:01 ago")
            print("cuda-rhel9-x86_64")
            print("Name            Stream            Profiles                     Summary")
            for s in m["streams"]:
                flags = ""
                if s == m.get("default"):
                    flags += "[d]"
                if s == m.get("enabled"):
                    flags += "[e]"
                if m.get("disabled"):
                    flags += "[x]"
                print(f"{name:<15} {s} {flags:<6} default [d], fm, ks, src   Nvidia driver for {s}")
            print("\nHint: [d]efault, [e]nabled, [x]disabled, [i]nstalled")
            return 0
        name, _, stream = rest[0].partition(":")
        m = mods[name]
        if sub == "reset":
            if m.get("enabled") is None and not m.get("disabled"):
                print("Nothing to do.")
                return 0
            m["enabled"], m["disabled"] = None, False
        elif sub == "enable":
            if m.get("disabled"):
                print("Error: module is disabled", file=sys.stderr)
                return 1
            if m.get("enabled") not in (None, stream):
                print(
                    "Error: It is not possible to switch enabled streams of a module",
                    file=sys.stderr,
                )
                return 1
            if m.get("enabled") == stream:
                print("Nothing to do.")
                return 0
            m["enabled"] = stream
        elif sub == "switch-to":
            old = m.get("enabled")
            m["enabled"] = stream
            for p in list(state["installed"]):
                if p.get("module") != name:
                    continue
                new = best(state, p["name"])
                if new is None:
                    if not allowerasing:
                        print(
                            f"Error: {p['name']} has no counterpart in {stream}; "
                            "use --allowerasing",
                            file=sys.stderr,
                        )
                        m["enabled"] = old
                        return 1
                    state["installed"].remove(p)
                else:
                    put(state, new)
        else:
            return 64
        save(state)
        print("Complete!")
        return 0
    if cmd in ("install", "upgrade"):
        todo = []
        for spec in rest:
            hit = best(state, spec)
            if hit is None:
                print(f"No match for argument: {spec}")
                print("Error: Unable to find a match", file=sys.stderr)
                return 1
            if nevra(hit) not in {nevra(q) for q in state["installed"]}:
                todo.append(hit)
        if not todo:
            print("Dependencies resolved.\nNothing to do.\nComplete!")
            return 0
        while todo:  # packages, then their "requires" (names) not installed yet
            p = todo.pop(0)
            put(state, p)
            for req in p.get("requires", []):
                dep = best(state, req)
                if dep and not any(q["name"] == dep["name"] for q in state["installed"]):
                    todo.append(dep)
        save(state)
        print("Complete!")
        return 0
    if cmd == "remove":
        before = len(state["installed"])
        state["installed"] = [p for p in state["installed"] if not any(matches(p, s) for s in rest)]
        save(state)
        print("Complete!" if len(state["installed"]) < before else "Nothing to do.")
        return 0
    if cmd == "repoquery":
        if repofrompath_error(repos, opts):
            return 1
        if "--qf" in args:
            qf = args[args.index("--qf") + 1]
            for spec in [w for w in rest if w != qf]:
                for p in state["available"]:
                    if matches(p, spec):
                        print(qf.replace("%{name}", p["name"]).replace("%{version}", p["version"]))
            return 0
        specs = (
            [a for a in args[args.index("--whatprovides") + 1 :] if not a.startswith("-")]
            if "--whatprovides" in args
            else rest
        )
        for spec in specs:
            for p in state["available"]:
                if matches(p, spec):
                    print(nevra(p))
        return 0
    if cmd == "check-update":
        for spec in rest:
            inst = [p for p in state["installed"] if matches(p, spec)]
            newest = best(state, spec)
            if inst and newest and vkey(newest["version"]) > vkey(inst[0]["version"]):
                return 100
        return 0
    return 64


def _added_repos(opts: list[str]) -> list[tuple[str, str]]:
    """(id, baseurl) of --repofrompath=ID,URL and of the .repo files of --setopt=reposdir
    directories that are not the system's."""
    out = []
    for a in opts:
        if a.startswith("--repofrompath="):
            rid, _, url = a.split("=", 1)[1].partition(",")
            out.append((rid, url))
        elif a.startswith("--setopt=reposdir="):
            for d in a.split("=", 2)[2].split(","):
                if d.startswith("/etc/") or not os.path.isdir(d):
                    continue
                for name in sorted(os.listdir(d)):
                    path = os.path.join(d, name)
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                    rid_m = re.search(r"^\[(.+)\]$", text, re.M)
                    url_m = re.search(r"^baseurl=(.*)$", text, re.M)
                    record_repo_file(path, text)
                    out.append((rid_m.group(1) if rid_m else "?", url_m.group(1) if url_m else ""))
    return out


def record_repo_file(path: str, text: str) -> None:
    """What a probe's private repository file held, for the test to read."""
    state = load()
    state.setdefault("repo_files", []).append(
        {"mode": oct(os.stat(path).st_mode & 0o777), "text": text}
    )
    save(state)


def repofrompath_error(repos: dict[str, bool], opts: list[str]) -> bool:
    """A repository added on the command line: like dnf, refuse an id a .repo file has;
    fail on 'unreachable'."""
    for rid, url in _added_repos(opts):
        if rid in repos:
            print(
                f"Error: Repository '{rid}' is listed more than once in the configuration",
                file=sys.stderr,
            )
            return True
        if "unreachable" in url:
            print(f"Error: Failed to download metadata for repo '{rid}'", file=sys.stderr)
            return True
    return False


def module_info(state: State, args: list[str], rest: list[str]) -> int:
    if repofrompath_error(state.setdefault("repos", {}), [a for a in args if a.startswith("-")]):
        return 1
    name, _, stream = rest[-1].partition(":")
    mod = state["modules"].get(name)
    if mod is None or stream not in mod.get("streams", []):
        print("Error: No matching Modules to list", file=sys.stderr)
        return 1
    if "--profile" in args:
        print(f"Name    : {name}:{stream}:20251130000000:4e9c8a1b:x86_64")
        for prof, rpms in sorted(mod.get("profiles", {}).get(stream, {}).items()):
            for i, r in enumerate(sorted(rpms)):
                print(f"{prof if i == 0 else '':<8}: {r}")
        return 0
    arts = sorted(nevra(p) for p in state["available"]
                  if p.get("module") == name and p.get("stream") == stream)  # fmt: skip
    print(f"Name             : {name}\nStream           : {stream}")
    for i, a in enumerate(arts):
        print(f"{'Artifacts' if i == 0 else '':<17}: {a}")
    print("\nHint: [d]efault, [e]nabled, [x]disabled, [i]nstalled, [a]ctive")
    return 0


def systemctl(args: list[str]) -> int:
    state = load()
    state["calls"].append(["systemctl", *args])
    units = state.setdefault("units", {})
    words = [a for a in args if not a.startswith("-")]
    if not words:
        save(state)
        return 0
    cmd, name = words[0], (words[1] if len(words) > 1 else "")
    full = name if name.endswith((".service", ".timer")) else f"{name}.service"
    unit = full.removesuffix(".service")  # the state's key: a service by its bare name
    present = os.path.exists(os.path.join(os.environ.get("FAKE_UNIT_DIR", "/nonexistent"),
                                          full))  # fmt: skip
    u = units.setdefault(unit, {"enabled": False, "active": False}) if present else None
    rc = 0
    if cmd == "show":
        if u is None:
            print(f"Id={full}\nLoadState=not-found\nActiveState=inactive")
        else:
            print(f"Id={full}\nLoadState=loaded\n"
                  f"ActiveState={'active' if u['active'] else 'inactive'}")  # fmt: skip
    elif cmd == "is-enabled":
        print("enabled" if u and u["enabled"] else "disabled")
        rc = 0 if u and u["enabled"] else 1
    elif cmd in ("enable", "disable", "start", "stop", "restart"):
        if u is None:
            print(f"Failed to {cmd} {unit}.service: Unit not found.", file=sys.stderr)
            rc = 5
        elif cmd in ("enable", "disable"):
            u["enabled"] = cmd == "enable"
        else:
            u["active"] = cmd != "stop"
    elif cmd == "is-active":
        print("active" if u and u["active"] else "inactive")
        rc = 0 if u and u["active"] else 3
    elif cmd == "daemon-reload":
        rc = 0
    else:
        rc = 64
    save(state)
    return rc


def main() -> int:
    prog = os.path.basename(sys.argv[0])
    if prog == "rpm":
        return rpm(sys.argv[1:])
    if prog == "dnf":
        return dnf(sys.argv[1:])
    if prog == "systemctl":
        return systemctl(sys.argv[1:])
    return 64


if __name__ == "__main__":
    sys.exit(main())
