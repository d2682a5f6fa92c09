"""State graphs rebuilt from recorded step tables (g2po_bench/core/steptable.py, analysis/state_graph.py):
the numbers of a rebuilt group graph are the estimator's own numbers for that group, and
``g2po graph`` / ``g2po report`` draw them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fake_rollouts import TOY, TokenPolicy, act

from g2po_bench.algorithms.backends.common import record_step_table
from g2po_bench.algorithms.registry import bind_run_estimator, estimate
from g2po_bench.analysis.state_graph import (
    FAILURE,
    SUCCESS,
    build_group_graph,
    choose_group,
    compared_rows,
    graph_counts,
    group_rows,
    recompute,
)
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import collect_rollouts, state_label
from g2po_bench.cli import main as cli_main
from g2po_bench.core.config import config_hash
from g2po_bench.core.steptable import read_step_table, recorded_iterations, write_step_table
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool

COMMON = ("mode", "gamma", "step_weight", "invalid_penalty", "success_reward")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Three toy task groups of 8 rollouts (valid moves, 'look' and untagged outputs, so the
    graphs have shared nodes, self-loops, successes and failures) recorded as iteration 3."""
    root = tmp_path_factory.mktemp("run")
    cfg = load_config(None, ["env.name=toy"])
    tasks = TOY.load_tasks(None, "train")[2:5]  # corridors of 4, 5, 6 rooms
    pol = TokenPolicy([act("go east"), act("go east"), act("go west"), act("look"), "no tags"])
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        rb = collect_rollouts(pol, pool, TOY, tasks, group_size=8, max_steps=8, temperature=1.0,
                              max_new_tokens=8, seed=1)
    res = bind_run_estimator(cfg)(rb)
    info = record_step_table(root, cfg, rb, res, 3)
    return root, cfg, rb, res, info


def _independent_values(rows: pd.DataFrame, gamma: float) -> dict[int, float]:
    """V(n) by hand from the recorded rows: mean over visits of gamma^(T - t) * R_tau."""
    r = rows.copy()
    r["T"] = r.groupby("traj_id")["step"].transform("size")
    r["R"] = r.groupby("traj_id")["reward"].transform("sum")
    r["v"] = gamma ** (r["T"] - r["step"]) * r["R"]
    return r.groupby("state_key")["v"].mean().to_dict()


def test_recorded_file_is_compact_and_faithful(recorded):
    root, cfg, rb, res, info = recorded
    assert recorded_iterations(root) == [3]
    table = read_step_table(root, -1)
    f = table.frame
    assert info["record/bytes"] == (root / "steps" / "iter_00003.parquet").stat().st_size
    assert info["record/bytes"] < 40_000  # 3 groups x 8 rollouts, up to 8 steps
    assert len(f) == len(rb.steps)
    np.testing.assert_array_equal(f["state_key"].to_numpy(), rb.steps.state_key)
    np.testing.assert_array_equal(f["valid"].to_numpy(), rb.steps.action_valid)
    np.testing.assert_array_equal(f["advantage"].to_numpy(), res.advantages)
    np.testing.assert_array_equal(f["node_value"].to_numpy(), res.row_terms["node_value"])
    assert f["action"].tolist() == [a[:80] for a in rb.actions]
    assert f["state_label"].tolist() == [state_label(t) for t in rb.state_texts]
    assert set(f["action"]) >= {"go east", "go west", "look"}
    assert table.estimator == "g2po" and table.iteration == 3
    assert {k: table.options[k] for k in COMMON} == {
        "mode": "mean_std_norm", "gamma": 0.95, "step_weight": 1.0, "invalid_penalty": 0.1,
        "success_reward": 10.0}
    assert table.row_terms == sorted(res.row_terms)


