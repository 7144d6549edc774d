"""``value is gpufleet.core.single_line``: one line, no control characters, bounded length
(:func:`gpufleet.inputs.boundary.is_single_line`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import gpufleet_required

with gpufleet_required():
    from gpufleet.inputs import boundary


class TestModule:
    """gpufleet.core input boundary tests."""

    def tests(self) -> dict[str, Callable[..., Any]]:
        return {"single_line": boundary.is_single_line}
