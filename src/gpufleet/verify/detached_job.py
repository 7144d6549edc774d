"""A detached job on a node, started and waited for by one plain command each.

verify starts the pre-check mesh and torchrun on every node at once and waits for them
later. Ansible's ``async`` did that with a module run per start (the command module's
payload shipped, the async wrapper forked and daemonised on the node) and another module
run per wait. :data:`START_SCRIPT` and :data:`WAIT_SCRIPT` do the same in one ``sh`` command
each (the action plugin ``gpufleet.core.node_job`` sends them with
``_low_level_execute_command``: one SSH exec, no Python started on the node for them):

- start: the command runs in a session (and process group) of its own, detached from the
  SSH session, stdin from /dev/null, stdout and stderr into ``<dir>/<name>.out`` and
  ``.err``; its PID (= PGID) goes to ``<name>.pid``; when it ends, its exit status is written
  to ``<name>.rc`` (atomically: written to a temporary file, then renamed). With ``--ready
  FILE SECONDS`` the start returns only once the job created FILE (the pre-check mesh: its
  listeners are bound), ended, or SECONDS passed;
- stop (:data:`STOP_SCRIPT`): the process groups its PID files name, as the wait does;
- wait: first creates ``<name>.waited``: the controller has begun waiting for the job here,
  which, under Ansible's linear strategy, is after the start task ended on every node (the
  pre-check mesh reads it as "every peer has been started"); then until ``<name>.rc``
  exists, at most ``max_wait`` seconds; a job that never wrote
  its PID within 10 s did not start, one whose process is gone without an exit status was
  killed; past ``max_wait`` the job's group is stopped (SIGTERM, SIGKILL 3 s later). Then
  whatever is left of the job's process group and of the groups the extra PID files name
  (torchrun's, recorded by ``gpufleet.verify.workers.supervise``) is stopped the same way, and the
  wait prints the result: :func:`parse_wait` turns it into what ``async_status`` gave
  (``rc``, ``stdout``, ``stderr``, their ``_lines``, ``finished``, ``msg``) plus ``killed``.

Nothing here signals a process the job did not start: only the job's own group and the
groups its PID files name.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

#: torchrun's (or the mesh's) exit status is unknown: the callers treat it as failed.
UNKNOWN_RC = -1

#: at most this much of a job's stdout and stderr comes back (the tail)
OUTPUT_LIMIT = 256 * 1024

# sh -c START_SCRIPT node-job DIR NAME [--ready FILE SECONDS] CMD [ARG...]
# exit 0, "started PID" (with --ready: "ready yes|no", once FILE exists, the job ended or
# SECONDS passed) and "at EPOCH_SECONDS", or exit 4 and why on stderr. The job records
# its own PID once it runs in its session, and the start waits for that (at most 10 s):
# Ansible runs commands
# on a pty (ssh -tt), whose end hangs up the session it leaves behind, and a job still in
# that session would go with it.
START_SCRIPT = r"""
set -u
d=$1; n=$2; shift 2
ready=; ready_s=0
if [ "${1:-}" = --ready ]; then ready=$2; ready_s=$3; shift 3; fi
command -v setsid >/dev/null 2>&1 || {
    echo "setsid (util-linux) is not installed on this node" >&2; exit 4; }
mkdir -p -- "$d" || exit 4
j=$d/$n
if [ -e "$j.pid" ] || [ -e "$j.out" ]; then
    echo "a job $n was started in $d already" >&2; exit 4; fi
