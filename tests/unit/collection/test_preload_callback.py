"""gpufleet.core.preload: the collection's filter, test and action plugins are loaded in the
controller's main process (so that forked workers inherit them), and the callback is on."""

from __future__ import annotations

import configparser
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.callback import preload  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "collections" / "ansible_collections" / "gpufleet" / "core" / "plugins"


def test_preload_loads_every_filter_test_and_action_file() -> None:
    assert preload.preload() == []
    for kind in ("filter", "test", "action"):
        for path in sorted((PLUGINS / kind).glob("*.py")):
            name = f"ansible_collections.gpufleet.core.plugins.{kind}.{path.stem}"
            assert name in sys.modules, name
    # and the gpufleet modules behind the filters with them
    assert (
        "gpufleet.report" in sys.modules and "gpufleet.provisioning.fabric_packages" in sys.modules
    )


def test_a_plugin_that_does_not_load_is_named_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.loader import action_loader

    def broken(name: str, *args: object, **kwargs: object) -> None:
        raise ImportError(f"cannot load {name}")

    monkeypatch.setattr(action_loader, "get", broken)
    failed = preload.preload()
    assert failed and all(f.startswith("action ") and "cannot load" in f for f in failed)


def test_the_repository_enables_it() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    enabled = [c.strip() for c in cfg["defaults"]["callbacks_enabled"].split(",")]
    assert "gpufleet.core.preload" in enabled


def test_the_role_files_check_inputs_reads_are_parsed_at_playbook_start() -> None:
    from types import SimpleNamespace

    from ansible_collections.gpufleet.core.plugins.plugin_utils import rolefiles

    rolefiles._CACHE.clear()
    preload.CallbackModule().v2_playbook_on_start(SimpleNamespace(_basedir=str(REPO / "playbooks")))
    parsed = {Path(key[0]) for key in rolefiles._CACHE}
    # the defaults as check_inputs reads them (marked as templates), the rest as they are
    trusted = {Path(key[0]) for key in rolefiles._CACHE if key[3]}
    assert trusted == {p for p in parsed if p.parts[-2:] == ("defaults", "main.yml")}
    for role in ("preflight", "torch_env", "gpufleet_common", "verify"):
        assert REPO / "roles" / role / "meta" / "argument_specs.yml" in parsed, role
        assert REPO / "roles" / role / "defaults" / "main.yml" in parsed, role


def test_the_trees_converge_state_digests_are_hashed_at_playbook_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each role, the plugins and the package, hashed in the main process; a worker that
    digests them then reads no file (the cache answers), and gets the same digest."""
    import gpufleet
    from gpufleet.provisioning import converge_digest as converge

    package = str(Path(gpufleet.__file__).resolve().parent)
    roots = [str(REPO / "roles" / "torch_env"), str(PLUGINS), package]
    converge.clear_digest_cache()
    expect = {root: converge.tree_digest(root) for root in roots}  # read from disk
    converge.clear_digest_cache()
    preload.CallbackModule().v2_playbook_on_start(SimpleNamespace(_basedir=str(REPO / "playbooks")))
    hits = converge._tree_digest.cache_info().hits

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warmed tree was read again")

    monkeypatch.setattr("gpufleet.provisioning.converge_digest.os.walk", no_reading)
    for root, digest in expect.items():
        assert converge.tree_digest(root) == digest
    assert converge._tree_digest.cache_info().hits == hits + len(expect)
    # a path that names the same tree another way hits the same entry
    assert (
        converge.tree_digest(str(REPO / "playbooks" / ".." / "roles" / "torch_env"))
        == expect[str(REPO / "roles" / "torch_env")]
    )
    converge.clear_digest_cache()
