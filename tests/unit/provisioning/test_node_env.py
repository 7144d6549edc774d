"""gpufleet.provisioning.node_env: mirror URL checks, manifest merge (the torch build per
source and variant: tests/unit/planning/test_torch_source.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gpufleet.planning.torch_source import redact_url
from gpufleet.provisioning import node_env as nodeenv
from gpufleet.provisioning.node_env import EnvConfigError


@pytest.mark.parametrize(
    ("url", "allow_path"),
    [
        ("https://pypi.org/simple", False),
        ("http://mirror:8080/simple", False),
        ("file:///srv/pypi/simple", False),
        ("https://user:tok@nexus.example/repository/pypi/simple", False),
        ("/srv/wheels", True),
    ],
)
def test_check_url_accepts(url: str, allow_path: bool) -> None:
    assert nodeenv.check_url(url, name="x", allow_path=allow_path) == url


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://mirror/simple", "scheme"),
        ("pypi.org/simple", "scheme"),
        ("https:///simple", "no host name"),
        ("https://mirror:99999/simple", "invalid port"),
        ("file://relative/path", "absolute path"),
        ("", "non-empty"),
        ("/srv/wheels", "scheme"),
    ],
)
def test_check_url_refuses_naming_the_variable(url: str, fragment: str) -> None:
    with pytest.raises(EnvConfigError, match="gpufleet_pip_index_url") as info:
        nodeenv.check_url(url, name="gpufleet_pip_index_url")
    assert fragment in str(info.value)


def test_refusal_never_shows_credentials() -> None:
    with pytest.raises(EnvConfigError) as info:
        nodeenv.check_url("ftp://user:s3cret@mirror/simple", name="x")
    assert "s3cret" not in str(info.value)


def test_credentials_detection_and_redaction() -> None:
    url = "https://user:s3cret@nexus.example:8443/simple"
    assert nodeenv.has_credentials(url)
    assert not nodeenv.has_credentials("https://nexus.example/simple")
    assert redact_url(url) == "https://***@nexus.example:8443/simple"


def test_untrusted_http_hosts() -> None:
    urls = ["http://mirror:8080/simple", "https://secure/simple", "http://other/x", "/srv/w"]
    assert nodeenv.untrusted_http_hosts(urls, ["mirror:8080"]) == ["other"]
    assert nodeenv.untrusted_http_hosts(urls, ["mirror", "other"]) == []


def test_manifest_merge_keeps_other_writers_keys_and_timestamp() -> None:
    old = {"schema": 1, "node": "n1", "cluster_address": "10.0.0.1", "provisioned_at": "T0"}
    merged = nodeenv.merge_manifest(old, {"node": "n1", "env_torch": "2.13.0+cpu"}, "T1")
    assert merged["cluster_address"] == "10.0.0.1"
    assert merged["provisioned_at"] == "T1"  # something changed
    again = nodeenv.merge_manifest(merged, {"node": "n1", "env_torch": "2.13.0+cpu"}, "T2")
    assert again == merged  # nothing changed: same content, same timestamp


def test_manifest_merge_from_nothing() -> None:
    merged = nodeenv.merge_manifest(None, {"node": "n1"}, "T1")
    assert merged == {"node": "n1", "provisioned_at": "T1", "schema": 1}


def test_manifest_keys_are_sorted() -> None:
    merged: dict[str, Any] = nodeenv.merge_manifest({}, {"b": 1, "a": 2}, "T")
    assert list(merged) == sorted(merged)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"schema": 1, "node": "n1", "env_pyt', "is not valid JSON (truncated?)"),
        ("\x00\x00\x00", "is not valid JSON"),
        ("   \n", "is empty"),
        ('["a list"]', "holds a JSON list, not an object"),
        ('"text"', "holds a JSON str, not an object"),
    ],
)
def test_read_manifest_names_node_and_file_of_a_broken_one(text: str, words: str) -> None:
    got = nodeenv.read_manifest(_b64(text), "/etc/gpufleet/manifest.json", "node2")
    assert got["data"] == {}
    assert got["error"].startswith("node2: /etc/gpufleet/manifest.json ")
    assert words in got["error"]


def test_read_manifest_not_base64() -> None:
    got = nodeenv.read_manifest("%%%not-base64", "/m.json", "n1")
    assert got["data"] == {} and "n1: /m.json is not readable text" in got["error"]


def test_read_manifest_good_and_missing() -> None:
    good = {"schema": 1, "node": "n1", "env_python": "/opt/gpufleet/env/bin/python"}
    assert nodeenv.read_manifest(_b64(json.dumps(good)), "/m.json", "n1") == {
        "data": good,
        "error": None,
    }
    assert nodeenv.read_manifest("", "/m.json", "n1") == {"data": {}, "error": None}
    assert nodeenv.read_manifest(None, "/m.json", "n1") == {"data": {}, "error": None}
