"""Running commands with clear progress lines and failure messages."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


class TestbedError(RuntimeError):
    """A step failed; the message says what, where, and what to do."""


def say(msg: str) -> None:
    print(f">> {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"!! {msg}", file=sys.stderr, flush=True)


def run(
    cmd: Sequence[str | Path],
    *,
    what: str,
    fix: str = "",
    log: Path | None = None,
    check: bool = True,
    capture: bool = False,
    input_text: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run cmd; on failure raise TestbedError naming `what`, the command, its tail, and `fix`."""
    argv = [str(c) for c in cmd]
    try:
        with contextlib.ExitStack() as stack:
            if log is not None:
                log.parent.mkdir(parents=True, exist_ok=True)
                fh = stack.enter_context(log.open("a"))
                fh.write(f"\n$ {shlex.join(argv)}\n")
                fh.flush()
                output: dict[str, Any] = {"stdout": fh, "stderr": subprocess.STDOUT}
            else:
                output = {"capture_output": True}
            proc = subprocess.run(
                argv, text=True, input=input_text, env=env, timeout=timeout, check=False, **output
            )
    except FileNotFoundError as exc:
        raise TestbedError(
            f"{what}: command not found: {argv[0]}. Run `make testbed-deps` (as root)."
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(
            f"{what}: timed out after {timeout}s: {shlex.join(argv)}. {fix}"
        ) from exc
    if check and proc.returncode != 0:
        if log is not None:
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        else:
            tail = ((proc.stdout or "") + (proc.stderr or ""))[-3000:]
        raise TestbedError(
            f"{what} failed (exit {proc.returncode}): {shlex.join(argv)}\n"
            f"--- last output{f' (full log: {log})' if log else ''} ---\n{tail.rstrip()}\n"
            + (f"--- what to do: {fix}" if fix else "")
        )
    if capture or log is None:
        return proc
    return proc


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.25) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def cmdline(pid: int) -> str | None:
    """Process ``pid``'s command line, arguments joined by spaces (None when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None


def processes() -> Iterator[tuple[int, str]]:
    """(pid, command line) of every process that can be read in /proc."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and (cmd := cmdline(int(proc.name))) is not None:
            yield int(proc.name), cmd
