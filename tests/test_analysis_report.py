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
    assert (args.results_dir, args.out, args.which, args.n_boot) == (["results/runs"], None, "final", 10_000)
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


# ---------------------------------------------------------------------------- variants of a set of runs
def _toy_ablation_spec(path):
    """A user's own ablation spec as the docs teach it: algorithm.options.aggregation x algorithm.mode on
    the toy corridor, toy sizes, two seeds."""
    import yaml

    spec = {
        "name": "my_ablation",
        "base": {"config": {"env": {"name": "toy", "max_steps": 4, "num_workers": 1},
                            "train": {"iterations": 2, "groups_per_batch": 2, "group_size": 2, "sft_epochs": 1},
                            "model": {"hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "vocab_size": 300},
                            "eval": {"num_tasks": 4, "every": 0}}},
        "grid": {"algorithm.options.aggregation": [True, False], "algorithm.mode": ["mean_std_norm", "mean_norm"]},
        "seeds": [0, 1],
        "resources": {"gpus": 0, "cpus": 1, "mem_gb": 2, "time": 20},
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_toy_ablation_spec_reports_each_setting_as_a_variant(tmp_path, capsys):
    """Issue 51: a grid of algorithm.options.aggregation x algorithm.mode on the toy corridor ran, then
    `g2po report` exited 2 ("runs with the same method/size/env/seed would each count as a seed: G2PO
    [aggregation=false] ..."): the mode made a variant on ALFWorld and WebShop only. Any common option
    that differs between the runs of one method now makes one, on every benchmark. The run folders hold
    the configs the spec plans (sweeps.spec.expand), as its runs write them."""
    import yaml
    from synthetic_runs import panel_episodes, write_run_with_config

    from g2po_bench.cli import main as g2po_main
    from g2po_bench.sweeps.spec import expand, load_spec

    planned = expand(load_spec(_toy_ablation_spec(tmp_path / "my_ablation.yaml")))
    assert len(planned) == 8
    succ = {("true", "mean_std_norm"): [1, 1, 0, 0], ("true", "mean_norm"): [1, 0, 0, 0],
            ("false", "mean_std_norm"): [1, 1, 1, 0], ("false", "mean_norm"): [0, 0, 0, 0]}
    for run in planned:
        cfg = yaml.safe_load(run.config_yaml)
        wins = succ[(str(cfg["algorithm"]["options"]["aggregation"]).lower(), cfg["algorithm"]["mode"])]
        final = {**make_eval(2, sum(wins) / 4), "episodes": panel_episodes(wins)}
        write_run_with_config(tmp_path / "runs" / run.run_id, {**cfg, "run_id": run.run_id}, final=final)
    assert g2po_main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--n-boot", "200"]) == 0
    capsys.readouterr()
    res = build_report(tmp_path / "runs", tmp_path / "report", n_boot=200, figures=False)
    labels = res.loaded.runs.groupby("method_label")["seed"].apply(sorted).to_dict()
    assert labels == {"G2PO [aggregation=true]": [0, 1], "G2PO [aggregation=true, norm=mean_norm]": [0, 1],
                      "G2PO [aggregation=false]": [0, 1], "G2PO [aggregation=false, norm=mean_norm]": [0, 1]}
    text = res.report_path.read_text(encoding="utf-8")
    assert "## Ablations and variants" in text
    for label, wins in (("G2PO [aggregation=false]", 3), ("G2PO [aggregation=true, norm=mean_norm]", 1)):
        # (toy sizes: 2 RL iterations, marked short)
        assert f"| tiny | {label} | 2 | {wins * 25:.1f} ± 0.0† |" in res.tables["variants"].to_markdown()
    # the paired differences pair the variants like any two rows: 2/4 - 3/4 on both seeds
    frame = pd_read(tmp_path / "report" / "differences.csv").set_index(["method_label", "baseline_label"])
    row = frame.loc[("G2PO [aggregation=true]", "G2PO [aggregation=false]")]
    assert row["difference"] == pytest.approx(-25.0) and row["seeds"] == 2
    assert (tmp_path / "report" / "figures" / "paired_differences.png").is_file()  # drawn by the CLI's report


def pd_read(path):
    import pandas as pd

    return pd.read_csv(path)


COMMITTED = __import__("pathlib").Path(__file__).resolve().parents[1] / "results" / "proxy" / "sweep" / "runs"


def test_an_ablation_beside_the_committed_comparison_gets_variant_rows_and_paired_differences(tmp_path, capsys):
    """The lead's ablation (sweeps/specs/cpu_ablation): G2PO without state aggregation, G2PO and GRPO with
    mean_norm, 5 seeds each, in their own folder, reported beside the committed comparison with
    `g2po report ABLATION_RUNS results/proxy/sweep/runs --methods G2PO GRPO`: the committed rows keep their
    names, the ablations are variants, and each is paired with its main row by seed and panel task
    (hand-made panels: the aggregation=false runs win every episode, the G2PO mean_norm runs none, the GRPO
    mean_norm runs replay GRPO's episodes)."""
    import json

    import yaml
    from synthetic_runs import write_run_with_config

    from g2po_bench.cli import main as g2po_main

    ablation = tmp_path / "ablation" / "runs"
    finals = {}
    for run in sorted(COMMITTED.iterdir()):
        algo, seed = run.name.split("-")[1], int(run.name.split("-")[2][1:])
        if algo in ("g2po", "grpo"):
            finals[algo, seed] = (yaml.safe_load((run / "config.yaml").read_text()),
                                  json.loads((run / "eval.json").read_text())["final"])
    for (algo, seed), (cfg, final) in sorted(finals.items()):
        changes = {"g2po": [("aggregation=false", {"options": {"aggregation": False}}, 1.0),
                            ("mean_norm", {"mode": "mean_norm"}, 0.0)],
                   "grpo": [("mean_norm", {"mode": "mean_norm"}, None)]}[algo]
        for tag, algorithm, win in changes:
            eps = [[t, win if win is not None else s] for t, s in final["episodes"]]
            by_type: dict[str, list[float]] = {}
            for t, s in eps:  # "eval/<task type>-<object>-...": the panel's task types
                by_type.setdefault(t.split("/")[1].split("-")[0], []).append(s)
            ev = {**final, "episodes": eps, "success_rate": sum(s for _, s in eps) / len(eps),
                  "per_task_type": {k: sum(v) / len(v) for k, v in by_type.items()}}
            config = {**cfg, "algorithm": {**cfg["algorithm"], **algorithm}, "run_id": f"{algo}-{tag}-s{seed}"}
            write_run_with_config(ablation / f"{algo}-{tag}-s{seed}", config, final=ev)
    out = tmp_path / "report"
    assert g2po_main(["report", str(ablation), str(COMMITTED), "--methods", "G2PO", "GRPO", "--out", str(out),
                      "--no-figures", "--n-boot", "200"]) == 0
    capsys.readouterr()
    runs = pd_read(out / "runs.csv")
    assert runs.groupby("method_label").size().to_dict() == {
        "G2PO": 5, "GRPO": 5, "G2PO [aggregation=false]": 5, "G2PO [norm=mean_norm]": 5, "GRPO [norm=mean_norm]": 5}
    diff = pd_read(out / "differences.csv").set_index(["method_label", "baseline_label"])
    g2po_final = 100 * sum(f["success_rate"] for (a, _), (_, f) in finals.items() if a == "g2po") / 5
    assert g2po_final == pytest.approx(44.0)  # the committed G2PO row (results/proxy/report)
    assert diff.loc[("G2PO [aggregation=false]", "G2PO"), "difference"] == pytest.approx(100 - 44.0)
    assert diff.loc[("G2PO [norm=mean_norm]", "G2PO"), "difference"] == pytest.approx(-44.0)
    assert diff.loc[("GRPO [norm=mean_norm]", "GRPO"), "difference"] == pytest.approx(0.0)
    assert diff.loc[("G2PO", "GRPO"), "difference"] == pytest.approx(7.3, abs=0.05)  # as committed
    assert (diff["seeds"] == 5).all()
    text = (out / "report.md").read_text(encoding="utf-8")
    assert f"Results folders: `{ablation}`, `{COMMITTED}`" in text
    assert "| tiny | G2PO [aggregation=false] | 5 | 100.0 ± 0.0 |" in text  # the variants table
    # a method no run has is one line naming those there are
    assert g2po_main(["report", str(ablation), "--methods", "PPO", "--out", str(out), "--no-figures"]) == 2
    assert "no run of PPO; the methods here: G2PO, GRPO" in capsys.readouterr().err


def test_the_paired_differences_are_drawn_as_a_forest_plot_linked_from_the_report(tmp_path):
    """Issue 51: the README's headline is a table of paired differences, and no figure showed them. The
    report draws figures/paired_differences.png (dot = difference, bar = CI) and links it."""
    from synthetic_runs import panel_episodes, write_run_with_config

    root = tmp_path / "runs"
    wins = {"grpo": [1, 0, 0, 0, 1, 0], "g2po": [1, 1, 0, 1, 1, 0], "gigpo": [1, 1, 0, 0, 1, 0]}
    for algo, w in wins.items():
        for seed in (0, 1, 2):
            cfg = {"seed": seed, "env": {"name": "alfworld"}, "model": {"path": None}, "train": {"iterations": 2},
                   "algorithm": {"name": algo, "mode": "mean_std_norm", "step_weight": 1.0, "options": {}}}
            final = {**make_eval(2, sum(w) / 6), "episodes": panel_episodes(w)}
            write_run_with_config(root / f"{algo}-s{seed}", cfg, final=final)
    res = build_report(root, tmp_path / "report", n_boot=200)
    png = tmp_path / "report" / "figures" / "paired_differences.png"
    assert res.figures["paired_differences"] == png and png.read_bytes()[:8] == PNG
    text = res.report_path.read_text(encoding="utf-8")
    assert "![paired_differences](figures/paired_differences.png)" in text
    assert "Figure: [figures/paired_differences.png](figures/paired_differences.png)" in text
    assert F.plot_paired_differences({}, tmp_path / "none.png") is None
    assert "no pair of methods" in F.figure_skip_reason("paired_differences")


def test_a_tiny_baseline_row_is_marked_and_kept_out_of_the_step_level_table(tmp_path):
    """Issue 51: a 1-task, 2-step ReAct run stood beside the published ReAct row without a mark, and in
    the table of the 2026 step-level estimators. It is marked † with its tasks and steps, and only
    Table 1 shows it."""
    cfg = {"seed": 0, "kind": "baseline", "baseline": {"name": "react"},
           "env": {"name": "alfworld", "max_steps": 2, "eval_split": "valid_seen"},
           "eval": {"num_tasks": 1}, "model": {"path": "/models/Qwen2.5-1.5B-Instruct"}}
    from synthetic_runs import write_run_with_config

    write_run_with_config(tmp_path / "runs" / "react", cfg, final=make_eval(0, 0.0, alf(0.0), num_episodes=1))
    full = {**cfg, "env": {**cfg["env"], "max_steps": 50}, "eval": {"num_tasks": 0},
            "model": {"path": "/models/Qwen2.5-7B-Instruct"}}
    write_run_with_config(tmp_path / "runs" / "react-7b", full, final=make_eval(0, 0.5, alf(0.5)))
    write_synthetic_run(tmp_path / "runs" / "g2po", algorithm="g2po", seed=0, iterations=54,
                        final=make_eval(54, 0.5, alf(0.5)))
    res = build_report(tmp_path / "runs", tmp_path / "report", n_boot=50, figures=False)
    text = res.report_path.read_text(encoding="utf-8")
    t1 = res.tables["table1"].to_markdown()
    assert "| 1.5B | ReAct | 1 | 0.0 ± n/a† | 17.4 | -17.4 |" in t1
    assert "| 7B | ReAct | 1 | 50.0 ± n/a | 48.5 | +1.5 |" in t1  # the published protocol: no mark
    assert ("- `react` (ReAct, prompting baseline): 1 task, 2 steps (the published protocol: the whole "
            "valid_seen split, 50 steps)") in text
    step = res.tables["step_2026"]
    assert {m for _, m in step.rows} == {"GRPO", "GiGPO", "GraphGPO", "HGPO", "CRBC", "G2PO"}
