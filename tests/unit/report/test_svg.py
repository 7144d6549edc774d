"""gpufleet.report.svg: what pairs.png got wrong stays right here: the title fits, the colour
scale sits under the grid, every measured cell carries its value, labels are readable."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gpufleet.report import svg

NS = "{http://www.w3.org/2000/svg}"


def _texts(root: ET.Element) -> list[ET.Element]:
    return list(root.iter(f"{NS}text"))


def test_heatmap_title_fits_and_the_scale_is_under_the_grid() -> None:
    names = ["node1", "node2", "node3"]
    title = "pair all-reduce busbw (GB/s) at 1G, 3 pairs of 3 nodes, run 20261201T101010Z-abcdef"
    cells = {("node1", "node2"): 40.0, ("node2", "node3"): 12.5, ("node3", "node1"): 41.0}
    root = ET.fromstring(
        svg.heatmap(svg.Heatmap(title, names, cells, 40.5, 0.8, marked=frozenset({"node2"})))
    )
    width = float(root.get("width", 0))
    head = next(t for t in _texts(root) if t.text == title)
    assert float(head.get("x", 0)) + svg.text_width(title, 14) <= width  # not clipped
    grid = next(r for r in root.iter(f"{NS}rect") if r.get("fill") == "#f4f4f4")
    bottom = float(grid.get("y", 0)) + float(grid.get("height", 0))
    legend = [r for r in root.iter(f"{NS}rect") if float(r.get("height", 0)) == 10]
    assert legend and all(float(r.get("y", 0)) > bottom for r in legend)
    values = sorted(t.text or "" for t in _texts(root) if t.get("text-anchor") == "middle")
    assert [v for v in values if v[0].isdigit()] == ["12.5", "12.5", "40.0", "40.0", "41.0", "41.0"]
    labels = [t for t in _texts(root) if t.text in names]
    assert len(labels) == 6 and all(float(t.get("font-size", 0)) >= 12 for t in labels)
    named = [t for t in labels if t.get("font-weight") == "bold"]
    assert {t.text for t in named} == {"node2"}


def test_the_slow_cell_is_red_and_the_median_green() -> None:
    slow, median = svg.scale_colour(0.3, 0.8), svg.scale_colour(1.0, 0.8)
    assert slow == svg.RED and median == svg.GREEN and svg.scale_colour(0.8, 0.8) == svg.AMBER
    assert svg.ink(svg.RED) == "#fff" and svg.ink(svg.AMBER) == "#000"


def test_a_line_chart_draws_its_floor_and_names_it_under_the_plot() -> None:
    series = [svg.Series("node1 (8 ranks, nccl, smoke)", [(2**20, 100.0), (2**30, 380.0)])]
    floors = [svg.Floor(460.0, "floor 460 GB/s at 16G (profile hgx-h100-8gpu)")]
    root = ET.fromstring(
        svg.line_chart(svg.LineChart("single-node all-reduce: busbw", series, floors))
    )
    plot = next(r for r in root.iter(f"{NS}rect") if r.get("fill") == "#fafafa")
    bottom = float(plot.get("y", 0)) + float(plot.get("height", 0))
    legend = {t.text: float(t.get("y", 0)) for t in _texts(root)}
    assert legend[floors[0].label] > bottom and legend[series[0].label] > bottom
    dashed = [ln for ln in root.iter(f"{NS}line") if ln.get("stroke") == "#c0392b"]
    assert dashed and float(dashed[0].get("y1", 0)) >= float(plot.get("y", 0))  # inside the plot
    assert "1M" in legend and "1G" in legend  # the sizes on the axis


@pytest.mark.parametrize(("value", "text"), [(412.3, "412"), (45.06, "45.1"), (3.271, "3.27"),
                                             (0.1234, "0.123"), (0, "0")])  # fmt: skip
def test_num(value: float, text: str) -> None:
    assert svg.num(value) == text


def test_esc_escapes_markup_and_quotes() -> None:
    assert svg.esc('<a href="x">\'') == "&lt;a href=&quot;x&quot;&gt;&#x27;"
