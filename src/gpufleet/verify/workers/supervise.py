"""Run a command (torchrun) in its own process group under a hard timeout.

    python -m gpufleet.verify.workers.supervise --timeout 300 --pidfile run.pid --log run.log \\
        -- python -m torch.distributed.run ... -m gpufleet.verify.workers.allreduce ...

- the child is started with ``start_new_session`` (its own session and process group);
  its PID (= PGID) is written to ``--pidfile`` so a cleanup task can kill exactly that
  group later (``kill -- -PGID``) and nothing else;
- on timeout the whole group gets SIGTERM, then SIGKILL after ``--grace`` seconds, and the
  exit code is 124 (as coreutils ``timeout``);
- after the child exits, any process still in the group is killed (leftover ranks) and
  reported; exit code is the child's;
- SIGTERM, SIGINT or SIGHUP to the supervisor (Slurm cancelling the job step, an operator)
  is passed on as the group's SIGTERM/SIGKILL before it exits with 128 + the signal number:
  torchrun runs in a session of its own, so without this it would outlive its supervisor.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.planning.network import read_env_file

EXIT_TIMEOUT = 124
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _signal0(kill: Callable[[int, int], None], ident: int) -> str:
    """Signal 0 through ``kill`` (os.kill, os.killpg): "gone", "foreign" (there, another
    user's: not ours to signal) or "ours"."""
    try:
        kill(ident, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "foreign"
    return "ours"


def group_alive(pgid: int) -> bool:
    return _signal0(os.killpg, pgid) != "gone"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as gone)."""
    found = _signal0(os.kill, pid)
    if found != "ours":
        return found == "foreign"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


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
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return True


def run(
    cmd: Sequence[str],
    timeout: float,
    *,
    grace: float = 5.0,
    pidfile: str = "",
    log: str = "",
    env_file: str = "",
) -> tuple[int, bool, bool]:
    """(exit code, timed_out, leftovers_killed)."""
    out = open(log, "ab") if log else None  # noqa: SIM115 - closed below
    env = dict(os.environ)
    extra = read_env_file(env_file) if env_file else {}
    env.update(extra)
    try:
        if out and extra:
            out.write(f"supervise: environment from {env_file}: {sorted(extra)}\n".encode())
            out.flush()
        proc = subprocess.Popen(
            list(cmd),
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            env=env,
        )
        if pidfile:
            Path(pidfile).write_text(f"{proc.pid}\n", encoding="utf-8")

        def stop(signum: int, _frame: object) -> None:
            for s in STOP_SIGNALS:  # one clean-up, whatever arrives next
                signal.signal(s, signal.SIG_IGN)
            if out:
                out.write(
                    f"supervise: got {signal.Signals(signum).name}; killing the process group "
                    f"{proc.pid}\n".encode()
                )
                out.flush()
            kill_group(proc.pid, grace)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)  # reap it: a zombie would keep the group "alive"
            raise SystemExit(128 + signum)

        previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid, grace)
            proc.wait()
            rc = EXIT_TIMEOUT
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
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
    p.add_argument(
        "--env-file",
        default="",
        help="KEY=VALUE file added to the environment when it exists (/etc/gpufleet/nccl.env)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given after --")
    rc, timed_out, leftovers = run(
        cmd,
        args.timeout,
        grace=args.grace,
        pidfile=args.pidfile,
        log=args.log,
        env_file=args.env_file,
    )
    if timed_out:
        msg = (
            f"ERROR: {cmd[0]} ran past {args.timeout:g}s and was killed (process group "
            "SIGTERM/SIGKILL); a peer is probably dead or unreachable"
        )
        if args.log:
            with open(args.log, "a", encoding="utf-8") as fh:
                fh.write(msg + "\n")
        print(
            f"ERROR: {cmd[0]} ran past {args.timeout:g}s and was killed (process group "
            "SIGTERM/SIGKILL); a peer is probably dead or unreachable",
            file=sys.stderr,
        )
    if leftovers:
        print(
            "WARNING: processes were left in the group after the launcher exited; killed",
            file=sys.stderr,
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
