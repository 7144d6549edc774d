"""A mirror that wants its credentials: the testbed's mirror directory served over HTTP with
Basic authentication (401 without them), for the test that provisions with a password in
every mirror URL (tests/integration/test_demo.py, issue 45). dnf (librepo/curl answers the
401 with the repository's username=/password=), pip (the URL's credentials) and get_url
(url_username/url_password) must each send them, or provisioning fails.

    with auth_mirror.serve(root, "10.213.0.1", 8214, "site", "s3cret") as url: ...

Run as a script it is the server (credentials from GF_MIRROR_USER / GF_MIRROR_PASSWORD in
its environment, never its command line); it logs each request's method, path and status,
never a header.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hmac
import http.server
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path


class _Handler(http.server.SimpleHTTPRequestHandler):
    expected = b""

    def _authorized(self) -> bool:
        got = self.headers.get("Authorization", "").encode()
        return hmac.compare_digest(got, self.expected)

    def do_GET(self) -> None:
        if not self._authorized():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="gpufleet-test-mirror"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def do_HEAD(self) -> None:
        if not self._authorized():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="gpufleet-test-mirror"')
            self.end_headers()
            return
        super().do_HEAD()


def main() -> None:
    root, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pair = f"{os.environ['GF_MIRROR_USER']}:{os.environ['GF_MIRROR_PASSWORD']}".encode()
    _Handler.expected = b"Basic " + base64.b64encode(pair)
    handler = functools.partial(_Handler, directory=root)
    with http.server.ThreadingHTTPServer((host, port), handler) as server:
        server.serve_forever()


def _status(url: str, auth: tuple[str, str] | None) -> int:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@contextlib.contextmanager
def serve(root: Path, host: str, port: int, user: str, password: str) -> Iterator[str]:
    """Serve ``root`` at http://host:port/ with Basic auth; yields the URL without
    credentials. Checks that it refuses a request without them before yielding."""
    env = {**os.environ, "GF_MIRROR_USER": user, "GF_MIRROR_PASSWORD": password}
    proc = subprocess.Popen(
        [sys.executable, __file__, str(root), host, str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 10
        while _status(url + "/", (user, password)) not in (200, 404):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the authenticated mirror did not start on {url}")
            time.sleep(0.1)
        assert _status(url + "/", None) == 401, "the mirror must refuse a request without them"
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
