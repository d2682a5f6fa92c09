"""The ``graph`` command: draw one task group's state graph from a run's recorded step tables.

::

    g2po graph RUN [--iteration K] [--group G] [--out FILE.png] [--compare ESTIMATOR] [--no-html]

``RUN`` is a run folder (or a run id under ``results/runs``) trained with ``record_graphs=true``
(the CPU default). Writes ``FILE.png`` (networkx + matplotlib) and ``FILE.html`` (plotly, with
``plotly.min.js`` beside it); default ``RUN/graphs/iter<K>_group<G>[_vs_<ESTIMATOR>].png``.
``--iteration`` defaults to the last recorded iteration, ``--group`` to the group whose success
rate is closest to 50 % (:func:`g2po_bench.analysis.state_graph.choose_group`). ``--compare gigpo`` draws
the run's own credit and the other estimator's, recomputed with the registry on the recorded
steps, side by side. A bad argument prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from g2po_bench.analysis.state_graph import (
    build_group_graph,
    choose_group,
    compared_rows,
    group_rows,
)
from g2po_bench.core.steptable import read_step_table, recorded_iterations

__all__ = ["add_graph_arguments", "run_graph", "draw_group", "GroupDrawing", "report_state_graphs"]


@dataclass
class GroupDrawing:
    """What :func:`draw_group` wrote: ``png``, ``html`` (None with ``html=False``), the
    ``iteration`` and ``group`` drawn, the run's graph ``graph`` (networkx) and ``caption``."""

    png: Path
    html: Path | None
    iteration: int
    group: int
    graph: object
    caption: str


def add_graph_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``graph`` command's arguments (module docstring) to ``parser``."""
    parser.add_argument("run", help="run folder trained with record_graphs=true (or a run id under results/runs)")
    parser.add_argument("--iteration", type=int, default=-1, help="training iteration (default: the last recorded)")
    parser.add_argument("--group", type=int, default=None,
                        help="task group id (default: the group with success rate closest to 50%%)")
    parser.add_argument("--out", default=None, help="PNG path; the HTML gets the same name with .html")
    parser.add_argument("--compare", default=None, metavar="ESTIMATOR",
                        help="also draw this estimator's credit on the same steps, side by side (e.g. gigpo)")
    parser.add_argument("--no-html", action="store_true", help="write the PNG only")
    return parser


def _resolve_run(run: str) -> Path:
    p = Path(run)
    if p.is_dir():
        return p
    if p.is_absolute():
        raise FileNotFoundError(f"run folder {run!r} does not exist")
    alt = Path("results/runs") / run
    if alt.is_dir():
        return alt
    raise FileNotFoundError(f"run folder {run!r} does not exist (nor {alt})")


