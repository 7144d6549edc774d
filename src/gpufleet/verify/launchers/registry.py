"""The launchers gpufleet knows, by their gpufleet_launcher name: every module of this
package (but base and registry) holds one, as ``LAUNCHER``. The CLI's --launcher choices, the
Makefile's LAUNCHER check and the argument spec's choices (a contract test,
tests/unit/verify/test_launchers.py) follow this one list; a new launcher is a new module
here and its two task files in roles/verify/tasks (gpufleet.verify.launchers.base).

``python -m gpufleet.verify.launchers.registry`` prints the names, one per line, the default
first.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from gpufleet.errors import RefusedError
from gpufleet.verify import launchers as _package
from gpufleet.verify.launchers.base import Launcher

#: gpufleet_launcher's default (roles/gpufleet_common/defaults/main.yml)
DEFAULT = "ssh"
_NOT_LAUNCHERS = frozenset({"base", "registry"})


def discover() -> dict[str, Launcher]:
    """Each launcher module's ``LAUNCHER`` by name: the default first, then by name."""
    found: dict[str, Launcher] = {}
    for info in pkgutil.iter_modules(_package.__path__):
        if info.name in _NOT_LAUNCHERS:
            continue
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        launcher = getattr(module, "LAUNCHER", None)
        if not isinstance(launcher, Launcher):
            raise TypeError(f"{module.__name__} holds no LAUNCHER (a Launcher instance)")
        if launcher.name in found:
            raise TypeError(f"two launchers are called {launcher.name!r}")
        found[launcher.name] = launcher
    if DEFAULT not in found:
        raise TypeError(f"the default launcher {DEFAULT!r} is missing")
    return {DEFAULT: found[DEFAULT]} | {k: found[k] for k in sorted(found) if k != DEFAULT}


#: every launcher, by name
LAUNCHERS: dict[str, Launcher] = discover()


def names() -> tuple[str, ...]:
    return tuple(LAUNCHERS)


def get(name: str) -> Launcher:
    """The launcher called ``name``; refused naming the allowed ones otherwise."""
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise RefusedError(
            f"gpufleet_launcher={name!r} is refused -> allowed: {', '.join(names())}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    if sys.argv[1:] if argv is None else argv:
        print("usage: python -m gpufleet.verify.launchers.registry (no arguments)", file=sys.stderr)
        return 2
    print("\n".join(names()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
