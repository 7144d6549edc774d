"""Load the collection's filter, test and action plugins once, in the controller's main process.

ansible-playbook forks a worker per host and task, and a worker loads each plugin its task
needs anew: a template that names one ``gpufleet.core`` filter makes the worker import every
filter file of the collection (Ansible's Jinja2 plugin loader looks through all of them) and
the gpufleet modules behind them. Profiling a converged ``make provision`` on the 3-node
testbed (py-spy over the controller and its workers) put a quarter of the controller's CPU
there. Loaded here, before the first play, the modules are in the main process's
``sys.modules`` and the loaders' caches, and every forked worker inherits them.

The plugins behave the same with or without this callback; it only saves their loading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load gpufleet.core's filter, test and action plugins before workers fork
description:
  - Loads every filter, test and action plugin of the gpufleet.core collection (and the
    gpufleet modules they import), parses the role files that gpufleet.core.check_inputs
    reads and hashes the trees that gpufleet.core.converge_state digests (each role, the
    collection's plugins, the gpufleet package), in the controller's main process when the
    playbook starts, so that the worker forked for each host and task inherits them instead
    of doing that work again.
  - Changes no result; a plugin that fails to load here is left for its task to report.
  - Enabled in the repository's ansible.cfg (C(callbacks_enabled)).
requirements:
  - enabled in callbacks_enabled
"""

_PLUGINS = Path(__file__).resolve().parents[1]
_COLLECTION = "gpufleet.core"
display = Display()


def _stems(kind: str) -> list[str]:
    return sorted(p.stem for p in (_PLUGINS / kind).glob("*.py") if p.stem != "__init__")


def preload() -> list[str]:
    """Load the plugins; returns what could not be loaded (``kind name: error``)."""
    from ansible.plugins.loader import action_loader, filter_loader, test_loader

    failed: list[str] = []
    for kind, loader in (("filter", filter_loader), ("test", test_loader)):
        # one lookup makes the Jinja2 loader load every file of the collection's kind; the
        # name need not exist
        try:
            loader.get_with_context(f"{_COLLECTION}.__gpufleet_preload__")
        except Exception as exc:  # any error: left for the task that uses it
            failed.append(f"{kind}: {exc}")
    for stem in _stems("action"):
        try:
            action_loader.get(f"{_COLLECTION}.{stem}", class_only=True)
        except Exception as exc:  # any error: left for the task that uses it
            failed.append(f"action {stem}: {exc}")
    return failed


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.core.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for problem in preload():
            display.vvv(f"gpufleet.core.preload: not preloaded: {problem}")
        # the role files gpufleet.core.check_inputs reads for every node, found where it
        # looks for them
        from ansible_collections.gpufleet.core.plugins.plugin_utils import rolefiles
        from ansible_collections.gpufleet.core.plugins.plugin_utils.inputs import role_dirs

        dirs = role_dirs(getattr(playbook, "_basedir", None))
        display.vvv(f"gpufleet.core.preload: {rolefiles.warm(dirs)} role files parsed")
        display.vvv(f"gpufleet.core.preload: {warm_digests(dirs)} trees hashed")


def warm_digests(role_dirs: list[Path]) -> int:
    """The trees gpufleet.core.converge_state hashes into a role's inputs digest on every
    node (each role, the collection's plugins, the gpufleet package), hashed once here; 0
    where the gpufleet package is not importable (the task then says so)."""
    try:
        import gpufleet
        from gpufleet.provisioning.converge_digest import warm_trees
    except ImportError:
        return 0
    roots = [str(_PLUGINS), str(Path(gpufleet.__file__).resolve().parent)]
    for d in role_dirs:
        if d.is_dir():
            roots += [str(p) for p in sorted(d.iterdir()) if (p / "tasks").is_dir()]
    return warm_trees(roots)
