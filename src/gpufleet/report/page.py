"""index.html: the one page a person reads, rendered with Jinja2 (autoescape on, template
templates/index.html.j2) from the summary.json data (:func:`gpufleet.report.aggregate.to_json`).

Nothing is aggregated here a second time: this module only chooses what the page shows of
that data and draws it (:mod:`gpufleet.report.svg`):

* the verdict (pass, fail, incomplete; the exit code) and the nodes to look at, first;
* a card per node with a record that failed, did not finish or warns (failed nodes first):
  each record's value, threshold and where it came from, the remedy and the command that
  reproduces it (summary.json ``reproduce``), at most :data:`CARD_RECORDS` per card;
* slow nodes: the pair sweep's heatmap with the value in each cell up to :data:`GRID_MAX`
  nodes; above, a row per node with each pair it is in (partner and value, coloured alike), in
  the ring's order up to :data:`ROWS_MAX` nodes, above only the :data:`ROWS_MAX` nodes with the
  lowest pair figure (every pair stays in summary.json); the fleet median and the named nodes;
* one small bandwidth chart per source (cluster all-reduce, each node's own, pair sweep,
  bisection) with its gates and profile floors; above :data:`MAX_LINES` series, their spread
  and the :data:`SLOWEST_SHOWN` slowest;
* compute per device, silent data corruption, every collective, the burn-in's samples and
  ib_write_bw per NIC (summary.json ``compute``, ``sdc``, ``collectives``, ``burnin``, ``ib``),
  the tier and its budget in the header;
* training, where each feature ran, the profile floors, what changed since the previous run
  of the inventory (summary.json ``changes``), and every node in a table.

The page is self-contained (inline CSS and SVG, no script, no font or file fetched; its
Content-Security-Policy allows nothing else) and reads the same from file:// and a web server.
"""

# ruff: noqa: PLC0415  (jinja2 is imported lazily on purpose)

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from gpufleet.report import svg
from gpufleet.units import human_size

#: records shown per node card (the rest: summary.json nodes.<node>.records)
CARD_RECORDS = 12
#: nodes named in the first screen's line of nodes to look at
HEADLINE_NODES = 6
#: the pair heatmap up to this many nodes; above, a row per node with its pairs, at most
#: ROWS_MAX rows (the nodes with the lowest pair figure above that)
GRID_MAX = 24
ROWS_MAX = 64
#: series per bandwidth chart before they are drawn as a spread with the slowest named
MAX_LINES = 8
SLOWEST_SHOWN = 3
#: figures moved listed on the page (summary.json changes.moved has every one)
MOVED_SHOWN = 20
ORDER = {"fail": 0, "incomplete": 1, "warn": 3}  # any other status: 2
FAMILIES = {"allreduce": "cluster all-reduce", "smoke": "single-node all-reduce (each node's own)"}


