"""Drawings of task-group state graphs: a PNG (networkx + matplotlib) and an interactive HTML (plotly).

What a drawing encodes (one panel per estimator; with ``--compare`` two panels side by side
share one layout and one colour scale, so the same edge can be compared directly):

- **nodes**: states of the group (:func:`g2po_bench.analysis.state_graph.build_group_graph`); area grows
  with the number of visits; colour = the estimator's node value (G2PO: V(n), the group-
  aggregated value; GiGPO: the mean step return of the step group; grey when the estimator has
  none), viridis from 0 to the success reward; the start state is a square with a thick
  border; the terminal success (green star) and failure (red cross) nodes close the graph.
- **edges**: transitions node -> successor (self-loops drawn as loops); width grows with the
  number of trajectories that took the edge; colour = the mean advantage of its steps on a
  diverging scale centred at 0 (red < 0, grey = 0, blue > 0); the PNG labels each edge with its
  most frequent action (the HTML lists all actions, counts and the advantage range on hover).
- a caption: iteration, task group, task, success rate, estimator and its options, sizes.

Layout: :func:`layered_layout`, networkx's ``multipartite_layout`` with one column per
breadth-first depth from the start (terminals in the last column), nodes of a column ordered
by the mean position of their predecessors (one barycentre sweep), so trajectories read left
to right.

Why plotly for the HTML (not pyvis): plotly is actively maintained, writes one self-contained
page (its JavaScript beside it or inline, so the page opens offline), draws the two
``--compare`` panels side by side with shared colour scales, and takes the same node positions
as the PNG, so the two files show the same picture; pyvis (last release 2023) re-lays the graph
out with a physics simulation (a different picture each time), pulls in IPython, and would need
two pages for a comparison.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap, Normalize, to_hex  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

__all__ = ["layered_layout", "caption", "draw_png", "write_html", "ADVANTAGE_CMAP", "VALUE_CMAP"]

#: diverging colour map of the edge advantages: red (< 0), grey (0, still visible), blue (> 0)
ADVANTAGE_CMAP = LinearSegmentedColormap.from_list("advantage", ["#b2182b", "#9a9a9a", "#2166ac"])
#: sequential colour map of the node values
VALUE_CMAP = plt.get_cmap("viridis")
_SUCCESS_COLOR, _FAILURE_COLOR, _NO_VALUE = "#2ca02c", "#d62728", "#d9d9d9"


def layered_layout(g: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """Node positions: one column per ``layer`` (see the module docstring), x in [-1, 1].

    Args:
        g: a graph of :func:`g2po_bench.analysis.state_graph.build_group_graph` (nodes carry ``layer``).

    Returns:
        node -> (x, y).
    """
    layers: dict[int, list[str]] = {}
    for n, d in g.nodes(data=True):
        layers.setdefault(int(d["layer"]), []).append(n)
    rank: dict[str, float] = {}
    ordered: list[str] = []
    for layer in sorted(layers):
        nodes = layers[layer]

        def key(n: str, nodes=nodes) -> tuple:
            kind = g.nodes[n]["kind"]
            if kind in ("success", "failure"):
                return (0 if kind == "success" else 2, 0.0, nodes.index(n))
            placed = [rank[p] for p in g.predecessors(n) if p in rank]
            return (1, sum(placed) / len(placed) if placed else math.inf, nodes.index(n))

        for i, n in enumerate(sorted(nodes, key=key)):
            rank[n] = i
            ordered.append(n)
    h = nx.DiGraph()
    h.add_nodes_from(ordered)
    by_layer: dict[int, list[str]] = {}
    for n in ordered:  # a dict of lists keeps the order (a node attribute goes through sets)
        by_layer.setdefault(int(g.nodes[n]["layer"]), []).append(n)
    pos = nx.multipartite_layout(h, subset_key=by_layer, align="vertical")
    return {n: (float(p[0]), -float(p[1])) for n, p in pos.items()}


def caption(g: nx.DiGraph, options: dict[str, Any] | None = None) -> str:
    """One-paragraph caption of a group graph: iteration, group, task, success, estimator,
    options and sizes."""
    gr = g.graph
    k = round(gr["success_rate"] * gr["num_trajectories"])
    it = f"Iteration {gr['iteration']}, " if gr.get("iteration") is not None else ""
    opts = ""
    if options:
        shown = {"mode": "mode", "gamma": "gamma", "step_weight": "w", "invalid_penalty": "p"}
        opts = " (" + ", ".join(f"{shown.get(a, a)}={b}" for a, b in sorted(options.items())
                                if a in shown or a not in ("success_reward", "eps")) + ")"
    states = sum(1 for _, d in g.nodes(data=True) if d["kind"] in ("start", "state"))
    return (f"{it}task group {gr['group']}: {gr['task_id']} ({gr['task_type']}); success "
            f"{k}/{gr['num_trajectories']} ({gr['success_rate']:.0%}); estimator {gr['estimator']}{opts}; "
            f"{states} states, {g.number_of_edges()} edges, {gr['num_rows']} steps.")


def _clean(text: str) -> str:
    """Printable characters only, and ``$`` escaped (matplotlib would read mathtext)."""
    return "".join(c if c.isprintable() else "?" for c in str(text)).replace("$", r"\$")


def _wrap(text: str, width: int = 18, lines: int = 3) -> str:
    out = textwrap.wrap(_clean(text), width=width) or [""]
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: width - 3] + "..."
    return "\n".join(out)


def _node_size(visits: int) -> float:
    """Marker area (points^2) of a state visited ``visits`` times."""
    return 70.0 + 90.0 * float(visits) ** 0.6


def _scales(graphs: Sequence[nx.DiGraph]) -> tuple[Normalize, Normalize]:
    values = [d["value"] for g in graphs for _, d in g.nodes(data=True) if d["value"] is not None]
    advs = [abs(d["advantage"]) for g in graphs for *_, d in g.edges(data=True)]
    vmax = max([10.0] + values) if values else 10.0
    vmin = min([0.0] + values) if values else 0.0
    half = max(advs + [1e-9])
    return Normalize(vmin, vmax), Normalize(-half, half)


def _action_text(d: dict[str, Any], width: int = 22) -> str:
    action = _clean(d["actions"][0][0]) or '""'
    text = action if len(action) <= width else action[: width - 3] + "..."
    return text + (f" +{len(d['actions']) - 1}" if len(d["actions"]) > 1 else "")


def draw_png(panels: Sequence[tuple[str, nx.DiGraph]], pos: dict[str, tuple[float, float]],
             path: str | os.PathLike, *, caption_text: str = "", dpi: int = 110,
             edge_labels: bool = True) -> Path:
    """Draw one or more graphs (same nodes and layout) side by side into a PNG.

    Args:
        panels: ``(title, graph)`` per panel, e.g. ``[("g2po", G), ("gigpo", G2)]``.
        pos: node positions (:func:`layered_layout`), shared by the panels.
        path: the PNG to write (folders are created).
        caption_text: text under the panels (wrapped).
        dpi: resolution.
        edge_labels: label edges with their most frequent action.

    Returns:
        The written path.

    Raises:
        ValueError: no panel.
    """
    if not panels:
        raise ValueError("draw_png needs at least one panel")
    g0 = panels[0][1]
    n_layers = len({d["layer"] for _, d in g0.nodes(data=True)})
    per_layer = max(_nodes_per_layer(g0).values())
    w = min(max(9.0, 1.25 * n_layers + 1.5), 16.0)
    h = min(max(4.5, 0.75 * per_layer + 2.0), 11.0)
    fig, axes = plt.subplots(1, len(panels), figsize=(w * len(panels), h + 1.6), squeeze=False, dpi=dpi)
    fig.subplots_adjust(left=0.01, right=0.9, top=0.93, bottom=0.2, wspace=0.03)
    v_norm, a_norm = _scales([g for _, g in panels])
    for ax, (title, g) in zip(axes[0], panels):
        _draw_panel(ax, g, pos, v_norm, a_norm, edge_labels)
        ax.set_title(title, fontsize=10)
    cax_v = fig.add_axes((0.915, 0.55, 0.012, 0.35))
    cax_a = fig.add_axes((0.915, 0.2, 0.012, 0.3))
    names = list(dict.fromkeys(g.graph["value_name"] for _, g in panels if g.graph["value_name"]))
    value_name = "; ".join(names) or "no node values"
    fig.colorbar(plt.cm.ScalarMappable(v_norm, VALUE_CMAP), cax=cax_v).set_label(
        textwrap.fill(f"node colour: {value_name}", 32), fontsize=7)
    fig.colorbar(plt.cm.ScalarMappable(a_norm, ADVANTAGE_CMAP), cax=cax_a).set_label(
        "edge colour: mean advantage", fontsize=7)
    for cax in (cax_v, cax_a):
        cax.tick_params(labelsize=6)
    max_visits = min(8, max(d["visits"] for _, d in g0.nodes(data=True) if d["kind"] in ("start", "state")))
    max_traj = max((d["trajectories"] for *_, d in g0.edges(data=True)), default=1)
    handles = [
        Line2D([], [], marker="s", ls="", mfc="white", mec="black", mew=2.0, ms=9, label="start state"),
        Line2D([], [], marker="o", ls="", mfc="white", mec="black", ms=math.sqrt(_node_size(1)), label="state, 1 visit"),
        Line2D([], [], marker="o", ls="", mfc="white", mec="black", ms=math.sqrt(_node_size(max_visits)),
               label=f"state, {max_visits} visits"),
        Line2D([], [], marker="*", ls="", color=_SUCCESS_COLOR, ms=14, label="terminal: success"),
        Line2D([], [], marker="X", ls="", color=_FAILURE_COLOR, ms=11, label="terminal: failure"),
        Line2D([], [], color="#555555", lw=_edge_width(1), label="edge, 1 trajectory"),
        Line2D([], [], color="#555555", lw=_edge_width(max_traj), label=f"edge, {max_traj} trajectories"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=7 if len(panels) > 1 else 4, fontsize=7, frameon=False,
               bbox_to_anchor=(0.45, 0.085), handletextpad=0.4, columnspacing=1.2)
    if caption_text:
        chars = int(0.88 * fig.get_figwidth() * 72 / (7.5 * 0.52))
        fig.text(0.45, 0.015, textwrap.fill(_clean(caption_text), chars), ha="center",
                 va="bottom", fontsize=7.5)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def _nodes_per_layer(g: nx.DiGraph) -> dict[int, int]:
    out: dict[int, int] = {}
    for _, d in g.nodes(data=True):
        out[d["layer"]] = out.get(d["layer"], 0) + 1
    return out


def _edge_width(trajectories: int) -> float:
    return 0.8 + 1.1 * math.sqrt(trajectories)


def _node_color(d: dict[str, Any], v_norm: Normalize) -> str:
    if d["kind"] == "success":
        return _SUCCESS_COLOR
    if d["kind"] == "failure":
        return _FAILURE_COLOR
    if d["value"] is None:
        return _NO_VALUE
    return to_hex(VALUE_CMAP(v_norm(d["value"])))


def _pt_to_data(ax, points: float) -> tuple[float, float]:
    """A length in typographic points as (dx, dy) in data units of ``ax`` (limits set)."""
    px = points * ax.figure.dpi / 72.0
    inv = ax.transData.inverted()
    o = ax.transData.transform((0.0, 0.0))
    x, y = inv.transform((o[0] + px, o[1] + px)) - inv.transform(o)
    return float(abs(x)), float(abs(y))


def _draw_panel(ax, g: nx.DiGraph, pos, v_norm: Normalize, a_norm: Normalize, edge_labels: bool) -> None:
    from matplotlib.patches import FancyArrowPatch

    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 0.12, max(xs) + 0.12)
    ax.set_ylim(min(ys) - 0.3, max(ys) + 0.28)
    ax.set_axis_off()
    nodelist = list(g.nodes)
    sizes = {n: (420.0 if g.nodes[n]["kind"] in ("success", "failure") else _node_size(g.nodes[n]["visits"]))
             for n in nodelist}
    edges = [(u, v, d) for u, v, d in g.edges(data=True) if u != v]
    loops = [(u, d) for u, v, d in g.edges(data=True) if u == v]
    nx.draw_networkx_edges(
        g, pos, ax=ax, edgelist=[(u, v) for u, v, _ in edges], nodelist=nodelist,
        node_size=[sizes[n] for n in nodelist], width=[_edge_width(d["trajectories"]) for *_, d in edges],
        edge_color=[ADVANTAGE_CMAP(a_norm(d["advantage"])) for *_, d in edges], arrows=True,
        arrowstyle="-|>", arrowsize=9, connectionstyle="arc3,rad=0.12", alpha=0.9,
    )
    label_style = {"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75}
    for u, d in loops:  # a loop above the node, outside it, as wide as the node
        x, y = pos[u]
        rx, ry = _pt_to_data(ax, math.sqrt(sizes[u]) / 2.0)
        a = (x - 0.7 * rx, y + 0.7 * ry)
        b = (x + 0.7 * rx, y + 0.7 * ry)
        ax.add_patch(FancyArrowPatch(a, b, connectionstyle="arc3,rad=-1.6", arrowstyle="-|>",
                                     mutation_scale=9, lw=_edge_width(d["trajectories"]),
                                     color=ADVANTAGE_CMAP(a_norm(d["advantage"])), alpha=0.9,
                                     shrinkA=0, shrinkB=0, zorder=0.5))
        if edge_labels:
            ax.text(x, y + 2.1 * ry, _action_text(d), fontsize=5.5, ha="center", va="bottom",
                    bbox=label_style, zorder=3)
    shapes = {"start": "s", "state": "o", "success": "*", "failure": "X"}
    for kind, shape in shapes.items():
        ns = [n for n in nodelist if g.nodes[n]["kind"] == kind]
        if not ns:
            continue
        nx.draw_networkx_nodes(
            g, pos, ax=ax, nodelist=ns, node_shape=shape, node_size=[sizes[n] for n in ns],
            node_color=[_node_color(g.nodes[n], v_norm) for n in ns],
            edgecolors="black", linewidths=2.2 if kind == "start" else 0.6,
        )
    labels, label_pos = {}, {}
    for n in nodelist:
        d = g.nodes[n]
        if d["kind"] in ("success", "failure"):
            labels[n] = f"{d['label']} ({d['visits']})"
        else:
            val = "" if d["value"] is None else f" {g.graph.get('value_symbol', 'v')}={d['value']:.2f}"
            labels[n] = _wrap(d["label"]) + f"\n[{d['visits']}x{val}]"
        x, y = pos[n]
        label_pos[n] = (x, y - _pt_to_data(ax, math.sqrt(sizes[n]) / 2.0 + 1.5)[1])
    nx.draw_networkx_labels(g, label_pos, labels=labels, ax=ax, font_size=5.5, verticalalignment="top")
    if edge_labels and edges:
        nx.draw_networkx_edge_labels(g, pos, edge_labels={(u, v): _action_text(d) for u, v, d in edges},
                                     ax=ax, font_size=5.5, connectionstyle="arc3,rad=0.12",
                                     label_pos=0.5, bbox=label_style)


# ---------------------------------------------------------------------------- HTML (plotly)
def _plotly_scale(cmap, n: int = 11) -> list[list[Any]]:
    return [[i / (n - 1), to_hex(cmap(i / (n - 1)))] for i in range(n)]


def write_html(panels: Sequence[tuple[str, nx.DiGraph]], pos: dict[str, tuple[float, float]],
               path: str | os.PathLike, *, caption_text: str = "",
               include_plotlyjs: str | bool = "directory") -> Path:
    """Write an interactive HTML page (plotly) of one or more graphs side by side.

    Hovering a node shows its label, visits, trajectories and value; hovering the dot in the
    middle of an edge shows its actions with counts, trajectories, invalid steps and the
    advantage (mean, min, max). Encodings as in :func:`draw_png`.

    Args:
        panels, pos, caption_text: as :func:`draw_png`.
        path: the HTML to write.
        include_plotlyjs: plotly's option: "directory" (default: ``plotly.min.js`` written once
            beside the page; opens offline), True (inline, about 4.7 MB per page) or "cdn".

    Returns:
        The written path.

    Raises:
        ValueError: no panel.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not panels:
        raise ValueError("write_html needs at least one panel")
    v_norm, a_norm = _scales([g for _, g in panels])
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[t for t, _ in panels],
                        horizontal_spacing=0.03)
    annotations = []
    for col, (_title, g) in enumerate(panels, start=1):
        annotations += _html_edges(fig, go, g, pos, col, a_norm)
        _html_nodes(fig, go, g, pos, col, v_norm)
        fig.update_xaxes(visible=False, row=1, col=col)
        fig.update_yaxes(visible=False, row=1, col=col)
    _html_colour_bars(fig, go, panels, v_norm, a_norm)
    fig.update_layout(
        annotations=list(fig.layout.annotations) + annotations, plot_bgcolor="white",
        width=max(900, 1100 * len(panels)), height=760, hovermode="closest",
        legend={"orientation": "h", "y": -0.02, "x": 0.0},
        title={"text": "<br>".join(textwrap.wrap(caption_text, 170)), "font": {"size": 12}},
        margin={"t": 110, "b": 60, "l": 20, "r": 140},
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(out), include_plotlyjs=include_plotlyjs, full_html=True)
    return out


