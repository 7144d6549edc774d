"""gpufleet lock takes the mirror URL from the environment, so that a URL with credentials
never stands on a command line (ps shows argv to every user of the controller)."""

from __future__ import annotations

import argparse

import pytest

from gpufleet.commands import cmd_lock


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cmd_lock.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["lock", "--torch", "2.13.0", "--output", "torch.lock", *argv])


def test_index_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://site:s3cret@mirror.example/simple"
    monkeypatch.setenv("GPUFLEET_INDEX_URL", url)
    assert parse([]).index_url == url
    # an explicit option still wins
    assert parse(["--index-url", "https://other/simple"]).index_url == "https://other/simple"


def test_no_environment_no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFLEET_INDEX_URL", raising=False)
    assert parse([]).index_url == ""
