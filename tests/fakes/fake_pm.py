#!/usr/bin/env python3
"""A scripted stand-in for `dnf` and `rpm` (the name it is called by decides), for the
dnf_cli idempotency tests. State lives in the JSON file $FAKE_PM_STATE:

    {"installed": [pkg...], "available": [pkg...],
     "modules": {"nvidia-driver": {"streams": [...], "enabled": null, "disabled": false}},
     "calls": [[argv0, args...], ...]}

pkg = {"name", "version", "release", "arch", "epoch", "provides": [...], "module", "stream"}.
Only what dnf_cli uses is implemented; anything else exits 64 so that a test notices.
``--nogpgcheck`` or ``gpgcheck=0`` anywhere exits 99.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys

STATE = os.environ["FAKE_PM_STATE"]
REL = re.compile(r"^\s*(\S+)\s*(==|=|>=|<=|<|>)\s*(\S+)\s*$")


def load() -> dict:
    with open(STATE, encoding="utf-8") as fh:
        return json.load(fh)


def save(state: dict) -> None:
    with open(STATE, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=1)


def vkey(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\-]", v))


def nevra(p: dict) -> str:
    return f"{p['name']}-{p.get('epoch', 0)}:{p['version']}-{p['release']}.{p['arch']}"


def nvr(p: dict) -> str:
    return f"{p['name']}-{p['version']}-{p['release']}"


def matches(p: dict, spec: str) -> bool:
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


def visible(state: dict, p: dict) -> bool:
    """Module filtering: a module package is visible only from the enabled stream."""
    mod = p.get("module")
    if not mod:
        return True
    return state["modules"].get(mod, {}).get("enabled") == p.get("stream")


def best(state: dict, spec: str) -> dict | None:
    cands = [p for p in state["available"] if visible(state, p) and matches(p, spec)]
    if not cands:
        return None
    return max(cands, key=lambda p: vkey(p["version"]))


def put(state: dict, p: dict) -> None:
    state["installed"] = [q for q in state["installed"] if q["name"] != p["name"]]
    state["installed"].append(dict(p))


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
            p = best(state, spec)
            if p is None:
                print(f"No match for argument: {spec}")
                print("Error: Unable to find a match", file=sys.stderr)
                return 1
            if nevra(p) not in {nevra(q) for q in state["installed"]}:
                todo.append(p)
        if not todo:
            print("Dependencies resolved.\nNothing to do.\nComplete!")
            return 0
        for p in todo:
            put(state, p)
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


def main() -> int:
    prog = os.path.basename(sys.argv[0])
    if prog == "rpm":
        return rpm(sys.argv[1:])
    if prog == "dnf":
        return dnf(sys.argv[1:])
    return 64


if __name__ == "__main__":
    sys.exit(main())