def first_line(text: str, limit: int = 200) -> str:
    line = next((x.strip() for x in str(text).splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def age_text(seconds: float | None) -> str:
    """``2 d 3 h``, ``4 h 12 min``, ``7 min``, ``40 s``; ``unknown`` for None."""
    if seconds is None:
        return "unknown"
    s = int(abs(seconds))
    if s >= 86400:
        return f"{s // 86400} d {s % 86400 // 3600} h"
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min" if s >= 60 else f"{s} s"


def node_cards(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A card per node with a record to act on, failed nodes first, then nodes with records
    that did not finish, then nodes that warn."""
    cards = []
    for node, n in data["nodes"].items():
        acts = [r for r in n["records"] if r["status"] not in ("pass", "skip")]
        if not acts:
            continue
        acts.sort(key=lambda r: ORDER.get(r["status"], 2))
        counts: dict[str, int] = {}
        for r in acts:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        cards.append(
            {
                "node": node,
                "worst": acts[0]["status"],
                "why": first_line(acts[0].get("message") or acts[0]["name"]),
                "counts": counts,
                "total": len(acts),
                "records": acts[:CARD_RECORDS],
                "more": max(0, len(acts) - CARD_RECORDS),
            }
        )
    cards.sort(key=lambda c: (ORDER.get(c["worst"], 2), c["node"]))
    return cards


def _order(data: Mapping[str, Any], names: set[str]) -> list[str]:
    """``names`` in run.json's node order (the pair sweep's ring), then any other sorted."""
    listed = [str(x) for x in (data.get("run") or {}).get("nodes") or [] if str(x) in names]
    return listed + sorted(names - set(listed))


def pair_median(rows: list[dict[str, Any]], named: frozenset[str]) -> float:
    """The fleet median the pictures colour against: of the pairs without a named slow node
    (on a ring of 3, two of the three pairs hold the slow node and the median of all pairs
    would be its own slow figure), of all pairs when every pair holds one."""
    clean = [float(r["busbw"]) for r in rows if not {str(r["a"]), str(r["b"])} & named]
    return statistics.median(clean or [float(r["busbw"]) for r in rows])


def slow_picture(data: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """The pair sweep as an SVG and the fleet median of the pairs; (None, None) without a
    sweep. Up to GRID_MAX nodes the heatmap; above, a row per node with its pairs (each node
    is in two pairs of the ring, so a grid would be almost all empty): up to ROWS_MAX nodes in
    the ring's order, above only the ROWS_MAX nodes with the lowest median pair figure, lowest
    first (every pair stays in summary.json ``pairs``)."""
    pairs = data.get("pairs") or {}
    rows = [r for r in pairs.get("rows") or [] if isinstance(r.get("busbw"), int | float)]
    if not rows:
        return None, None
    ratio = float(pairs.get("ratio") or 0.8)
    marked = frozenset(str(f["node"]) for f in data.get("slow_nodes") or [])
    median = pair_median(rows, marked)
    names = _order(data, {str(r[k]) for r in rows for k in ("a", "b")})
    size = human_size(int(rows[0].get("size_bytes") or 0))
    what = f"pair all-reduce busbw (GB/s) at {size}, {len(rows)} pairs of {len(names)} nodes"
    if len(names) <= GRID_MAX:
        cells = {(str(r["a"]), str(r["b"])): float(r["busbw"]) for r in rows}
        return svg.heatmap(svg.Heatmap(what, names, cells, median, ratio, marked=marked)), median
    at = {n: i for i, n in enumerate(names)}
    mine: dict[str, list[tuple[str, float]]] = {n: [] for n in names}
    for r in rows:
        a, b, v = str(r["a"]), str(r["b"]), float(r["busbw"])
        mine[a].append((b, v))
        mine[b].append((a, v))
    order = names
    if len(names) > ROWS_MAX:
        lowest = sorted(names, key=lambda n: (statistics.median(v for _, v in mine[n]), n))
        order = lowest[:ROWS_MAX]
        what += f": the {ROWS_MAX} nodes with the lowest median pair figure, lowest first"
    table = [(n, sorted(mine[n], key=lambda p: at[p[0]])) for n in order]
    return svg.pair_rows(what, table, median, ratio, marked=marked), median


def _family(source: str, op: str = "all_reduce") -> str:
    if op != "all_reduce":
        return f"{op} ({source})"
    if source.startswith("pair-"):
        return "pair sweep (two-node all-reduces)"
    if source.startswith("bisect-"):
        return "bisection reruns"
    return FAMILIES.get(source, source)


def _floors(data: Mapping[str, Any], sources: set[str], family: str) -> list[svg.Floor]:
    """The gates the sweeps of ``sources`` were judged on and, for each node's own all-reduce,
    the profile floors, each named with where it came from."""
    seen: dict[tuple[float, str], svg.Floor] = {}
    for g in data.get("bandwidth_gates") or []:
        if g["source"] in sources:
            value, src = float(g["threshold"]), str(g.get("threshold_source") or "")
            label = f"gate {svg.num(value)} GB/s at the largest size" + (f" ({src})" if src else "")
            seen.setdefault((value, label), svg.Floor(value, label))
    if family == FAMILIES["smoke"]:
        for n in data["nodes"].values():
            for f in n.get("floors") or []:
                if isinstance(f.get("expected"), int | float) and f.get("status") != "not judged":
                    at = human_size(int(f.get("floor_size_bytes") or 0))
                    label = f"floor {svg.num(f['expected'])} GB/s at {at} (profile {f['profile']})"
                    seen.setdefault((float(f["expected"]), label), svg.Floor(f["expected"], label))
    return list(seen.values())


def bandwidth_charts(data: Mapping[str, Any]) -> list[str]:
    """One small chart per source family; above MAX_LINES series the spread and the slowest."""
    families: dict[str, dict[tuple[str, str, int, str], list[tuple[int, float]]]] = {}
    for row in data.get("bandwidth") or []:
        key = (str(row["source"]), str(row["node"]), int(row["world_size"]), str(row["backend"]))
        family = _family(key[0], str(row.get("op") or "all_reduce"))
        families.setdefault(family, {}).setdefault(key, []).append(
            (int(row["size_bytes"]), float(row["busbw"]))
        )
    charts = []
    for family, series in families.items():
        lines = {k: sorted(v) for k, v in series.items()}
        band = None
        notes: list[str] = []
        if len(lines) > MAX_LINES:
            spread: dict[int, list[float]] = {}
            for pts in lines.values():
                for x, y in pts:
                    spread.setdefault(x, []).append(y)
            band = svg.Band(
                f"{len(lines)} series: lowest to highest (shaded), median (grey)",
                [(x, min(v), statistics.median(v), max(v)) for x, v in sorted(spread.items())],
            )
            slowest = sorted(lines, key=lambda k: (lines[k][-1][1], k))[:SLOWEST_SHOWN]
            lines = {k: lines[k] for k in slowest}
            notes.append(f"lines: the {len(lines)} lowest at the largest size")
        drawn = [
            svg.Series(f"{node} ({world} ranks, {backend}, {source})", pts)
            for (source, node, world, backend), pts in lines.items()
        ]
        floors = _floors(data, {k[0] for k in series}, family)
        title = f"{family}: busbw"
        charts.append(svg.line_chart(svg.LineChart(title, drawn, floors, band, notes=notes)))
    return charts


def page_view(data: Mapping[str, Any], *, plot: bool = True) -> dict[str, Any]:
    """What index.html shows of ``data``; ``plot`` False leaves the pictures out."""
    from markupsafe import Markup

    cards = node_cards(data)
    picture, median = slow_picture(data) if plot else (None, None)
    training = data.get("training")
    slowest_ranks = []
    if training:
        ranks = [r for r in training.get("ranks") or [] if r.get("samples_per_s") is not None]
        slowest_ranks = sorted(ranks, key=lambda r: float(r["samples_per_s"]))[:10]
    changes = data.get("changes") or {}
    previous = changes.get("previous")
    warns = (data.get("counts") or {}).get("warn", 0)
    return {
        "s": data,
        "cards": cards,
        "headline": cards[:HEADLINE_NODES],
        "verdict": data["status"].upper()
        + (" with warnings" if data["status"] == "pass" and warns else ""),
        "slow_picture": Markup(picture) if picture else None,
        "pair_median": median,
        "charts": [Markup(c) for c in bandwidth_charts(data)] if plot else [],
        "plot": plot,
        "slowest_ranks": slowest_ranks,
        "changes": changes,
        "previous_age": age_text(previous.get("age_s")) if previous else "",
        "moved": (changes.get("moved") or [])[:MOVED_SHOWN],
        "node_rows": [node_row(name, n, data["counts"]) for name, n in data["nodes"].items()],
        # the acceptance sections (gpufleet.report.acceptance); {} in a summary made before them
        "tier": data.get("tier"),
        "compute": data.get("compute") or {},
        "sdc": data.get("sdc") or {},
        "collectives": data.get("collectives") or {},
        "burnin": data.get("burnin") or {},
        "ib": data.get("ib") or {},
        "carded": {c["node"] for c in cards},
    }


def node_row(name: str, n: Mapping[str, Any], statuses: Mapping[str, int]) -> dict[str, Any]:
    """A node's line in "Every node": its worst status, its records per status, mode, profile."""
    counts = dict.fromkeys(statuses, 0)
    for r in n["records"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    seen = {k for k, v in counts.items() if v}
    known = ("fail", "incomplete", "warn", "pass", "skip")
    order = [*known[:2], *sorted(seen - set(known)), *known[2:]]  # a status not known here: 3rd
    worst = next((k for k in order if k in seen), "none")
    profile = n.get("profile") or {}
    return {
        "node": name,
        "worst": worst,
        "counts": counts,
        "mode": ", ".join(n.get("mode") or []) or "—",
        "profile": profile.get("name") or "—",
    }


def render_html(data: Mapping[str, Any], *, plot: bool = True) -> str:
    """index.html from the summary.json data."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("gpufleet", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = svg.num
    env.filters["size"] = human_size
    env.filters["first_line"] = first_line
    return env.get_template("index.html.j2").render(**page_view(data, plot=plot))
