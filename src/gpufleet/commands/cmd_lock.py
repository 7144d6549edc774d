"""`gpufleet lock`: a hash-locked closure of the plan's torch build (and the packages
torch_env installs beside it), for `pip install --require-hashes` on the nodes.

    gpufleet lock --torch 2.13.0 --output torch.lock
    gpufleet lock --torch 2.13.0 --cuda cu126 --index-url https://mirror/whl/cu126 \\
        --package numpy==2.4.6 --wheelhouse /srv/wheels --output torch.lock

The plan picks the variant and the source its pin (gpufleet.planning.torch_source, as
torch_env does); `pip download` fetches every wheel pip would install on a node of the
given Python and platform into a fresh directory, and each file's sha256 goes into the
lock. --wheelhouse keeps the wheels (a find-links wheelhouse for air-gapped nodes, with
gpufleet_torch_source: wheelhouse). pip evaluates environment markers other than the
Python version on this machine: make the lock on Linux x86_64 for x86_64 nodes. Mirror
credentials reach pip through its environment, never its command line (give a URL with
them in $GPUFLEET_INDEX_URL rather than --index-url, which ps shows), and the lock's
header shows the index with them masked. Exit 0 written, 1 pip failed, 2 refused.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import EXIT_FAILED, EXIT_REFUSED
from gpufleet.planning import torch_lock as TL
from gpufleet.planning import torch_source as TS
from gpufleet.planning.planner import PlanRequest, make_plan
from gpufleet.planning.torch_source import redact_url
from gpufleet.planning.wheel_sources import WHEELHOUSE

#: where --index-url's default comes from (make torch-lock INDEX_URL=... sets it)
INDEX_URL_ENV = "GPUFLEET_INDEX_URL"

DEFAULT_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "linux_x86_64",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_command(sub, "lock", "write a hash-locked closure of the plan's torch build", __doc__)
    p.add_argument("--torch", type=argtypes.dotted_version("X.Y.Z"), required=True)
    p.add_argument("--cuda", type=argtypes.wheel_variant, metavar="VARIANT", default=None)
    p.add_argument("--python", type=argtypes.dotted_version("X.Y"), default="3.11")
    p.add_argument("--source", choices=TS.SETTINGS, default=TS.AUTO)
    p.add_argument(
        "--index-url",
        default=os.environ.get(INDEX_URL_ENV, ""),
        help=f"the site's mirror (default: ${INDEX_URL_ENV}, else the source's public index); "
        f"a URL with credentials belongs in ${INDEX_URL_ENV}: other users see argv in ps",
    )
    p.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    p.add_argument("--trusted-host", action="append", default=[], metavar="HOST")
    p.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="SPEC",
        help="another requirement to lock (torch_env_packages: make torch-lock passes them)",
    )
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        help=f"wheel platform tags (default: {', '.join(DEFAULT_PLATFORMS)})",
    )
    p.add_argument("--wheelhouse", type=Path, help="keep the wheels in this directory")
    p.add_argument("--output", "-o", type=Path, required=True)
    p.set_defaults(func=run)


def _pip_env(args: argparse.Namespace, install: TS.TorchInstall) -> dict[str, str]:
    """pip's settings as environment variables (never argv: credentials) with the
    machine's own pip configuration shut out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    if install.index_url:
        env["PIP_INDEX_URL"] = install.index_url
    else:
        env["PIP_NO_INDEX"] = "1"
    if args.find_links:
        env["PIP_FIND_LINKS"] = " ".join(args.find_links)
    if args.trusted_host:
        env["PIP_TRUSTED_HOST"] = " ".join(args.trusted_host)
    return env


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _say(text: str) -> None:
    print(f">> lock: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    plan = make_plan(PlanRequest(torch=args.torch, variant=args.cuda or None, python=args.python))
    settings = TS.SourceSettings(
        source=args.source,
        index_url=args.index_url,
        find_links=tuple(args.find_links),
        names={
            "source": "--source",
            "index_url": "--index-url",
            "find_links": "--find-links",
            "variant": "--cuda",
            "plan_variant": "--cuda",
        },
    )
    if args.source == WHEELHOUSE:
        names = [n for d in args.find_links if Path(d).is_dir() for n in os.listdir(d)]
        install = TS.torch_install(plan.to_dict(), "", settings, wheelhouse=names)
    else:
        install = TS.torch_install(plan.to_dict(), "", settings)
    if not install.requirement:
        print("ERROR: lock: the wheelhouse's torch pin is unknown", file=sys.stderr)
        return EXIT_REFUSED
    abi = "cp" + args.python.replace(".", "")
    platforms = args.platform or list(DEFAULT_PLATFORMS)
    with tempfile.TemporaryDirectory(prefix="gpufleet-lock-") as tmp:
        dest = Path(tmp) / "wheels"
        argv = [sys.executable, "-m", "pip", "download", "--dest", str(dest)]
        argv += ["--only-binary=:all:", "--python-version", args.python]
        argv += ["--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]
        for tag in [*platforms, "any"]:
            argv += ["--platform", tag]
        argv += [install.requirement, *args.package]
        where = redact_url(install.index_url) if install.index_url else "no index"
        _say(
            f"{install.requirement} ({install.source}: {install.source_why}) from {where}"
            f"{' + ' + str(len(args.package)) + ' packages' if args.package else ''}, "
            f"Python {args.python}, {platforms[0]} ...: pip download (its progress follows)"
        )
        done = subprocess.run(argv, env=_pip_env(args, install), check=False)
        if done.returncode != 0:
            print(
                f"ERROR: lock: pip download failed (exit {done.returncode}): the source cannot "
                f"serve {install.requirement} for Python {args.python} on {platforms[0]} -> "
                "read pip's message above",
                file=sys.stderr,
            )
            return EXIT_FAILED
        files = sorted(dest.glob("*.whl"))
        pins = [TL.wheel_pin(f.name, _sha256(f)) for f in files]
        size = sum(f.stat().st_size for f in files)
        if args.wheelhouse is not None:
            args.wheelhouse.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.move(str(f), args.wheelhouse / f.name)
    header = {
        "torch": install.torch,
        "variant": install.variant,
        "build": install.build,
        "cuda": install.cuda,
        "nccl": install.nccl,
        "python": args.python,
        "platforms": platforms,
        "source": install.source,
        "index_url": redact_url(install.index_url) if install.index_url else "",
        "requirement": install.requirement,
        "packages": list(args.package),
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    text = TL.render(header, pins)
    TL.parse(text, str(args.output))  # what it writes, it can read
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.output.with_name(args.output.name + ".tmp")
    tmp_out.write_text(text, encoding="utf-8")
    tmp_out.replace(args.output)
    kept = f"; wheels in {args.wheelhouse}" if args.wheelhouse is not None else ""
    _say(f"{len(pins)} wheels, {size / 1e9:.2f} GB, locked in {args.output}{kept}")
    return 0