@pytest.mark.parametrize("group", [0, 1, 2])
def test_rebuilt_graph_equals_the_estimators_numbers(recorded, group):
    root, cfg, rb, res, _ = recorded
    table = read_step_table(root, 3)
    rows = group_rows(table, group)
    g = build_group_graph(rows, success_reward=10.0, iteration=3)
    counts = graph_counts(g)

    # the estimator's own diagnostics on this group alone (graph per task group)
    sub = table.frame[table.frame["group_id"] == group]
    opts = {k: table.options[k] for k in COMMON}
    own = recompute(
        type(table)(frame=sub.reset_index(drop=True), meta=table.meta), "g2po")[0]
    diag = own.diagnostics
    assert counts["nodes"] == diag["nodes_per_group"]
    assert counts["edges"] == diag["edges_per_group"]
    assert counts["node_size_max"] == diag["node_size_max"]
    assert counts["singleton_frac"] == pytest.approx(diag["singleton_frac"], abs=1e-12)
    assert counts["rows"] == len(sub)
    # ... which the group-scope estimator also gives when it runs on the whole batch
    np.testing.assert_allclose(own.advantages, estimate("g2po", rb.steps, **opts).advantages[sub.index],
                               atol=1e-12)

    # node values: by hand, and the estimator's recorded V(n)
    by_hand = _independent_values(sub, 0.95)
    for _n, d in g.nodes(data=True):
        if d["kind"] == "success":
            assert d["value"] == 10.0
            assert d["visits"] == int(sub.groupby("traj_id")["success"].first().sum())
        elif d["kind"] == "failure":
            assert d["value"] == 0.0
        else:
            assert d["value"] == pytest.approx(by_hand[d["state_key"]], abs=1e-12)
            member = sub["state_key"] == d["state_key"]
            assert d["visits"] == int(member.sum())
            assert d["trajectories"] == sub.loc[member, "traj_id"].nunique()
            np.testing.assert_allclose(sub.loc[member, "node_value"], d["value"], atol=1e-12)

    # edge counts: by hand from (state, next state) pairs; every row is on exactly one edge
    s = sub.sort_values(["traj_id", "step"])
    key_of = {d["state_key"]: n for n, d in g.nodes(data=True) if d["state_key"] is not None}
    src = [key_of[k] for k in s["state_key"]]
    last = np.append(s["traj_id"].to_numpy()[1:] != s["traj_id"].to_numpy()[:-1], True)
    dst = [src[i + 1] if not last[i] else (SUCCESS if ok else FAILURE)
           for i, ok in enumerate(s["success"].to_numpy())]
    pairs = pd.DataFrame({"u": src, "v": dst, "traj": s["traj_id"].to_numpy(),
                          "adv": s["advantage"].to_numpy(), "action": s["action"].to_numpy()})
    expected = pairs.groupby(["u", "v"]).agg(rows=("traj", "size"), traj=("traj", "nunique"),
                                             adv=("adv", "mean"))
    assert g.number_of_edges() == len(expected)
    for (u, v), e in expected.iterrows():
        d = g.edges[u, v]
        assert d["rows"] == e["rows"] and d["trajectories"] == e["traj"]
        assert d["advantage"] == pytest.approx(e["adv"], abs=1e-12)
        assert sum(c for _, c in d["actions"]) == e["rows"]
        assert d["self_loop"] == (u == v)
    assert sum(d["rows"] for *_, d in g.edges(data=True)) == len(sub)
    assert g.graph["num_trajectories"] == 8
    assert g.graph["success_rate"] == pytest.approx(sub.groupby("traj_id")["success"].first().mean())


def test_graphs_have_self_loops_terminals_and_a_start(recorded):
    root, *_ = recorded
    table = read_step_table(root, 3)
    g = build_group_graph(group_rows(table, choose_group(table)), iteration=3)
    kinds = [d["kind"] for _, d in g.nodes(data=True)]
    assert kinds.count("start") == 1
    assert any(d["self_loop"] for *_, d in g.edges(data=True))  # 'look' and untagged outputs
    assert {SUCCESS, FAILURE} <= set(g.nodes)  # chosen group has mixed outcomes
    start = next(n for n, d in g.nodes(data=True) if d["kind"] == "start")
    assert g.nodes[start]["layer"] == 0
    assert g.nodes[SUCCESS]["layer"] == max(d["layer"] for _, d in g.nodes(data=True))


def test_batch_diagnostics_are_the_mean_over_rebuilt_groups(recorded):
    """The run's logged ``adv/nodes_per_group`` and ``adv/edges_per_group`` (whole batch)."""
    root, _, _, res, _ = recorded
    table = read_step_table(root, 3)
    counts = [graph_counts(build_group_graph(group_rows(table, k))) for k in range(3)]
    assert np.mean([c["nodes"] for c in counts]) == pytest.approx(res.diagnostics["nodes_per_group"])
    assert np.mean([c["edges"] for c in counts]) == pytest.approx(res.diagnostics["edges_per_group"])


