"""Debian's headless chromium, driven through the DevTools protocol over a pipe (stdlib only):
load a page, wait for its first frame, read the rendered DOM, the console errors and every
request it made, save a screenshot. For the report page's browser tests (marker ``browser``,
``make test-browser``; ``make browser-deps`` installs chromium) and for an integration test
on a real report::

    from browser_lib import chromium_missing, check_report_page

    if why := chromium_missing():
        pytest.skip(why)
    page = check_report_page(run_dir, out_dir)   # raises AssertionError naming what is wrong

``open_page(url, screenshot=...)`` is the lower level: a :class:`Page` (text, first-screen
text, per-node card text, console errors, requests, render time). A console error is any of:
an uncaught exception (``Runtime.exceptionThrown``), ``console.error``/``console.assert``
(``Runtime.consoleAPICalled``), a browser log entry of level error (``Log.entryAdded``: a
refused load, a Content-Security-Policy violation).

chromium runs with ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, NUL-terminated JSON), a
fresh ``--user-data-dir`` and the flags that keep it off this machine's closed network
(``--disable-background-networking`` and friends: without them it retries for minutes).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import http.server
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
#: where the browser tests keep each test's report and screenshots (reports/ is git-ignored)
REPO_REPORTS = Path(__file__).resolve().parents[1] / "reports" / "browser"
LAPTOP = (1366, 768)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-pipe",
)

#: the text of the rendered elements inside the first screen (the viewport, not scrolled)
FIRST_SCREEN_JS = """(() => {
  const out = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  while (walk.nextNode()) {
    const t = walk.currentNode;
    if (!t.textContent.trim()) continue;
    range.selectNodeContents(t);
    const r = range.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && r.top < innerHeight && r.bottom > 0 && r.left < innerWidth)
      out.push(t.textContent.trim());
  }
  return out.join(" ");
})()"""
#: {node: the rendered text of its card} for every element with data-node
CARDS_JS = """Object.fromEntries(Array.from(document.querySelectorAll("[data-node]"))
  .map(e => [e.dataset.node, e.innerText]))"""
#: the page box of the element a selector (%s, JSON) finds, or null
ELEMENT_BOX_JS = """(() => { const e = document.querySelector(%s); if (!e) return null;
  const r = e.getBoundingClientRect();
  return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()"""
#: waits for two animation frames: the page has been laid out and painted once
FRAMES_JS = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))"


def chromium_missing(path: str = CHROMIUM) -> str:
    """Why chromium cannot run here ("" when it can): for ``pytest.skip``."""
    if not (Path(path).is_file() and os.access(path, os.X_OK)):  # root: access() alone says yes
        return f"{path} is not installed: make browser-deps (apt-get install chromium)"
    return ""


def file_url(path: Path) -> str:
    return path.resolve().as_uri()


@dataclass
class Page:
    """A loaded page. ``render_s``: from Page.navigate to the second animation frame after the
    load event (parsed, laid out, painted)."""

    url: str
    text: str  # document.body.innerText: what is rendered
    html: str
    first_screen: str
    cards: dict[str, str]
    errors: list[str]
    requests: list[str]  # every URL requested after the page itself
    render_s: float
    screenshot: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)


class CdpError(RuntimeError):
    pass


class Chromium:
    """One headless chromium; ``with Chromium() as b: page = b.open(url)``."""

    def __init__(self, path: str = CHROMIUM, timeout_s: float = 30.0) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="gpufleet-chromium-")
        self._next = 0
        self._buf = b""
        self.events: list[dict[str, Any]] = []
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # in the child: the pipe ends as fd 3 (commands) and fd 4 (replies)
            high_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        argv = [path, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            close_fds=False,  # fds 3 and 4 are inheritable; Python's own are not
            preexec_fn=fds,  # noqa: PLW1509  (single-threaded set-up of two fds)
        )
        os.close(to_child_r)
        os.close(from_child_w)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError, CdpError, TimeoutError):
            self.send("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    # ------------------------------------------------------------------ the protocol

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    err = (
                        self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                    )
                    raise CdpError(
                        f"chromium closed the pipe (rc {self.proc.poll()}): {err[-2000:]}"
                    )
                self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        data: dict[str, Any] = json.loads(msg)
        return data

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """One command; the events that arrive before its answer go to ``events``."""
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while not any(
            e.get("method") == method and e.get("sessionId") == session for e in self.events
        ):
            self.events.append(self._read(deadline))

    def evaluate(self, session: str, expression: str) -> Any:
        res = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=session,
        )
        if "exceptionDetails" in res:
            raise CdpError(f"{expression[:60]}: {res['exceptionDetails']}")
        return res.get("result", {}).get("value")

    # ------------------------------------------------------------------ pages

    def open(
        self,
        url: str,
        *,
        size: tuple[int, int] = LAPTOP,
        screenshot: Path | None = None,
        extract: dict[str, str] | None = None,
        elements: dict[str, Path] | None = None,
    ) -> Page:
        """Load ``url`` in a new tab of ``size``, wait for its first frame, read it; the
        screenshot of the first screen to ``screenshot`` (PNG); ``extract``: more
        JavaScript expressions, their values in ``Page.values``; ``elements``: {CSS
        selector: PNG} of whole elements, wherever they are on the page."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=sid)
        width, height = size
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=sid,
        )
        mark = len(self.events)
        t0 = time.monotonic()
        self.send("Page.navigate", {"url": url}, session=sid)
        self.wait_event("Page.loadEventFired", sid)
        self.evaluate(sid, FRAMES_JS)
        render_s = time.monotonic() - t0
        page = Page(
            url=url,
            text=str(self.evaluate(sid, "document.body ? document.body.innerText : ''")),
            html=str(self.evaluate(sid, "document.documentElement.outerHTML")),
            first_screen=str(self.evaluate(sid, FIRST_SCREEN_JS)),
            cards=dict(self.evaluate(sid, CARDS_JS) or {}),
            errors=[],
            requests=[],
            render_s=render_s,
            values={k: self.evaluate(sid, js) for k, js in (extract or {}).items()},
        )
        if screenshot is not None:
            png = self.send("Page.captureScreenshot", {"format": "png"}, session=sid)["data"]
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(png))
            page.screenshot = screenshot
        for selector, path in (elements or {}).items():
            box = self.evaluate(sid, ELEMENT_BOX_JS % json.dumps(selector))
            if box is None:
                raise CdpError(f"{url}: no element {selector}")
            png = self.send(
                "Page.captureScreenshot",
                {"format": "png", "captureBeyondViewport": True, "clip": {**box, "scale": 1}},
                session=sid,
            )["data"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(png))
        mine = [e for e in self.events[mark:] if e.get("sessionId") == sid]
        page.errors = console_errors(mine)
        page.requests = [
            str(e["params"]["request"]["url"])
            for e in mine
            if e.get("method") == "Network.requestWillBeSent"
            and e["params"]["request"]["url"] != url
        ]
        self.send("Target.closeTarget", {"targetId": target})
        return page