( setsid sh -c 'j=$1; shift; echo $$ >"$j.pid.tmp" && mv -f "$j.pid.tmp" "$j.pid" || exit 4
    "$@" >"$j.out" 2>"$j.err" </dev/null; echo $? >"$j.rc.tmp"; mv -f "$j.rc.tmp" "$j.rc"' \
    node-job "$j" "$@" </dev/null >/dev/null 2>&1 & )
i=0
while [ ! -s "$j.pid" ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
pid=$(cat "$j.pid" 2>/dev/null) || pid=
[ -n "$pid" ] || { echo "the job did not record its PID in $j.pid within 10 s" >&2; exit 4; }
echo "started $pid"
if [ -n "$ready" ]; then
    i=0; lim=$((ready_s * 20))
    while [ ! -e "$ready" ] && [ ! -e "$j.rc" ] && [ "$i" -lt "$lim" ]; do
        sleep 0.05; i=$((i + 1)); done
    if [ -e "$ready" ]; then echo "ready yes"; else echo "ready no"; fi
fi
echo "at $(date +%s)"
"""

# shell functions of WAIT_SCRIPT and STOP_SCRIPT: whether a process or a process group is
# alive, and stopping a group (SIGTERM, SIGKILL 3 s later; prints "killed PGID")
_GROUP_FUNCTIONS = r"""
# Zombies do not count as alive: an init that reaps late would hold a wait up for nothing.
proc_live() {
  st=
  read -r st 2>/dev/null < "/proc/$1/stat" || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}
group_live() {
  kill -0 "-$1" 2>/dev/null || return 1
  for p in /proc/[0-9]*/stat; do
    st=
    read -r st 2>/dev/null < "$p" || continue
    st=${st##*) }
    # after the command name: state ppid pgrp ...
    set -- "$1" $st
    [ "$4" = "$1" ] && [ "$2" != Z ] && return 0
  done
  return 1
}
# kill -SIG -PGID, without "--": dash (/bin/sh on Debian-based nodes) refuses "kill -0 -- -PGID"
stop_group() {
  g=$1
  case "$g" in ''|*[!0-9]*) return 0;; esac
  group_live "$g" || return 0
  kill -TERM "-$g" 2>/dev/null
  k=0
  while group_live "$g" && [ "$k" -lt 12 ]; do sleep 0.25; k=$((k + 1)); done
  kill -KILL "-$g" 2>/dev/null
  echo "killed $g"
}
"""

# sh -c WAIT_SCRIPT node-wait DIR NAME MAX_WAIT_S [PIDFILE...]
WAIT_SCRIPT = (
    "set -u\n"
    + _GROUP_FUNCTIONS
    + r"""
j=$1/$2; max=$3; shift 3
: >"$j.waited" 2>/dev/null || true
limit=$(( max * 4 )); t=0; state=done
while [ ! -e "$j.rc" ]; do
  pid=$(cat "$j.pid" 2>/dev/null) || pid=
  if [ -z "$pid" ]; then
    [ "$t" -ge 40 ] && { state=never-started; break; }
  elif ! proc_live "$pid"; then
    sleep 0.25; [ -e "$j.rc" ] && break
    state=lost; break
  elif [ "$t" -ge "$limit" ]; then
    state=timeout; stop_group "$pid"; break
  fi
  sleep 0.25; t=$((t + 1))
done
echo "state $state"
if [ -e "$j.rc" ]; then
  echo "rc $(cat "$j.rc")"
  # the job's shell renamed .rc into place and is about to exit: give it a moment
  pid=$(cat "$j.pid" 2>/dev/null) || pid=
  k=0; while [ -n "$pid" ] && proc_live "$pid" && [ "$k" -lt 40 ]; do sleep 0.05; k=$((k + 1)); done
fi
stop_group "$(cat "$j.pid" 2>/dev/null)"
for f in "$@"; do [ -s "$f" ] && stop_group "$(cat "$f")"; done
for s in out err; do
  if [ -e "$j.$s" ]; then printf '%s ' "$s"; tail -c LIMIT "$j.$s" | base64 | tr -d '\n'; echo; fi
done
""".replace("LIMIT", str(OUTPUT_LIMIT))
)

# sh -c STOP_SCRIPT node-stop PIDFILE...: stop the process group each PID file names (the
# job's own, torchrun's), and nothing else; prints "killed PGID" per group it stopped
STOP_SCRIPT = (
    "set -u\n"
    + _GROUP_FUNCTIONS
    + r"""
for f in "$@"; do [ -s "$f" ] && stop_group "$(cat "$f")"; done
exit 0
"""
)

_STATES = {
    "done": "",
    "never-started": "the job did not start (no PID recorded within 10 s)",
    "lost": "the job ended without an exit status (killed from outside?)",
    "timeout": "the job did not end within its wait limit and was stopped",
}


def _rests(stdout: str, word: str) -> list[str]:
    """The rest of each line of the start script's output that begins with ``word``."""
    out = []
    for line in stdout.splitlines():
        first, _, rest = line.strip().partition(" ")
        if first == word:
            out.append(rest.strip())
    return out


def _whole(stdout: str, word: str) -> int | None:
    """The first whole number a ``word`` line carries; None when no such line has one."""
    return next((int(r) for r in _rests(stdout, word) if r.isdigit()), None)


def started_pid(stdout: str) -> int | None:
    """The PID the start script printed, None when it printed none."""
    return _whole(stdout, "started")


def became_ready(stdout: str) -> bool | None:
    """With --ready: whether the job made its ready file before the start returned; None
    when the start waited for none."""
    ready = _rests(stdout, "ready")
    return ready[0] == "yes" if ready else None


def started_at(stdout: str) -> int | None:
    """When the job started, in seconds since the epoch by the node's clock (the start
    script's ``at`` line); None when it printed none. verify compares the nodes' times: how
    far apart the controller's starts landed (the start spread)."""
    return _whole(stdout, "at")


def _decode(text: str) -> str:
    try:
        return base64.b64decode(text.strip(), validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""


def parse_wait(stdout: str) -> dict[str, Any]:
    """What the wait script printed -> {rc, finished, msg, stdout, stderr, stdout_lines,
    stderr_lines, killed, state}: ``rc`` -1 and ``finished`` 0 unless the job wrote its exit
    status; ``msg`` says why there is none."""
    state = ""
    rc = UNKNOWN_RC
    have_rc = False
    killed: list[int] = []
    streams = {"out": "", "err": ""}
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "state":
            state = rest.strip()
        elif word == "rc":
            value = rest.strip()
            if value.lstrip("-").isdigit():
                rc, have_rc = int(value), True
        elif word == "killed" and rest.strip().isdigit():
            killed.append(int(rest.strip()))
        elif word in streams:
            streams[word] = _decode(rest)
    if not state:
        msg = "the wait printed no result: " + (stdout.strip()[-300:] or "nothing")
    elif not have_rc:
        msg = _STATES.get(state, f"unknown state {state!r}") or "the job left no exit status"
    else:
        msg = ""
    return {
        "rc": rc if have_rc else UNKNOWN_RC,
        "finished": 1 if have_rc else 0,
        "state": state or "unknown",
        "msg": msg,
        "stdout": streams["out"],
        "stderr": streams["err"],
        "stdout_lines": streams["out"].splitlines(),
        "stderr_lines": streams["err"].splitlines(),
        "killed": killed,
    }