def test_compare_recomputes_gigpo_on_the_recorded_steps(recorded):
    root, cfg, rb, *_ = recorded
    table = read_step_table(root, 3)
    opts = {k: table.options[k] for k in COMMON}
    want = estimate("gigpo", rb.steps, **opts)
    rows = compared_rows(table, 1, "gigpo")
    idx = table.frame.index[table.frame["group_id"] == 1]
    np.testing.assert_allclose(rows.frame["advantage"].to_numpy(), want.advantages[idx], atol=1e-12)
    np.testing.assert_allclose(rows.frame["value"].to_numpy(), want.row_terms["node_value"][idx], atol=1e-12)
    g = build_group_graph(rows)
    assert g.graph["estimator"] == "gigpo" and g.graph["value_symbol"] == "G"
    rows_grpo = compared_rows(table, 1, "grpo")
    assert rows_grpo.value_name is None
    assert all(d["value"] is None for _, d in build_group_graph(rows_grpo).nodes(data=True)
               if d["kind"] in ("start", "state"))
    with pytest.raises(ValueError, match="critic values"):
        compared_rows(table, 1, "ppo")
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compared_rows(table, 1, "nope")
    with pytest.raises(ValueError, match="recorded groups: 0, 1, 2"):
        group_rows(table, 9)


