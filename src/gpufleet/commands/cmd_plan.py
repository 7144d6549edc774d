"""`gpufleet plan`: which wheel, toolkit and driver for a node (exit 2 when impossible)."""

from __future__ import annotations

import argparse
import json
import sys

from gpufleet import argtypes
from gpufleet.planning.planner import PlanRequest, describe, make_plan


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="choose torch wheel variant, CUDA toolkit and driver for a node",
        description="Choose the torch wheel variant, CUDA toolkit and NVIDIA driver for a "
        "node, or refuse an impossible combination (exit 2) with the nearest ones that work.",
    )
    p.add_argument(
        "--torch",
        type=argtypes.dotted_version("X.Y.Z"),
        required=True,
        metavar="X.Y.Z",
        help="torch release, e.g. 2.11.0",
    )
    p.add_argument(
        "--cuda",
        metavar="VARIANT",
        help="force a wheel variant: cu126, cu130, ... or cpu (default: planner)",
    )
    p.add_argument("--os", metavar="OS", help="target OS, e.g. rocky9, el8, rhel10, centos7")
    p.add_argument(
        "--driver",
        type=argtypes.driver_version,
        metavar="VERSION",
        help="installed driver, e.g. 570.86.15",
    )
    p.add_argument(
        "--gpu-arch",
        metavar="LIST",
        default="",
        help="comma-separated GPU architectures: sm_80, 9.0 or codenames (GA100)",
    )
    p.add_argument(
        "--python",
        type=argtypes.dotted_version("X.Y"),
        metavar="X.Y",
        help="Python of the environment, e.g. 3.11",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    req = PlanRequest(
        torch=args.torch,
        variant=args.cuda,
        os=args.os,
        driver=args.driver,
        gpu_archs=tuple(a.strip() for a in args.gpu_arch.split(",") if a.strip()),
        python=args.python,
    )
    plan = make_plan(req)
    if args.json:
        json.dump(plan.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(describe(plan))
    return 0