def _edge_hover(g: nx.DiGraph, u: str, v: str, d: dict[str, Any]) -> str:
    """The hover text of an edge: its ends, counts, advantage and (up to 8) actions."""
    acts = "<br>".join(f"  {_esc(a)} ({c})" for a, c in d["actions"][:8])
    more = f"<br>  ... {len(d['actions']) - 8} more" if len(d["actions"]) > 8 else ""
    return (f"<b>{_esc(g.nodes[u]['label'])}</b> → <b>{_esc(g.nodes[v]['label'])}</b><br>"
            f"trajectories {d['trajectories']}, steps {d['rows']}, invalid {d['invalid']}<br>"
            f"advantage {d['advantage']:+.3f} (min {d['advantage_min']:+.3f}, max "
            f"{d['advantage_max']:+.3f})<br>actions:<br>{acts}{more}")


def _html_edges(fig: Any, go: Any, g: nx.DiGraph, pos: dict[str, tuple[float, float]], col: int,
                a_norm: Any) -> list[dict[str, Any]]:
    """Draw the edges of panel ``col`` (self-loops as traces, hover dots at the middles); returns the
    arrows (layout annotations) of the other edges."""
    xref = "x" if col == 1 else f"x{col}"
    yref = "y" if col == 1 else f"y{col}"
    annotations = []
    mids_x, mids_y, mids_text, mids_color = [], [], [], []
    for u, v, d in g.edges(data=True):
        color = to_hex(ADVANTAGE_CMAP(a_norm(d["advantage"])))
        width = _edge_width(d["trajectories"])
        (x0, y0), (x1, y1) = pos[u], pos[v]
        if u == v:
            r = 0.035
            ts = [2 * math.pi * i / 24 for i in range(25)]
            fig.add_trace(go.Scatter(
                x=[x0 + r * math.sin(t) for t in ts], y=[y0 + r + r * math.cos(t) for t in ts],
                mode="lines", line={"color": color, "width": width}, hoverinfo="skip",
                showlegend=False), row=1, col=col)
            mx, my = x0, y0 + 2 * r
        else:
            # offset the two directions of a pair of reciprocal edges
            dx, dy = x1 - x0, y1 - y0
            norm = math.hypot(dx, dy) or 1.0
            off = 0.012 if g.has_edge(v, u) else 0.0
            ox, oy = -dy / norm * off, dx / norm * off
            annotations.append({
                "x": x1 + ox, "y": y1 + oy, "ax": x0 + ox, "ay": y0 + oy, "xref": xref,
                "yref": yref, "axref": xref, "ayref": yref, "showarrow": True, "arrowhead": 2,
                "arrowsize": 0.9, "arrowwidth": width, "arrowcolor": color, "opacity": 0.9,
                "standoff": _px(g.nodes[v]), "startstandoff": _px(g.nodes[u]), "text": "",
            })
            mx, my = (x0 + x1) / 2 + ox, (y0 + y1) / 2 + oy
        mids_x.append(mx)
        mids_y.append(my)
        mids_text.append(_edge_hover(g, u, v, d))
        mids_color.append(color)
    fig.add_trace(go.Scatter(x=mids_x, y=mids_y, mode="markers", hovertext=mids_text,
                             hoverinfo="text", marker={"size": 7, "color": mids_color, "opacity": 0.8},
                             showlegend=False), row=1, col=col)
    return annotations


