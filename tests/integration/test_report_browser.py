"""index.html in Debian's headless chromium (make test-browser; never in make test): no console
error, nothing fetched, the verdict and every node rendered, a failed node's card with its
reproducer, the first screen naming the node and why, 64 nodes in under 5 s. Each test keeps
its report and a laptop-size screenshot under reports/browser/<test>/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import bench_report
from browser_lib import REPO_REPORTS, Chromium, check_report_page, chromium_missing, file_url, serve
from gpufleet import report

pytestmark = pytest.mark.browser

#: the issue's acceptance figure: the 64-node page rendered within this (tests/bench too)
RENDER_64_S = 5.0


@pytest.fixture(autouse=True)
def _chromium() -> None:
    if why := chromium_missing():
        pytest.skip(why)


@pytest.fixture
def out(request: pytest.FixtureRequest) -> Path:
    """reports/browser/<test>/: the test's report and screenshots (kept, for CI artefacts)."""
    d: Path = REPO_REPORTS / str(request.node.name).replace("[", "-").rstrip("]")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def _run(out: Path, n: int, faulty: int | None, run_id: str = bench_report.RUN_ID,
         finished: str = bench_report.FINISHED) -> Path:  # fmt: skip
    run = out / "reports" / run_id
    bench_report.generate(run, n, 8, faulty=faulty, run_id=run_id, finished=finished)
    report.write_report(run)
    return run


def test_a_page_that_throws_is_caught_and_a_clean_one_is_not(tmp_path: Path) -> None:
    """The console check is real: an uncaught exception, console.error and a refused load
    (the CSP forbids the image) are each one error; a clean page has none."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><meta http-equiv="Content-Security-Policy" content="default-src '
        "'none'; script-src 'unsafe-inline'\"><p>text</p><img src=\"http://192.0.2.1/x.png\">"
        '<script>console.error("said so"); throw new Error("boom");</script>'
    )
    good = tmp_path / "good.html"
    good.write_text("<!doctype html><title>t</title><p>fine</p>")
    with Chromium() as b:
        page = b.open(file_url(bad))
        clean = b.open(file_url(good))
    assert any("uncaught" in e and "boom" in e for e in page.errors), page.errors
    assert any(e == "console.error: said so" for e in page.errors), page.errors
    assert any("Content Security Policy" in e or "192.0.2.1" in e for e in page.errors), page.errors
    assert clean.errors == [] and clean.requests == [] and "fine" in clean.text


def test_a_failed_run_names_the_node_why_and_how_to_reproduce_on_the_first_screen(
    out: Path,
) -> None:
    run = _run(out, 3, faulty=1)
    node = "gpu0001"
    page = check_report_page(run, out)
    assert page.screenshot is not None and page.screenshot.stat().st_size > 10_000
    first = page.first_screen
    assert first.startswith("FAIL") and "exit code 1" in first
    assert node in first and "uncorrectable ECC" in first and "What to do" in first
    card = page.cards[node]
    data = json.loads((run / "summary.json").read_text())
    failed = next(r for r in data["failures"] if r["node"] == node)
    assert failed["reproduce"]["command"] in card and "test_ecc_uncorrectable_volatile" in card
    assert set(page.cards) == {node}  # the healthy nodes have no card
    # the heatmap was drawn, with the values in its cells
    assert "15.0" in page.text and "pair all-reduce busbw" in page.text


def test_a_name_or_message_holding_markup_stays_text(out: Path) -> None:
    run = _run(out, 3, faulty=None)
    smoke = run / "gpu0002" / "smoke.json"
    data = json.loads(smoke.read_text())
    data["records"][0].update(status="fail", message="<script>document.title='owned'</script>",
                              remedy="<b>bold</b>")  # fmt: skip
    smoke.write_text(json.dumps(data))
    report.write_report(run)
    with Chromium() as b:
        page = b.open(file_url(run / "index.html"), screenshot=out / "index-1366x768.png", extract={
            "scripts": "document.scripts.length", "title": "document.title",
            "bold": "document.querySelectorAll('.remedy b').length"})  # fmt: skip
    assert page.errors == []
    assert page.values == {"scripts": 0, "title": "gpufleet FAIL: run bench-report", "bold": 1}
    assert "<script>document.title='owned'</script>" in page.text  # shown, not run
    assert "<b>bold</b>" in page.text


def test_the_page_reads_the_same_from_a_web_server(out: Path) -> None:
    run = _run(out, 3, faulty=1)
    with serve(run) as base:
        page = check_report_page(run, out, url=base + "index.html")
    assert page.url.startswith("http://127.0.0.1:") and "gpu0001" in page.first_screen


def test_a_run_after_a_failed_run_shows_the_recovery(out: Path) -> None:
    _run(out, 3, faulty=1, run_id="a", finished="2026-12-05T10:10:00Z")
    healthy = _run(out, 3, faulty=None, run_id="b", finished="2026-12-06T09:00:00Z")
    page = check_report_page(healthy, out)
    section = page.text.split("What changed since the previous run")[1].split("Slow nodes")[0]
    assert "Previous run of this inventory: a" in section and "Recoveries" in section
    assert "gpu0001" in section and "ecc_uncorrectable_volatile" in section
    assert "1 recovery" in page.first_screen and "22 h 50 min" in page.text


def test_64_nodes_render_in_under_5_s_and_stay_readable(out: Path) -> None:
    run = _run(out, 64, faulty=9)
    page = check_report_page(run, out)
    assert page.render_s < RENDER_64_S, f"{page.render_s:.2f} s"
    assert "gpu0009" in page.first_screen and "FAIL" in page.first_screen
    for n in ("gpu0000", "gpu0063"):
        assert f"{n} 4" in page.text  # a pair cell: its partner and its value