def draw_group(run_root: str | os.PathLike, *, iteration: int = -1, group: int | None = None,
               out: str | os.PathLike | None = None, compare: str | None = None,
               html: bool = True, edge_labels: bool = True) -> GroupDrawing:
    """Draw one task group of one recorded iteration (PNG and, by default, HTML).

    Args:
        run_root: the run folder.
        iteration: training iteration; -1 = the last recorded.
        group: task group id; None = :func:`g2po_bench.analysis.state_graph.choose_group`.
        out: the PNG path (default ``<run>/graphs/iter<K>_group<G>[_vs_<compare>].png``).
        compare: another registered estimator drawn beside the run's own (recomputed on the
            recorded steps), or None.
        html: also write the interactive HTML (same name, ``.html``).
        edge_labels: label PNG edges with their most frequent action.

    Returns:
        :class:`GroupDrawing`.

    Raises:
        FileNotFoundError: no run folder or no step table (see :func:`g2po_bench.core.steptable.read_step_table`).
        ValueError: unknown group or estimator, or PPO without recorded critic values.
    """
    # lazy: drawing imports matplotlib (about 1 s); `g2po --help` imports this module
    from g2po_bench.analysis.graph_plot import caption, draw_png, layered_layout, write_html

    table = read_step_table(run_root, iteration)
    it = table.iteration
    grp = choose_group(table) if group is None else int(group)
    success_reward = float(table.options.get("success_reward", 10.0))
    g = build_group_graph(group_rows(table, grp), success_reward=success_reward, iteration=it)
    panels = [(f"{table.estimator} (the run's credit)", g)]
    if compare is not None:
        g2 = build_group_graph(compared_rows(table, grp, compare), success_reward=success_reward,
                               iteration=it)
        panels.append((f"{compare} (recomputed on the same steps)", g2))
    opts = {k: v for k, v in table.options.items() if not isinstance(v, (list, dict))}
    text = caption(g, opts)
    if compare is not None:
        text += (f" Right: the same steps under {compare} with the run's common options "
                 "(same layout and colour scales).")
    pos = layered_layout(g)
    stem = f"iter{it}_group{grp}" + (f"_vs_{compare}" if compare else "")
    png = Path(out) if out is not None else Path(run_root) / "graphs" / f"{stem}.png"
    if png.suffix.lower() != ".png":
        png = png.with_suffix(".png")
    draw_png(panels, pos, png, caption_text=text, edge_labels=edge_labels)
    page = write_html(panels, pos, png.with_suffix(".html"), caption_text=text) if html else None
    return GroupDrawing(png=png, html=page, iteration=it, group=grp, graph=g, caption=text)


def run_graph(args: argparse.Namespace) -> int:
    """Run the ``graph`` command for parsed ``args``; prints the written paths. Returns 0, or 2
    with one line on stderr for a bad argument (no run, no recording, unknown group/estimator)."""
    try:
        root = _resolve_run(args.run)
        res = draw_group(root, iteration=args.iteration, group=args.group, out=args.out,
                         compare=args.compare, html=not args.no_html)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"png: {res.png}")
    if res.html is not None:
        print(f"html: {res.html}")
    print(res.caption)
    return 0


def report_state_graphs(runs, fig_dir: str | os.PathLike) -> tuple[list[tuple[str, GroupDrawing]], list[str]]:
    """One state-graph PNG per G2PO run of a report: the last recorded iteration (normally the
    final one), the group :func:`g2po_bench.analysis.state_graph.choose_group` picks.

    Args:
        runs: the ``runs`` frame of :func:`g2po_bench.analysis.load.load_runs` (``run_id``, ``path``,
            ``algorithm``).
        fig_dir: where the PNGs go (``state_graph_<run id>.png``).

    Returns:
        ``(drawn, not_drawn)``: ``(run_id, GroupDrawing)`` per drawn run, and one line per G2PO
        run without a drawing (no step tables: trained with ``record_graphs=false`` or copied
        without ``steps/``; or the error met). Never raises for one run's problem.
    """

    drawn: list[tuple[str, GroupDrawing]] = []
    missing: list[str] = []
    if runs is None or len(runs) == 0 or "algorithm" not in runs.columns:
        return drawn, missing
    for _, r in runs[runs["algorithm"] == "g2po"].iterrows():
        run_id, path = str(r["run_id"]), Path(str(r["path"]))
        if not recorded_iterations(path):
            flag = r.get("record_graphs")
            flag = bool(flag) if flag in (True, False) else None  # numpy bools of the frame too
            why = ("its config.yaml says record_graphs=true: this copy of its record was made without `steps/`"
                   if flag is True else
                   "trained with record_graphs=false" if flag is False else
                   "trained with record_graphs=false, or its record was copied without `steps/`")
            missing.append(f"state graph of `{run_id}`: no step tables in its folder ({why})")
            continue
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
        try:
            drawn.append((run_id, draw_group(path, out=Path(fig_dir) / f"state_graph_{safe}.png",
                                             html=False)))
        except Exception as exc:  # noqa: BLE001 - one run's drawing must not stop the report
            missing.append(f"state graph of `{run_id}`: {type(exc).__name__}: {exc}")
    return drawn, missing