def _html_nodes(fig: Any, go: Any, g: nx.DiGraph, pos: dict[str, tuple[float, float]], col: int,
                v_norm: Any) -> None:
    """Draw the nodes of panel ``col``, one trace per kind (start, state, success, failure)."""
    symbols = {"start": "square", "state": "circle", "success": "star", "failure": "x"}
    for kind, symbol in symbols.items():
        ns = [n for n, d in g.nodes(data=True) if d["kind"] == kind]
        if not ns:
            continue
        texts = []
        for n in ns:
            d = g.nodes[n]
            val = "n/a" if d["value"] is None else f"{d['value']:.3f}"
            texts.append(f"<b>{_esc(d['label'])}</b><br>{kind}; visits {d['visits']}, "
                         f"trajectories {d['trajectories']}<br>value {val}"
                         + (f"<br>state key {d['state_key']}" if d["state_key"] is not None else ""))
        fig.add_trace(go.Scatter(
            x=[pos[n][0] for n in ns], y=[pos[n][1] for n in ns], mode="markers+text",
            text=[_short(g.nodes[n]["label"]) for n in ns], textposition="bottom center",
            textfont={"size": 9}, hovertext=texts, hoverinfo="text", name=_KIND_NAMES[kind],
            legendgroup=kind, showlegend=col == 1,
            marker={"symbol": symbol, "size": [2 * _px(g.nodes[n]) for n in ns],
                    "color": [_node_color(g.nodes[n], v_norm) for n in ns],
                    "line": {"color": "black", "width": 3 if kind == "start" else 1}},
        ), row=1, col=col)


