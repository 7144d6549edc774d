"""Find the line that names the cause in a rank's or launcher's log (issue 17 item 4).

A failing torchrun launch leaves a long log: torchrun's own banner, each rank's output and
torchrun's "ChildFailedError" table. The cause is usually one line early in it:

- a C++ abort: ``terminate called after throwing an instance of '...'`` and the ``what():``
  line that follows it (gloo, c10d);
- a Python traceback: its last line (``RuntimeError: ...``);
- gloo's interface lookup: ``Unable to find address for: bogus0``;
- a bound port: ``Address already in use``.

:func:`first_error` returns the first such line (with its number), so a report can quote
it instead of the launcher's tail. Pure text processing: no torch, no I/O beyond reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Bytes kept per rank log (head + tail) when a failing launch's logs are copied.
MAX_LOG_BYTES = 64 * 1024

# torchrun prefixes rank output with "[rank1]:" (--tee/--log-dir) or "[default1]:".
_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]: ?")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(.+)$")
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|NotMet)):?\s*(.*)$")
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("interface", re.compile(r"Unable to find address for:?\s*(\S+)")),
    ("port-in-use", re.compile(r"Address already in use|EADDRINUSE")),
    ("fatal-signal", re.compile(r"Fatal Python error|Segmentation fault|SIGABRT|SIGSEGV")),
)
# torchrun's own summary lines are consequences, not causes
_TORCHRUN_NOISE = re.compile(
    r"ChildFailedError|torch\.distributed\.elastic|Sending process \d+ closing signal|"
    r"failed \(exitcode:|^\s*(?:=+|Failures:|Root Cause|time\s*:|host\s*:|rank\s*:|"
    r"exitcode\s*:|error_file\s*:|traceback\s*:)"
)


@dataclass(frozen=True)
class ErrorLine:
    """The line that names the cause: its kind, 1-based line number and text."""

    kind: str  # "terminate" | "traceback" | "interface" | "port-in-use" | "fatal-signal"
    line: int
    text: str

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "line": self.line, "text": self.text}


def _strip(raw: str) -> str:
    return _PREFIX.sub("", raw.rstrip("\r\n"), count=1)


def _traceback_end(lines: list[str], start: int) -> int | None:
    """Index of the exception line that closes the traceback starting at ``start``."""
    for j in range(start + 1, len(lines)):
        text = lines[j]
        if text.startswith((" ", "\t")) or not text:
            continue
        if _TRACEBACK.match(text) or text.startswith(
            ("During handling", "The above exception", "^")
        ):
            continue
        if _EXC_LINE.match(text):
            return j
        return None
    return None


def scan(text: str) -> list[ErrorLine]:
    """Every cause-like line of ``text`` in order (a traceback counts once, by its last line)."""
    lines = [_strip(x) for x in text.splitlines()]
    found: list[ErrorLine] = []
    skip_until = -1
    for i, line in enumerate(lines):
        if i <= skip_until:
            continue
        m = _TERMINATE.search(line)
        if m:
            what = next(
                (
                    _WHAT.match(lines[j])
                    for j in range(i + 1, min(i + 4, len(lines)))
                    if _WHAT.match(lines[j])
                ),
                None,
            )
            detail = f"{m.group(1)}: {what.group(1).strip()}" if what else m.group(1)
            found.append(ErrorLine("terminate", i + 1, f"terminate called: {detail}"))
            continue
        if _TRACEBACK.match(line):
            end = _traceback_end(lines, i)
            if end is not None:
                if not _TORCHRUN_NOISE.search(lines[end]):
                    found.append(ErrorLine("traceback", end + 1, lines[end].strip()))
                skip_until = end
            continue
        if _TORCHRUN_NOISE.search(line):
            continue
        for kind, pat in _PATTERNS:
            if pat.search(line):
                found.append(ErrorLine(kind, i + 1, line.strip()))
                break
    return found


def first_error(text: str) -> ErrorLine | None:
    """The first line that names a cause, or None when the log holds none."""
    hits = scan(text)
    return hits[0] if hits else None


def first_error_in(path: Path) -> ErrorLine | None:
    """:func:`first_error` of a file (None when it is missing)."""
    try:
        return first_error(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return None


def bounded(data: bytes, limit: int = MAX_LOG_BYTES) -> bytes:
    """``data`` cut to ``limit`` bytes: its head and tail with a marker between them."""
    if len(data) <= limit:
        return data
    half = limit // 2
    cut = len(data) - 2 * half
    return data[:half] + f"\n[... {cut} bytes cut by gpufleet ...]\n".encode() + data[-half:]


def launch_first_error(log: Path, local_rank: int | None = None) -> tuple[str, ErrorLine] | None:
    """The first error line of a launch: (file name, line). Sources are the launch log ``log``
    and each rank's own stderr copy beside it (``<stem>-rank<local rank>.stderr.log``, as
    :func:`collect_rank_logs` writes them).

    With ``local_rank`` (torchrun named the failing rank) that rank's copy comes first: the
    launch log gets rank output through torchrun's ``--tee``, which may stop before a crashed
    rank's last lines reach it, while the rank's own file is complete. Without it the launch
    log comes first (it interleaves the ranks in time), then the copies by local rank."""
    pattern = f"{log.stem}-rank{'*' if local_rank is None else local_rank}.stderr.log"
    copies = sorted(log.parent.glob(pattern))
    for path in [*copies, log] if local_rank is not None else [log, *copies]:
        err = first_error_in(path)
        if err is not None:
            return path.name, err
    return None


def first_error_note(cause: dict[str, object], log_name: str) -> str:
    """``"; first error (LOG line N): TEXT"`` from a root-cause dict, or ``""``; LOG is the
    dict's ``file`` when it names one (a rank's own stderr), else ``log_name``."""
    err = cause.get("first_error")
    if not isinstance(err, dict):
        return ""
    log_name = str(err.get("file") or log_name)
    return f"; first error ({log_name} line {err['line']}): {str(err['text'])[:300]}"


def collect_rank_logs(log_dir: Path, dest: Path, prefix: str) -> list[dict[str, object]]:
    """Copy each rank's stdout/stderr from torchrun's ``--log-dir`` next to the results.

    torchrun writes ``<log-dir>/<id>/attempt_<n>/<local rank>/{stdout,stderr}.log``; each
    becomes ``<dest>/<prefix>-rank<local rank>.<stream>.log``, cut to :data:`MAX_LOG_BYTES`
    (head and tail). Returns one entry per copied file with its first error line.
    """
    found: list[dict[str, object]] = []
    for src in sorted(log_dir.glob("*/attempt_*/*/std*.log")):
        local_rank, stream = src.parent.name, src.stem
        if not local_rank.isdigit() or stream not in ("stdout", "stderr"):
            continue
        data = src.read_bytes()
        if not data:
            continue
        out = dest / f"{prefix}-rank{local_rank}.{stream}.log"
        out.write_bytes(bounded(data))
        err = first_error(data.decode("utf-8", errors="replace"))
        found.append(
            {"file": out.name, "bytes": len(data), "first_error": err.as_dict() if err else None}
        )
    return found
