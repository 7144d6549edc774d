"""One exception family for the whole package, caught only at the top (cli.main).

Exit codes (docs/architecture.md): 0 ok, 1 a check or smoke test failed, 2 refused input.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
#: Nothing failed, but a check could not finish (gpufleet health, gpufleet dcgm diag).
EXIT_INCOMPLETE = 3


class GpufleetError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with when this reaches it."""

    exit_code = EXIT_FAILED


class RefusedError(GpufleetError):
    """Input that cannot work (impossible version combination, malformed value)."""

    exit_code = EXIT_REFUSED


class CheckFailed(GpufleetError):
    """A node check or smoke test failed."""

    exit_code = EXIT_FAILED
