"""Run ids for ``make verify``: unique per invocation, validated as data, claimed once.

    gpufleet runid --reports reports [RUN_ID]

prints the run id to use and creates ``reports/<run-id>/`` (``os.mkdir``: exactly one
invocation can claim a folder). Without RUN_ID (or an empty one) a new id is made from the
UTC time to the second plus a random suffix, so two runs started in the same second differ.
A given RUN_ID must match :data:`RUN_ID_PATTERN` in full (``re.fullmatch``), must not be a
reserved name (``latest``) and must not name an existing folder: a run never reads or
mixes with another run's files (issue 17 item 2). Exit 2 with a message on any refusal.
"""

from __future__ import annotations

import datetime
import os
import secrets
from pathlib import Path

from gpufleet.errors import RefusedError
from gpufleet.inputs.known import RUN_ID_PATTERN, RUN_ID_RESERVED


class RunIdError(RefusedError, ValueError):
    """A run id that cannot be used; the message says why (the CLI exits 2)."""


def new_run_id(now: datetime.datetime | None = None) -> str:
    """``YYYYmmddTHHMMSSZ-xxxxxx``: the UTC second plus 24 random bits."""
    t = now or datetime.datetime.now(datetime.UTC)
    return f"{t.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def validate(run_id: str) -> str:
    """``run_id`` when it is usable as a folder name and a playbook variable, else raise."""
    if RUN_ID_PATTERN.fullmatch(run_id) is None:
        raise RunIdError(
            f"RUN_ID {run_id!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if run_id.lower() in RUN_ID_RESERVED:
        raise RunIdError(f"RUN_ID {run_id!r} is reserved (reports/{run_id} has another use)")
    return run_id


def claim(reports: Path, requested: str = "") -> str:
    """Validate or make a run id and create ``reports/<id>/``; refuse an existing one."""
    reports.mkdir(parents=True, exist_ok=True)
    given = requested.strip()
    for _ in range(5):
        run_id = validate(given) if given else new_run_id()
        try:
            os.mkdir(reports / run_id, 0o755)
        except FileExistsError:
            if given:
                raise RunIdError(
                    f"reports/{run_id} already exists: a run id names one run only "
                    "(leave RUN_ID empty for a fresh one)"
                ) from None
            continue
        return run_id
    raise RunIdError("could not make an unused run id in 5 tries")
