"""Figures and the end-to-end report on synthetic runs (partial, corrupt and in progress)."""

from __future__ import annotations

import argparse

import pytest
from synthetic_runs import make_eval, write_synthetic_run

from g2po_bench.analysis import figures as F
from g2po_bench.analysis.cli import add_report_arguments, main
from g2po_bench.analysis.load import load_runs
from g2po_bench.analysis.report import build_report
from g2po_bench.core.rundir import atomic_write_text

TYPES = [
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place",
]  # fmt: skip
PNG = b"\x89PNG\r\n\x1a\n"


def alf(v: float) -> dict[str, float]:
    return {t: v for t in TYPES}


def write_runs(root, *, diagnostics=True):
    for algo, level in (("grpo", 0.4), ("g2po", 0.6)):
        for seed in (0, 1):
            hist = [make_eval(i, level * i / 4 + 0.05 * seed, alf(level * i / 4)) for i in (2, 4)]
            metrics = []
            for i in range(1, 5):
                rec = {"iteration": i, "time_s": float(i)}
                if diagnostics and algo == "g2po":
                    rec.update({"adv/singleton_frac": 0.08 + 0.01 * i, "adv/node_size_mean": 4.5 + 0.2 * i})
                metrics.append(rec)
            write_synthetic_run(root / f"{algo}-s{seed}", algorithm=algo, seed=seed, before=make_eval(0, 0.05, alf(0.05)),
                                history=hist, final=hist[-1], metrics=metrics)  # fmt: skip
    write_synthetic_run(root / "g2po-s2-running", algorithm="g2po", seed=2, state="running", iterations=4,
                        history=[make_eval(2, 0.3, alf(0.3))], metrics=[{"iteration": i} for i in (1, 2, 3)])  # fmt: skip
    bad = write_synthetic_run(root / "broken", algorithm="g2po", seed=9, final=make_eval(4, 0.5, alf(0.5)))
    atomic_write_text(bad.config_path, "seed: [unclosed\n  : :")


def test_figures_tolerate_missing_data(tmp_path):
    write_runs(tmp_path / "runs", diagnostics=False)
    loaded = load_runs(tmp_path / "runs")
    out = tmp_path / "fig"
    assert F.plot_learning_curves(loaded.evals, out / "lc.png").read_bytes().startswith(PNG)
    assert F.plot_node_sizes(loaded.curves, out / "ns.png") is None
    assert "adv/node_size" in F.figure_skip_reason("node_sizes")
    assert F.plot_singleton_fraction(loaded.curves, out / "sf.png") is None
    assert F.plot_w_sweep(loaded.runs, out / "w.png") is None
    assert F.plot_ablation_ladder(loaded.runs, out / "a.png") is None
    assert F.plot_learning_curves(loaded.evals.iloc[:0], out / "x.png") is None
    assert not (out / "ns.png").exists() and not (out / "x.png").exists()


def test_figures_with_sweeps_and_histograms(tmp_path):
    root = tmp_path / "runs"
    for seed in (0, 1):
        for w in (0.5, 1.0):
            write_synthetic_run(root / f"w{w}-{seed}", env="webshop", mode="mean_norm", step_weight=w, seed=seed,
                                final=make_eval(4, 0.5 * w + 0.1 * seed, {"webshop": 0.5}, score=50.0),
                                metrics=[{"iteration": 1, "adv/node_size_hist": {"1": 3, "2": 5, "5": 2}}])  # fmt: skip
        write_synthetic_run(root / f"abl-{seed}", options={"aggregation": False}, seed=seed, final=make_eval(4, 0.3, alf(0.3)))
        write_synthetic_run(root / f"full-{seed}", seed=seed, final=make_eval(4, 0.6, alf(0.6)))
        write_synthetic_run(root / f"grpo-{seed}", algorithm="grpo", seed=seed, final=make_eval(4, 0.2, alf(0.2)))
    loaded = load_runs(root)
    out = tmp_path / "fig"
    for fn, frame, name in (
        (F.plot_w_sweep, loaded.runs, "w.png"),
        (F.plot_ablation_ladder, loaded.runs, "a.png"),
        (F.plot_node_sizes, loaded.curves, "ns.png"),
    ):
        p = fn(frame, out / name)
        assert p is not None and p.read_bytes().startswith(PNG), name


