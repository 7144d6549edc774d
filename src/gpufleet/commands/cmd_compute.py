"""``gpufleet compute [--burnin DURATION] --output FILE``: compute per device on this node.

Every GPU at once (one process each), or the CPU: a short sweep of matmul shapes per dtype
(bf16 on a GPU, its best dense dtype measured here, fp16 before compute capability 8.0 and
fp8 not measured; float32 on the CPU; warm-up excluded, the
median of repeats, the best shape kept), then a deterministic computation repeated on every
device whose digests the report compares across the node's devices and across nodes of the
same model and software (silent data corruption). Judged here against the system profile
(``--system-profile``, ``--profiles-dir``, as the node check ``profile`` chooses it): each
device against the node's best (more than the profile's ``gpu_spread_fraction``, 10 %,
below fails), each GPU's bf16 figure against ``floors.matmul_bf16_tflops``, each device's
repeats against each other (gpufleet.node.compute).

``--burnin DURATION`` (``90s``, ``2m``, ``30m``) then holds every device busy with its best
shape that long, sampling NVML (SM clock, throttle reasons, temperature, power) and reading
the kernel log for Xids after the start: result kind ``burnin`` (gpufleet.node.burnin).

verify runs it on every node (its ``compute`` and ``burnin`` steps; docs/verify.md). Exit 0
when no record fails, 1 when one does.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.node import compute_run
from gpufleet.results import exit_code


def register(sub: Any) -> None:
    p = add_command(sub, "compute", "matmul TFLOP/s and SDC per device (and the burn-in)", __doc__)
    p.add_argument(
        "--node",
        type=argtypes.text,
        default=socket.gethostname(),
        help="node name in the records (default: the host name)",
    )
    p.add_argument("--output", type=argtypes.text, required=True, help="ResultFile to write")
    p.add_argument(
        "--system-profile",
        type=argtypes.text,
        default="auto",
        help="profile the figures are judged against (default auto: detected)",
    )
    p.add_argument(
        "--profiles-dir",
        type=argtypes.text,
        default=None,
        help="a site's own profile files (gpufleet_profiles_dir)",
    )
    p.add_argument(
        "--dtypes",
        type=argtypes.text,
        default=None,
        help="comma list, e.g. bfloat16,float16 (default: bf16 and the best dense "
        "dtype on a GPU, float32 on the CPU)",
    )
    p.add_argument(
        "--shapes",
        type=argtypes.text,
        default=None,
        help="matmul shapes, N (a cube) or MxNxK, comma list (default: "
        "4096,6144,8192,12288 on a GPU, 256,512 on the CPU)",
    )
    p.add_argument(
        "--warmup",
        type=argtypes.int_range(0, 1000),
        default=3,
        help="untimed matmuls per shape (default 3)",
    )
    p.add_argument(
        "--repeats",
        type=argtypes.int_range(1, 1000),
        default=5,
        help="timed runs per shape, the median counts (default 5)",
    )
    p.add_argument(
        "--min-time",
        type=argtypes.float_range(0.001, 60),
        default=0.05,
        help="seconds one timed run lasts at least (default 0.05)",
    )
    p.add_argument(
        "--budget",
        type=argtypes.float_range(1, 3600),
        default=20.0,
        help="seconds per device and dtype for the sweep (default 20)",
    )
    p.add_argument(
        "--sdc-repeats",
        type=argtypes.int_range(0, 100),
        default=2,
        help="runs of the deterministic computation per device (default 2)",
    )
    p.add_argument(
        "--sdc-size",
        type=argtypes.int_range(0, 32768),
        default=0,
        help="its matrix side (default 2048 on a GPU, 256 on the CPU)",
    )
    p.add_argument(
        "--devices",
        type=argtypes.text,
        default=None,
        help="comma list of CUDA indices or cpu (default: every GPU, else the CPU)",
    )
    p.add_argument(
        "--burnin",
        type=argtypes.duration,
        default=0,
        help="hold every device busy this long after the sweep (90s, 2m, 30m)",
    )
    p.add_argument(
        "--interval",
        type=argtypes.float_range(0.1, 600),
        default=0.0,
        help="burn-in interval and sample period in seconds (default: the duration / 120, 1-30 s)",
    )
    p.set_defaults(func=run)


def _words(text: str | None) -> tuple[str, ...]:
    return tuple(w.strip() for w in (text or "").split(",") if w.strip())


def run(args: argparse.Namespace) -> int:
    opts = compute_run.Options(
        node=args.node,
        dtypes=_words(args.dtypes),
        shapes=args.shapes or "",
        warmup=args.warmup,
        repeats=args.repeats,
        min_time_s=args.min_time,
        budget_s=args.budget,
        sdc_repeats=args.sdc_repeats,
        sdc_size=args.sdc_size,
        system_profile=args.system_profile,
        profiles_dir=args.profiles_dir or "",
        devices=_words(args.devices),
        burnin_s=float(args.burnin),
        interval_s=args.interval,
    )
    result = compute_run.run(opts)
    result.write(args.output)
    for r in result.records:
        where = f" GPU {r.gpu}" if r.gpu is not None else ""
        print(f"{r.status.upper():4} {r.name}{where}: {r.message}")
    return exit_code(result.records)
