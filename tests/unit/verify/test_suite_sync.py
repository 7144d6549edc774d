"""gpufleet.verify.suite_sync: the node suites in one command, written only when they changed, and
nothing outside the named suites accepted from the tar."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpufleet.verify import suite_sync as suitesync


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "checks" / "sub").mkdir(parents=True)
    (root / "checks" / "conftest.py").write_text("X = 1\n")
    (root / "checks" / "sub" / "test_a.py").write_text("def test_a(): pass\n")
    (root / "checks" / "__pycache__").mkdir()
    (root / "checks" / "__pycache__" / "conftest.cpython-311.pyc").write_bytes(b"\0")
    (root / "smoke_tests").mkdir()
    (root / "smoke_tests" / "conftest.py").write_text("Y = 2\n")
    return root


def _tree(d: Path) -> dict[str, bytes]:
    return {
        p.relative_to(d).as_posix(): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != suitesync.DIGEST_FILE
    }


def test_install_then_unchanged_then_replaced_when_a_file_changes(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    dest = tmp_path / "node" / "suites"
    blob, digest = suitesync.build(root, ["checks", "smoke_tests"])
    assert suitesync.install(dest, blob, digest, ["checks", "smoke_tests"]) == "installed"
    assert _tree(dest) == {
        "checks/conftest.py": b"X = 1\n",
        "checks/sub/test_a.py": b"def test_a(): pass\n",
        "smoke_tests/conftest.py": b"Y = 2\n",
    }
    assert suitesync.install(dest, blob, digest, ["checks", "smoke_tests"]) == "unchanged"
    # a file removed on the controller is gone from the node after the next sync
    (root / "checks" / "sub" / "test_a.py").unlink()
    (root / "checks" / "conftest.py").write_text("X = 3\n")
    blob2, digest2 = suitesync.build(root, ["checks", "smoke_tests"])
    assert digest2 != digest
    assert suitesync.install(dest, blob2, digest2, ["checks", "smoke_tests"]) == "installed"
    assert _tree(dest) == {"checks/conftest.py": b"X = 3\n", "smoke_tests/conftest.py": b"Y = 2\n"}
    assert [p.name for p in dest.iterdir() if p.name.startswith(".sync-")] == []


def test_a_suite_missing_on_the_node_is_put_back_even_with_the_same_digest(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    dest = tmp_path / "suites"
    blob, digest = suitesync.build(root, ["checks"])
    suitesync.install(dest, blob, digest, ["checks"])
    import shutil

    shutil.rmtree(dest / "checks")
    assert suitesync.install(dest, blob, digest, ["checks"]) == "installed"
    assert (dest / "checks" / "conftest.py").is_file()


def test_the_digest_follows_modes_and_contents_not_caches(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _, d1 = suitesync.build(root, ["checks"])
    (root / "checks" / "__pycache__" / "x.pyc").write_bytes(b"1")
    assert suitesync.build(root, ["checks"])[1] == d1
    os.chmod(root / "checks" / "conftest.py", 0o755)
    assert suitesync.build(root, ["checks"])[1] != d1


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("../evil.py", tarfile.REGTYPE),
        ("/etc/cron.d/evil", tarfile.REGTYPE),
        ("other/x.py", tarfile.REGTYPE),
        ("checks/link", tarfile.SYMTYPE),
        ("checks/dev", tarfile.CHRTYPE),
    ],
)
def test_the_node_refuses_members_outside_the_suites(
    tmp_path: Path, name: str, kind: bytes
) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        if kind == tarfile.SYMTYPE:
            info.linkname = "/etc/shadow"
        data = b"x" if kind == tarfile.REGTYPE else b""
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if data else None)
    dest = tmp_path / "suites"
    with pytest.raises(suitesync.SyncError, match="refused"):
        suitesync.install(dest, buf.getvalue(), "d", ["checks"])
    assert not (tmp_path / "evil.py").exists() and not (dest / "checks").exists()


def test_the_command_reads_the_tar_from_stdin(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    blob, digest = suitesync.build(root, ["smoke_tests"])
    argv = [
        sys.executable,
        "-m",
        "gpufleet.verify.suite_sync",
        "install",
        str(tmp_path / "s"),
        "--digest",
        digest,
        "--name=smoke_tests",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(suitesync.__file__).parents[2])}
    for expect in ("installed", "unchanged"):
        r = subprocess.run(
            argv, input=base64.b64encode(blob), capture_output=True, env=env, check=False
        )
        assert r.returncode == 0 and r.stdout.decode().strip() == expect
    bad = subprocess.run(argv, input=b"not base64!", capture_output=True, env=env, check=False)
    assert bad.returncode == 2 and b"ERROR" in bad.stderr
