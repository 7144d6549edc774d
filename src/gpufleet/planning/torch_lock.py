"""A hash-locked closure of the torch step: every wheel pip installs, with its sha256.

The lock is a pip requirements file (``pip install --require-hashes -r torch.lock``), one
``name==version --hash=sha256:...`` per wheel, headed by one comment line of JSON that says
what it was made for (``# gpufleet-lock: {...}``: torch release, variant, the CUDA and NCCL
the build reports, Python, platform, source, the requirements it covers). ``gpufleet lock``
writes it (:mod:`gpufleet.commands.cmd_lock`, from ``pip download`` of the plan's pins);
torch_env installs from it when ``gpufleet_torch_lock`` names it, after
:func:`lock_problems` found it to match the plan. In ``--require-hashes`` mode pip checks
every file against the lock before it installs any, so a wheel whose bytes differ is
refused with the env untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LOCK_SCHEMA = 1
HEADER_PREFIX = "# gpufleet-lock: "
_NAME_NORM = re.compile(r"[-_.]+")
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<op>===|==)\s*(?P<version>\S+)$")
_HASH = re.compile(r"^--hash=sha256:(?P<hex>[0-9a-f]{64})$")
_SPEC_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SPEC_EQ = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;,]+)\s*$")
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class LockError(ValueError):
    """A lock file that cannot be read."""


def normalize(name: str) -> str:
    """PEP 503 name normalisation (``Jinja2`` -> ``jinja2``, ``nvidia_nccl`` ->
    ``nvidia-nccl``)."""
    return _NAME_NORM.sub("-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str  # normalised
    version: str
    hashes: tuple[str, ...]
    exact: bool = False  # === (exactly this version string: an unlabelled torch)

    def line(self) -> str:
        op = "===" if self.exact else "=="
        hashes = "".join(f" \\\n    --hash=sha256:{h}" for h in self.hashes)
        return f"{self.name}{op}{self.version}{hashes}"


@dataclass(frozen=True)
class Lock:
    header: dict[str, Any]
    pins: dict[str, Pin] = field(default_factory=dict)


def wheel_pin(filename: str, sha256: str) -> Pin:
    """The pin of one downloaded wheel (name and version from its file name)."""
    m = _WHEEL.match(filename)
    if not m:
        raise LockError(f"{filename!r} is not a wheel file name (name-version-tags.whl)")
    name = normalize(m.group("name"))
    version = m.group("version")
    return Pin(name, version, (sha256,), exact=name == "torch" and "+" not in version)


def render(header: Mapping[str, Any], pins: Iterable[Pin]) -> str:
    """The lock file's text (pins sorted by name)."""
    head = dict(header, schema=LOCK_SCHEMA)
    lines = [
        "# gpufleet torch lock: pip install --require-hashes -r <this file>",
        "# Written by `gpufleet lock`; torch_env installs from it (gpufleet_torch_lock).",
        HEADER_PREFIX + json.dumps(head, sort_keys=True),
    ]
    lines += [p.line() for p in sorted(pins, key=lambda p: p.name)]
    return "\n".join(lines) + "\n"


def parse(text: str, where: str = "the lock") -> Lock:
    """Read a lock; LockError names ``where`` and the line that is wrong."""
    header: dict[str, Any] | None = None
    pins: dict[str, Pin] = {}
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.startswith(HEADER_PREFIX):
            try:
                value = json.loads(raw[len(HEADER_PREFIX) :])
            except json.JSONDecodeError as exc:
                raise LockError(f"{where}, line {number}: the header is not JSON ({exc})") from None
            if not isinstance(value, dict):
                raise LockError(f"{where}, line {number}: the header is not a JSON object")
            header = value
            continue
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            logical.append((start, pending.strip()))
        pending = ""
    if header is None:
        raise LockError(
            f"{where} has no '{HEADER_PREFIX.strip()}' line: not written by `gpufleet lock`"
        )
    if header.get("schema") != LOCK_SCHEMA:
        raise LockError(
            f"{where}: schema {header.get('schema')!r}, this gpufleet reads {LOCK_SCHEMA}"
        )
    for number, entry in logical:
        words = entry.split()
        m = _PIN.match(words[0]) if words else None
        if not m:
            raise LockError(
                f"{where}, line {number}: {words[0] if words else entry!r} is not pinned "
                "as name==version"
            )
        hashes = []
        for word in words[1:]:
            h = _HASH.match(word)
            if not h:
                raise LockError(
                    f"{where}, line {number}: {word!r} is not --hash=sha256:<64 hex digits>"
                )
            hashes.append(h.group("hex"))
        if not hashes:
            raise LockError(f"{where}, line {number}: {m.group('name')} has no --hash")
        name = normalize(m.group("name"))
        if name in pins:
            raise LockError(f"{where}, line {number}: {name} is pinned twice")
        pins[name] = Pin(name, m.group("version"), tuple(hashes), exact=m.group("op") == "===")
    return Lock(header=header, pins=pins)


def lock_problems(
    lock: Lock,
    install: Mapping[str, Any],
    python: str,
    packages: Sequence[str],
    where: str = "the lock",
) -> list[str]:
    """How ``lock`` fails the torch step it is meant for ([] = it serves it).

    ``install``: :class:`gpufleet.planning.torch_source.TorchInstall` as a dict (the
    plan's release and variant, the CUDA and NCCL the build reports); ``python``: the env's
    X.Y; ``packages``: the other requirements the role installs (each must be pinned by the
    lock, at its version where the requirement names one)."""
    out = []
    h = lock.header
    for key, want in (
        ("torch", install.get("torch")),
        ("variant", install.get("variant")),
        ("cuda", install.get("cuda")),
        ("python", python),
    ):
        if h.get(key) != want:
            out.append(f"{where} was made for {key} {h.get(key)!r}, the plan needs {want!r}")
    torch = lock.pins.get("torch")
    if torch is None:
        out.append(f"{where} pins no torch")
    else:
        release, _, label = torch.version.partition("+")
        if release != install.get("torch") or (label and label != install.get("variant")):
            out.append(
                f"{where} pins torch {torch.version}, the plan needs the {install.get('variant')} "
                f"build of torch {install.get('torch')}"
            )
    for spec in packages:
        m = _SPEC_NAME.match(spec)
        if not m:
            out.append(f"{where}: cannot read the requirement {spec!r}")
            continue
        name = normalize(m.group(1))
        pin = lock.pins.get(name)
        if pin is None:
            out.append(f"{where} pins no {name} (torch_env installs {spec!r})")
            continue
        eq = _SPEC_EQ.match(spec)
        if eq and eq.group(1) != pin.version:
            out.append(f"{where} pins {name} {pin.version}, torch_env installs {spec!r}")
    return out


__all__ = [
    "HEADER_PREFIX",
    "LOCK_SCHEMA",
    "Lock",
    "LockError",
    "Pin",
    "lock_problems",
    "normalize",
    "parse",
    "render",
    "wheel_pin",
]
