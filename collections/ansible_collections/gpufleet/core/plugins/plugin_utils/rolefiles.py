"""Role files (defaults, meta, argument specs) parsed once per controller process.

gpufleet.core.check_inputs reads three small YAML files of every role it checks, for every
node. Ansible's own loader (origin tracking, then a deep copy per read) made that about half
a second per node of worker CPU, in a worker forked per node and task that starts with an
empty cache. Here a file is parsed with PyYAML's C loader and kept in this module; the
preload callback fills the cache in the main process when the playbook starts, so every
forked worker inherits it. A file is read again when its size or mtime changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: (path, mtime, size, templates) -> data; role defaults are kept marked as templates
_CACHE: dict[tuple[str, int, int, bool], Any] = {}
#: the files of a role this module serves
DEFAULTS = "defaults/main.yml"
ROLE_FILES = (DEFAULTS, "meta/main.yml", "meta/argument_specs.yml")


def _trusted(data: Any) -> Any:
    """Mark the strings of role defaults as templates Ansible may render, as its loader
    does for role files (ansible-core 2.19; earlier versions render every string)."""
    try:
        from ansible.template import trust_as_template
    except ImportError:  # pragma: no cover - ansible-core before 2.19
        return data
    if isinstance(data, str):
        return trust_as_template(data)
    if isinstance(data, dict):
        return {k: _trusted(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_trusted(v) for v in data]
    return data


def load(path: Path, templates: bool = False) -> Any:
    """The file's data (None when it does not exist). Raises yaml.YAMLError for YAML that
    only Ansible's loader reads (tags such as !unsafe or !vault): the caller falls back."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size, templates)
    if key not in _CACHE:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
        _CACHE[key] = _trusted(data) if templates else data
    return _CACHE[key]


def warm(role_dirs: Iterable[Path]) -> int:
    """Parse the files of every role under ``role_dirs``; returns how many were read.
    Files it cannot parse are left for the task to read its own way."""
    count = 0
    for d in role_dirs:
        if not d.is_dir():
            continue
        for role in sorted(p for p in d.iterdir() if p.is_dir()):
            for name in ROLE_FILES:
                try:
                    # defaults as check_inputs reads them: marked as templates
                    count += load(role / name, name == DEFAULTS) is not None
                except (OSError, yaml.YAMLError):
                    continue
    return count
