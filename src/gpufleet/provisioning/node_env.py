"""Node environment helpers for the torch_env role (pure functions, stdlib only).

* checks on mirror URLs (scheme, credentials, plain HTTP needing a trusted host),
* the node manifest merge that keeps reruns at ``changed=0``.

Called through ``collections/ansible_collections/gpufleet/core/plugins/filter/torchenv.py``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from gpufleet.errors import RefusedError
from gpufleet.planning.torch_source import redact_url

MANIFEST_SCHEMA = 1


class EnvConfigError(RefusedError):
    """A torch_env input that cannot work."""


def check_url(
    url: object,
    *,
    name: str,
    schemes: Iterable[str] = ("https", "http", "file"),
    allow_path: bool = False,
) -> str:
    """Return ``url`` if it is usable, else raise EnvConfigError naming ``name``.

    ``allow_path`` accepts an absolute local path (pip ``--find-links`` directories).
    """
    if not isinstance(url, str) or not url.strip():
        raise EnvConfigError(f"{name} must be a non-empty URL")
    text = url.strip()
    if allow_path and text.startswith("/"):
        return text
    parts = urlsplit(text)
    allowed = tuple(schemes)
    if parts.scheme not in allowed:
        hint = " or an absolute path" if allow_path else ""
        raise EnvConfigError(
            f"{name}={redact_url(text)!r} is not a URL with scheme {'/'.join(allowed)}{hint}"
        )
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise EnvConfigError(
                f"{name}={text!r}: a file URL needs an absolute path (file:///srv/...)"
            )
        return text
    if not parts.hostname:
        raise EnvConfigError(f"{name}={redact_url(text)!r} has no host name")
    try:
        _ = parts.port
    except ValueError:
        raise EnvConfigError(f"{name}={redact_url(text)!r} has an invalid port") from None
    return text


def has_credentials(url: object) -> bool:
    """True when a URL carries ``user[:password]@`` (then it must not appear in logs)."""
    if not isinstance(url, str):
        return False
    parts = urlsplit(url.strip())
    return bool(parts.username or parts.password)


def untrusted_http_hosts(urls: Iterable[str], trusted_hosts: Iterable[str]) -> list[str]:
    """Hosts reached over plain HTTP that are not in pip's trusted hosts (pip refuses them)."""
    trusted = {h.strip().lower() for h in trusted_hosts}
    out = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            continue
        host = parts.hostname.lower()
        with_port = f"{host}:{parts.port}" if parts.port else host
        if host not in trusted and with_port not in trusted and with_port not in out:
            out.append(with_port)
    return out


def merge_manifest(existing: object, updates: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The node manifest after one provisioning role wrote its keys.

    Two roles write ``/etc/gpufleet/manifest.json`` (torch_env its env keys,
    cluster_network its network keys); each merges its own keys over the file's current
    content so neither drops the other's. ``provisioned_at`` changes only when some
    other key changed, so a rerun that changes nothing rewrites an identical file and
    Ansible reports ``changed=0``.
    """
    old: dict[str, Any] = dict(existing) if isinstance(existing, Mapping) else {}
    merged = {**old, **updates, "schema": MANIFEST_SCHEMA}
    merged.pop("provisioned_at", None)
    before = {k: v for k, v in old.items() if k != "provisioned_at"}
    if before == merged and old.get("provisioned_at"):
        merged["provisioned_at"] = old["provisioned_at"]
    else:
        merged["provisioned_at"] = now
    return dict(sorted(merged.items()))


def read_manifest(content_b64: object, path: str, node: str) -> dict[str, Any]:
    """Parse a slurped manifest -> ``{"data": dict, "error": str | None}``.

    ``content_b64`` is what ``ansible.builtin.slurp`` returned (base64; empty or missing
    when the file does not exist). A file that is not a JSON object (truncated by a full
    disk, invalid JSON, a list or a string) gives ``data`` ``{}`` and an ``error`` that
    names the node and the file, so provisioning can rebuild it and verify can say which
    file is broken instead of failing with a bare JSON error.
    """
    if content_b64 is None or content_b64 == "":
        return {"data": {}, "error": None}
    where = f"{node}: {path}"
    try:
        text = base64.b64decode(str(content_b64), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        return {"data": {}, "error": f"{where} is not readable text ({exc})"}
    if not text.strip():
        return {"data": {}, "error": f"{where} is empty"}
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"data": {}, "error": f"{where} is not valid JSON (truncated?): {exc}"}
    if not isinstance(data, dict):
        kind = type(data).__name__
        return {"data": {}, "error": f"{where} holds a JSON {kind}, not an object"}
    return {"data": data, "error": None}