def test_report_end_to_end(tmp_path):
    write_runs(tmp_path / "runs")
    res = build_report(tmp_path / "runs", tmp_path / "out", n_boot=500)
    report = res.report_path
    assert report == tmp_path / "out" / "report.md" and report.exists()
    text = report.read_text(encoding="utf-8")
    for heading in ("## Table 1", "## Table 2", "confidence intervals", "IQM", "## Figures", "## What is missing"):
        assert heading in text, heading
    # tables are in the report, with ours beside the reference
    assert "| Model | Method | Seeds | Pick | Pick ref. | Pick Δ |" in text
    # the synthetic runs train 4 iterations: short (†) against the default minimum, listed
    assert "| tiny | GRPO | 2 | 40.0 ± 0.0† | — | — |" in text
    assert "| 1.5B | GRPO | — | — | 85.3 ± 1.5 | — |" in text
    assert "- `grpo-s0`: 4 RL iterations (minimum 54; longest alfworld tiny run here: 4)" in text
    # the in-progress run counts, flagged
    assert "| tiny | G2PO | 3 | 50.0 ± 17.3*† |" in text
    assert "`g2po-s2-running`: iteration 3/4" in text
    # the broken run is listed as skipped with its reason
    assert "`broken`: config.yaml does not parse" in text
    # missing published cells are listed
    assert "- Table 1, G2PO (1.5B): all 9 cells" in text
    assert "- Table 2, G2PO (14B): all 2 cells" in text
    out = tmp_path / "out"
    for name in ("table1.md", "table1.tex", "table2.md", "table2.tex", "runs.csv", "cells.csv", "table1_cells.csv"):
        assert (out / name).stat().st_size > 0, name
    for fig in ("learning_curves", "node_sizes", "singleton_fraction"):
        png = out / "figures" / f"{fig}.png"
        assert png.read_bytes().startswith(PNG) and f"](figures/{fig}.png)" in text
    assert "- w_sweep:" in text and "- ablation_ladder:" in text  # not drawn, with a reason
    assert res.figures["w_sweep"] is None


def test_report_on_empty_folder_and_cli(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    p = build_report(tmp_path / "empty", tmp_path / "r0", figures=False).report_path
    text = p.read_text(encoding="utf-8")
    assert "Runs: 0 included" in text and "| 1.5B | G2PO | — | — | ≈97.2 | — |" in text
    write_runs(tmp_path / "runs")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "r1"), "--n-boot", "200", "--no-figures"]) == 0
    assert (tmp_path / "r1" / "report.md").exists()
    assert "skipped broken" in capsys.readouterr().out
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "r2")]) == 2
    args = add_report_arguments(argparse.ArgumentParser()).parse_args(["results/runs"])
    assert (args.results_dir, args.out, args.which, args.n_boot) == ("results/runs", None, "final", 10_000)
    with pytest.raises(ValueError):
        build_report(tmp_path / "runs", tmp_path / "r3", which="before")


def _legacy_eval_folder(root, run):
    """What ``g2po eval --run RUN`` wrote before: a sibling ``RUN-eval`` folder holding the
    run's config.yaml and an eval.json of its checkpoint."""
    from g2po_bench.core.rundir import RunDir, atomic_write_json

    ev = make_eval(0, 0.9, alf(0.9))
    out = RunDir(root / f"{run.root.name}-eval").create()
    atomic_write_text(out.config_path, run.config_path.read_text())
    atomic_write_json(out.eval_path, {"env": "alfworld", "model": str(run.checkpoint_dir / "policy"),
                                      "history": [ev], "before": ev, "final": ev, "best": ev})
    return out


def test_an_evaluation_folder_is_not_a_seed(tmp_path, capsys):
    root = tmp_path / "runs"
    run = write_synthetic_run(root / "alfworld-g2po-s0", algorithm="g2po", seed=0, final=make_eval(4, 0.5, alf(0.5)),
                              model_path="/models/Qwen2.5-1.5B-Instruct")
    _legacy_eval_folder(root, run)
    res = build_report(root, tmp_path / "out", figures=False, n_boot=200)
    g2po = res.cells[res.cells["method"] == "G2PO"]
    assert len(g2po) and set(g2po["n"]) == {1}  # the old report: 2 seeds, mean of 50 % and 90 %
    assert set(g2po.loc[g2po["metric"] == "success_all", "mean"]) == {50.0}
    args = add_report_arguments(argparse.ArgumentParser()).parse_args([str(root), "--out", str(tmp_path / "o2"),
                                                                      "--no-figures", "--n-boot", "50"])
    from g2po_bench.analysis.cli import run_report

    assert run_report(args) == 0
    out = capsys.readouterr().out
    assert "runs: 1 included" in out
    assert "skipped alfworld-g2po-s0-eval: evaluation-only folder" in out


