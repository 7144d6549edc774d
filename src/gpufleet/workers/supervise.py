"""Run a command (torchrun) in its own process group under a hard timeout.

    python -m gpufleet.workers.supervise --timeout 300 --pidfile run.pid --log run.log \\
        -- python -m torch.distributed.run ... -m gpufleet.workers.allreduce ...

- the child is started with ``start_new_session`` (its own session and process group);
  its PID (= PGID) is written to ``--pidfile`` so a cleanup task can kill exactly that
  group later (``kill -- -PGID``) and nothing else;
- on timeout the whole group gets SIGTERM, then SIGKILL after ``--grace`` seconds, and the
  exit code is 124 (as coreutils ``timeout``);
- after the child exits, any process still in the group is killed (leftover ranks) and
  reported; exit code is the child's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

EXIT_TIMEOUT = 124


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, grace: float) -> bool:
    """SIGTERM then SIGKILL the group; True if something had to be killed."""
    if not group_alive(pgid):
        return False
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def run(cmd: Sequence[str], timeout: float, grace: float = 5.0,
        pidfile: str = "", log: str = "") -> tuple[int, bool, bool]:
    """(exit code, timed_out, leftovers_killed)."""
    out = open(log, "ab") if log else None  # noqa: SIM115 - closed below
    try:
        proc = subprocess.Popen(
            list(cmd), start_new_session=True, stdout=out, stderr=subprocess.STDOUT if out else None
        )
        if pidfile:
            Path(pidfile).write_text(f"{proc.pid}\n", encoding="utf-8")
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid, grace)
            proc.wait()
            rc = EXIT_TIMEOUT
        leftovers = kill_group(proc.pid, grace)
        return rc, timed_out, leftovers
    finally:
        if out:
            out.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--timeout", type=float, required=True, help="hard limit, seconds")
    p.add_argument("--grace", type=float, default=5.0, help="SIGTERM -> SIGKILL delay")
    p.add_argument("--pidfile", default="")
    p.add_argument("--log", default="")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given after --")
    rc, timed_out, leftovers = run(cmd, args.timeout, args.grace, args.pidfile, args.log)
    if timed_out:
        print(f"ERROR: {cmd[0]} ran past {args.timeout:g}s and was killed (process group "
              "SIGTERM/SIGKILL); a peer is probably dead or unreachable", file=sys.stderr)
    if leftovers:
        print("WARNING: processes were left in the group after the launcher exited; killed",
              file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