def test_graph_command_writes_png_and_html(recorded, tmp_path, capsys):
    root, *_ = recorded
    out = tmp_path / "g.png"
    assert cli_main(["graph", str(root), "--iteration", "3", "--group", "1", "--out", str(out),
                     "--compare", "gigpo"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = out.with_suffix(".html").read_text()
    assert "plotly" in html and "go east" in html
    assert (tmp_path / "plotly.min.js").exists()
    printed = capsys.readouterr().out
    assert "task group 1" in printed and "success" in printed and "g2po" in printed
    # default output path: inside the run, group chosen automatically
    assert cli_main(["graph", str(root), "--no-html"]) == 0
    assert (root / "graphs" / f"iter3_group{choose_group(read_step_table(root, 3))}.png").exists()


@pytest.mark.parametrize("argv, message", [
    (["graph", "/no/such/run"], "run folder '/no/such/run' does not exist"),
    (["graph", "no_such_run"], "run folder 'no_such_run' does not exist (nor results/runs/no_such_run)"),
    (["graph", "{root}", "--iteration", "7"], "recorded iterations: 3"),
    (["graph", "{root}", "--group", "9"], "no task group 9"),
    (["graph", "{root}", "--compare", "ppo"], "critic values"),
])
def test_graph_command_errors_are_one_line_exit_2(recorded, capsys, argv, message):
    root, *_ = recorded
    argv = [a.replace("{root}", str(root)) for a in argv]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert "//" not in err  # an absolute path is not appended to results/runs/


def test_step_table_errors(tmp_path):
    with pytest.raises(ValueError, match="lacks column"):
        write_step_table(tmp_path, 1, {"group_id": [0]}, {})
    with pytest.raises(FileNotFoundError, match="record_graphs=false"):
        read_step_table(tmp_path, 1)


def test_state_label():
    assert state_label("You arrive at cabinet 1. The cabinet 1 is closed.\nAdmissible actions:\n 'look'\n") \
        == "You arrive at cabinet 1."
    assert state_label("\n\nroom 3") == "room 3"
    long = "x" * 100
    assert state_label(long, 20) == "x" * 17 + "..." and len(state_label(long, 20)) == 20
    assert state_label("") == ""


def test_record_graphs_is_on_by_default_off_in_gpu_presets_and_not_in_the_hash():
    cpu = load_config()
    assert cpu.record_graphs is True
    off = load_config(None, ["record_graphs=false"])
    assert config_hash(off) == config_hash(cpu)
    gpu = load_config(None, ["model.path=.", "env.data_dir=."], preset="alfworld_1.5b")
    assert gpu.record_graphs is False


def test_training_records_step_tables_and_report_draws_one(tmp_path):
    """A short local training run (toy env) records one table per iteration; the rebuilt
    graphs match the diagnostics it logged; ``g2po report`` adds the state graph."""
    from g2po_bench.analysis.report import build_report
    from g2po_bench.core.rundir import read_jsonl
    from g2po_bench.train import run_train

    cfg = load_config(None, [
        "env.name=toy", "env.max_steps=4", "env.num_workers=1", "train.iterations=2",
        "train.groups_per_batch=2", "train.group_size=3", "train.sft_epochs=2", "train.sft_batch_size=8",
        "train.max_response_tokens=12", "model.hidden_size=32", "model.intermediate_size=64",
        "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=3", "eval.every=0", "progress=false",
        f"output_dir={tmp_path / 'runs'}", f"train.warm_start_cache={tmp_path / 'warm_start'}",
    ])
    run = run_train(cfg)
    assert recorded_iterations(run.root) == [1, 2]
    for m in read_jsonl(run.metrics_path):
        path = run.root / "steps" / f"iter_{m['iteration']:05d}.parquet"
        assert m["record/bytes"] == path.stat().st_size
        table = read_step_table(run.root, m["iteration"])
        assert len(table.frame) == m["train/steps"]
        groups = sorted(table.frame["group_id"].unique())
        counts = [graph_counts(build_group_graph(group_rows(table, int(k)))) for k in groups]
        assert np.mean([c["nodes"] for c in counts]) == pytest.approx(m["adv/nodes_per_group"])
        assert np.mean([c["edges"] for c in counts]) == pytest.approx(m["adv/edges_per_group"])
    res = build_report(tmp_path / "runs", tmp_path / "report", n_boot=50)
    text = res.report_path.read_text()
    assert "## State graphs (G2PO runs)" in text
    pngs = list((tmp_path / "report" / "figures").glob("state_graph_*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 0
    assert json.loads(run.status_path.read_text())["state"] == "done"


def test_training_with_record_graphs_off_writes_no_tables(tmp_path):
    from g2po_bench.train import run_train

    cfg = load_config(None, [
        "env.name=toy", "env.max_steps=3", "env.num_workers=1", "train.iterations=1",
        "train.groups_per_batch=1", "train.group_size=2", "train.sft_epochs=0",
        "train.max_response_tokens=8", "model.hidden_size=32", "model.intermediate_size=64",
        "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=1", "eval.every=0", "progress=false",
        f"output_dir={tmp_path / 'runs'}", f"train.warm_start_cache={tmp_path / 'warm_start'}", "record_graphs=false",
    ])
    run = run_train(cfg)
    assert recorded_iterations(run.root) == []
    assert "record/bytes" not in read_jsonl_first(run.metrics_path)


def read_jsonl_first(path):
    from g2po_bench.core.rundir import read_jsonl

    return read_jsonl(path)[0]


def test_critic_runs_record_values_so_ppo_can_be_recomputed(tmp_path):
    from fake_rollouts import toy_rollouts

    cfg = load_config(None, ["env.name=toy", "algorithm.name=ppo"])
    rb = toy_rollouts(seed=2, groups=2, group_size=3, max_steps=4)
    values = np.random.default_rng(0).normal(size=len(rb.steps))
    res = bind_run_estimator(cfg)(rb, values)
    record_step_table(tmp_path, cfg, rb, res, 1, values)
    table = read_step_table(tmp_path, 1)
    np.testing.assert_array_equal(table.frame["critic_value"].to_numpy(), values)
    np.testing.assert_array_equal(table.frame["return"].to_numpy(), res.returns)
    assert "values" not in table.options
    again, _ = recompute(table, "ppo")
    np.testing.assert_allclose(again.advantages, res.advantages, atol=1e-12)
    rows = compared_rows(table, 1, "ppo")
    assert rows.value_name is None and len(rows.frame) == int((table.frame["group_id"] == 1).sum())


def test_graphgpo_runs_record_next_state_keys_so_graphgpo_can_be_recomputed(tmp_path):
    from fake_rollouts import toy_rollouts

    cfg = load_config(None, ["env.name=toy", "algorithm.name=graphgpo"])
    rb = toy_rollouts(seed=3, groups=2, group_size=3, max_steps=4)
    res = bind_run_estimator(cfg)(rb)
    record_step_table(tmp_path, cfg, rb, res, 1)
    table = read_step_table(tmp_path, 1)
    np.testing.assert_array_equal(table.frame["next_state_key"].to_numpy(), rb.next_state_keys)
    again, _ = recompute(table, "graphgpo")
    np.testing.assert_allclose(again.advantages, res.advantages, atol=1e-12)
    # a table without the column (recorded before the input existed) names what is missing
    old = table.frame.drop(columns=["next_state_key"])
    with pytest.raises(ValueError, match="needs the input 'next_state_key'.*did not record it"):
        recompute(type(table)(frame=old, meta=table.meta), "graphgpo")
