"""Analysis: run folders -> the paper's tables (beside the published numbers), figures, a report.

One concept per module:

- :mod:`g2po_bench.analysis.naming`: config -> method / variant / model size; metric and row order.
- :mod:`g2po_bench.analysis.load`: :func:`~g2po_bench.analysis.load.load_runs` (runs, curves, evals frames + problems).
- :mod:`g2po_bench.analysis.aggregate`: mean ± std, bootstrap CIs, IQM (rliable) over seeds.
- :mod:`g2po_bench.analysis.tables`: Table 1 / Table 2 with reference and difference; Markdown and LaTeX.
- :mod:`g2po_bench.analysis.figures`: learning curves, ablation ladder, w sweep, node-size diagnostics.
- :mod:`g2po_bench.analysis.report`: :func:`~g2po_bench.analysis.report.build_report` -> ``report.md``.
- :mod:`g2po_bench.analysis.cli`: ``g2po report RESULTS_DIR --out DIR`` arguments and action.
- :mod:`g2po_bench.analysis.state_graph`: one task group's state graph (networkx) from a recorded step table.
- :mod:`g2po_bench.analysis.graph_plot`: its PNG (networkx + matplotlib) and interactive HTML (plotly).
- :mod:`g2po_bench.analysis.graph_cli`: ``g2po graph RUN --iteration K --group G [--compare gigpo]``.

Submodules are imported on use (matplotlib/seaborn only load with :mod:`g2po_bench.analysis.figures`).
"""