def test_duplicate_seeds_are_an_error_naming_both_folders(tmp_path, capsys):
    from g2po_bench.cli import main as g2po_main

    root = tmp_path / "runs"
    for name in ("a", "b"):
        write_synthetic_run(root / name, algorithm="grpo", seed=3, final=make_eval(4, 0.5, alf(0.5)))
    assert g2po_main(["report", str(root), "--no-figures", "--n-boot", "50"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert f"{str(root / 'a')!r} and {str(root / 'b')!r}" in err and "GRPO, tiny, alfworld, seed 3" in err


def test_report_says_which_commit_and_machine_made_each_run(tmp_path):
    """runs.csv and report.md carry status.json's code and machine; a run without them says so."""
    import json

    import pandas as pd

    write_runs(tmp_path / "runs")
    epyc = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "cpus": 2, "torch": "2.13.0+cpu",
            "python": "3.11.7", "platform": "Linux"}  # fmt: skip
    for run, code, machine in (("grpo-s0", {"commit": "a" * 40, "dirty": False}, epyc),
                               ("grpo-s1", {"commit": "a" * 40, "dirty": False}, epyc),
                               ("g2po-s0", {"commit": "b" * 40, "dirty": True}, epyc),
                               ("g2po-s1", None, None)):  # fmt: skip
        path = tmp_path / "runs" / run / "status.json"
        status = json.loads(path.read_text(encoding="utf-8"))
        status.pop("code", None), status.pop("machine", None)
        if code:
            status.update(code=code, machine=machine)
        path.write_text(json.dumps(status), encoding="utf-8")
    res = build_report(tmp_path / "runs", tmp_path / "out", n_boot=200, figures=False)
    text = res.report_path.read_text(encoding="utf-8")
    label = "AMD EPYC (2 CPUs, torch 2.13.0+cpu AVX512 kernels)"
    assert "## Code and machines" in text
    assert f"| `aaaaaaa` | clean | {label} | 2: `grpo-s0`, `grpo-s1` |" in text
    assert f"| `bbbbbbb` | dirty | {label} | 1: `g2po-s0` |" in text
    assert "| `not recorded` | not recorded | not recorded | 1: `g2po-s1` |" in text
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("run_id")
    assert runs.loc["g2po-s0", "code.commit"] == "b" * 40 and bool(runs.loc["g2po-s0", "code.dirty"])
    assert runs.loc["grpo-s1", "machine"] == label and pd.isna(runs.loc["g2po-s1", "machine"])


def test_a_short_run_is_flagged_in_the_tables_and_listed(tmp_path):
    """Issue 39, item 8: a 1-iteration run entered the report tables like a full one. A training
    run with fewer RL iterations than --min-iterations (default: the CPU default's 54) or than the
    longest run of its environment and model size in the report is marked † and listed."""
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_synthetic_run(root / f"grpo-s{seed}", algorithm="grpo", seed=seed, iterations=54,
                            final=make_eval(54, 0.4, alf(0.4)))
    write_synthetic_run(root / "g2po-s0", algorithm="g2po", seed=0, iterations=54, final=make_eval(54, 0.6, alf(0.6)))
    write_synthetic_run(root / "g2po-s1", algorithm="g2po", seed=1, iterations=1, final=make_eval(1, 0.2, alf(0.2)))
    res = build_report(root, tmp_path / "out", n_boot=200, figures=False)
    text = res.report_path.read_text(encoding="utf-8")
    assert "| tiny | GRPO | 2 | 40.0 ± 0.0 | — | — |" in text  # 54 iterations: not short
    assert "| tiny | G2PO | 2 | 40.0 ± 28.3† |" in text  # includes the 1-iteration run
    assert "- `g2po-s1`: 1 RL iterations (minimum 54; longest alfworld tiny run here: 54)" in text
    assert "† = includes a short run" in text
    runs = res.loaded.runs.set_index("run_id")
    assert runs.loc["g2po-s1", "short_run"] and not runs.loc["g2po-s0", "short_run"]
    assert runs.loc["g2po-s1", "iterations"] == 1
    cell = res.tables["table1"].cells
    ours = cell[(cell["model_size"] == "tiny") & (cell["metric"] == "success_all")].set_index("method")["short_run"]
    assert ours.to_dict() == {"GRPO": False, "G2PO": True}
    # shorter than the longest run here, whatever the minimum
    relaxed = build_report(root, tmp_path / "out2", n_boot=200, figures=False, min_iterations=0)
    runs = relaxed.loaded.runs.set_index("run_id")
    assert runs["short_run"].to_dict() == {"grpo-s0": False, "grpo-s1": False, "g2po-s0": False, "g2po-s1": True}