def console_errors(events: list[dict[str, Any]]) -> list[str]:
    """The console errors among DevTools events (see the module text), one line each."""
    out = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            desc = (d.get("exception") or {}).get("description") or d.get("text")
            out.append(f"uncaught: {desc} (line {d.get('lineNumber')})")
        elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])
            )
            out.append(f"console.{p['type']}: {args}")
        elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            entry = p["entry"]
            out.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")
    return out


def open_page(url: str, **kw: Any) -> Page:
    """``Chromium().open(url, **kw)`` in a browser of its own."""
    with Chromium() as b:
        return b.open(url, **kw)


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """A plain web server (http.server) for ``root`` on 127.0.0.1; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def check_report_page(
    run_dir: Path, out: Path, *, url: str | None = None, size: tuple[int, int] = LAPTOP
) -> Page:
    """Load ``run_dir``/index.html (``url``: from elsewhere, e.g. :func:`serve`), save its
    first screen as ``out``/index-<W>x<H>.png and check it against the run's summary.json:
    no console error and no request beyond the page; the verdict and the exit code shown
    first; every node's name rendered; every node with a failed or unfinished record has a
    card holding the reproducer command of each record shown. Raises AssertionError naming
    what is wrong; returns the Page."""
    data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    shot = out / f"index-{size[0]}x{size[1]}.png"
    page = open_page(url or file_url(run_dir / "index.html"), size=size, screenshot=shot)
    problems = []
    if page.errors:
        problems.append(f"console errors: {page.errors}")
    if page.requests:
        problems.append(f"the page requested more than itself: {page.requests}")
    verdict = str(data["status"]).upper()
    if (
        verdict not in page.first_screen
        or f"exit code {data['exit_code']}" not in page.first_screen
    ):
        problems.append(
            f"verdict {verdict} / exit code not on the first screen: {page.first_screen[:400]!r}"
        )
    missing = [n for n in data["nodes"] if n not in page.text]
    if missing:
        problems.append(f"node names not rendered: {missing[:20]}")
    for node, n in data["nodes"].items():
        bad = [r for r in n["records"] if r["status"] not in ("pass", "skip", "warn")]
        if not bad:
            continue
        card = page.cards.get(node)
        if card is None:
            problems.append(f"{node}: a record {bad[0]['status']} but no card")
            continue
        shown = [r for r in bad if r["name"] in card]
        if not shown:
            problems.append(f"{node}: its card shows none of its {len(bad)} records")
        for r in shown:
            if r["reproduce"]["command"] not in card:
                problems.append(
                    f"{node}: card without the reproducer of {r['name']}: {r['reproduce']['command']}"
                )
    if problems:
        raise AssertionError(f"{run_dir}/index.html ({page.screenshot}):\n" + "\n".join(problems))
    return page