def _html_colour_bars(fig: Any, go: Any, panels: Sequence[tuple[str, nx.DiGraph]], v_norm: Any, a_norm: Any) -> None:
    """The two colour bars: the node value and the edge advantage."""
    names = list(dict.fromkeys(g.graph["value_name"] for _, g in panels if g.graph["value_name"]))
    value_name = "; ".join(names) or None
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
                             marker={"colorscale": _plotly_scale(VALUE_CMAP), "cmin": v_norm.vmin,
                                     "cmax": v_norm.vmax, "color": [v_norm.vmin], "showscale": True,
                                     "colorbar": {"title": {"text": f"node: {value_name or 'no value'}",
                                                            "side": "right"},
                                                  "x": 1.02, "y": 0.78, "len": 0.45}}))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
                             marker={"colorscale": _plotly_scale(ADVANTAGE_CMAP), "cmin": a_norm.vmin,
                                     "cmax": a_norm.vmax, "color": [0.0], "showscale": True,
                                     "colorbar": {"title": {"text": "edge: mean advantage", "side": "right"},
                                                  "x": 1.02, "y": 0.25, "len": 0.45}}))


_KIND_NAMES = {"start": "start state", "state": "state (size: visits)", "success": "terminal: success",
               "failure": "terminal: failure"}


def _px(d: dict[str, Any]) -> float:
    """Marker radius in pixels."""
    if d["kind"] in ("success", "failure"):
        return 11.0
    return 5.0 + 3.0 * float(d["visits"]) ** 0.5


def _short(label: str, width: int = 24) -> str:
    return label if len(label) <= width else label[: width - 3] + "..."


def _esc(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
