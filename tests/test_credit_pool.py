"""A credit study's parts: shards of whole blocks pool into the study run at once, group for group;
a study grown in chunks equals one study of its groups; one shared set of groups for every row;
the resolution figures (Holm, family-wise CIs, groups needed) by hand; the record's file mode."""

from __future__ import annotations

import json
import math
import os
import stat
from statistics import NormalDist

import numpy as np
import pytest
from credit_support import scripted_model_policy

from g2po_bench.analysis.credit.pool import (
    GroupData,
    PoolError,
    pool_records,
    score_groups,
    shared_groups,
)
from g2po_bench.analysis.credit.record import (
    _clean,
    read_gradients,
    read_record,
    study_record,
    write_record,
)
from g2po_bench.analysis.credit.resolution import (
    familywise_ci,
    groups_for_half_width,
    groups_needed,
    holm,
    normal_p,
)
from g2po_bench.analysis.credit.scoring import ORACLE, GroupStats
from g2po_bench.analysis.credit.study import (
    CreditSettings,
    choose_tasks,
    run_continuations,
    run_study,
    shard_range,
)
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.toy.scripted_policy import ScriptedCorridorPolicy
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool

TOY = get_benchmark("toy")
PROVENANCE = ("created", "command", "code", "machine", "timing", "parts", "grown")


def toy_cfg(*overrides: str):
    return load_config(None, ["env.name=toy", "env.max_steps=6", "env.stop_after_refusals=2", *overrides])


def _records(policy, cfg, tasks, settings, ranges):
    """(where, record, gradients) of a study run on each group range."""
    out = []
    with EnvPool(TOY, cfg.env, 2, max_episodes=0) as pool:
        for first, stop in ranges:
            st = run_study(cfg, policy, pool, TOY, tasks, settings, groups=(first, stop))
            rec = json.loads(json.dumps(study_record(st, cfg, policy={"kind": "test"}, command=["g2po", "credit"])))
            out.append((f"groups {first}..{stop - 1}", rec, st.gradients))
    return out


def _same_study(a: dict, b: dict) -> None:
    for key in set(a) | set(b):
        if key not in PROVENANCE:
            assert a.get(key) == b.get(key), key


def test_shards_are_contiguous_runs_of_whole_blocks():
    assert [shard_range(10, 2, i, 3) for i in range(3)] == [(0, 2), (2, 6), (6, 10)]
    assert [shard_range(5, 2, i, 3) for i in range(3)] == [(0, 2), (2, 4), (4, 5)]  # the last block holds 1
    assert shard_range(200, 16) == (0, 200)
    with pytest.raises(ValueError, match=r"at most 3 shard\(s\); use fewer shards, more --groups or a smaller --batch-groups"):
        shard_range(5, 2, 0, 4)
    with pytest.raises(ValueError, match="shard must be in 0..1"):
        shard_range(5, 2, 2, 2)


def test_pooled_shards_equal_the_unsharded_study_group_for_group():
    """Monte Carlo on the toy (K = 8), 5 groups in blocks of 2: three shards pooled give the study
    run at once, every per-group number, every row, every score (provenance aside)."""
    cfg = toy_cfg()
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 5, 0)
    settings = CreditSettings(groups=5, group_size=4, continuations=8, n_boot=300, batch_groups=2)
    pol = ScriptedCorridorPolicy()
    (_, whole, _), = _records(pol, cfg, tasks, settings, [(0, 5)])
    parts = _records(pol, cfg, tasks, settings, [shard_range(5, 2, i, 3) for i in range(3)])
    pooled, gradients = pool_records(parts[::-1])  # any order
    assert gradients is None and pooled["groups"] == [0, 5] and len(pooled["parts"]) == 3
    _same_study(whole, _clean(pooled))
    # the groups' tasks follow one seeded order: group g plays task g of the permutation
    assert pooled["tasks"] == [t.task_id for t in tasks]
    # a group's numbers do not depend on the other groups of its run
    assert parts[1][1]["per_group"]["stats"]["a_star"]["g2po"]["spearman"] == \
        whole["per_group"]["stats"]["a_star"]["g2po"]["spearman"][2:4]
    with pytest.raises(PoolError, match="groups 2..3 are missing"):
        pool_records([parts[0], parts[2]])
    with pytest.raises(PoolError, match="overlap"):
        pool_records([parts[0], parts[0], parts[1], parts[2]])
    other = json.loads(json.dumps(parts[1][1]))
    other["config"]["env"]["max_steps"] = 7
    with pytest.raises(PoolError, match=r"differ in config \(env.max_steps: 7 != 6\)"):
        pool_records([parts[0], (parts[1][0], other, None), parts[2]])
    other["settings"]["continuations"] = 4
    with pytest.raises(PoolError, match=r"\(env.max_steps: 7 != 6\).*differ in settings \(continuations: 4 != 8\)"):
        pool_records([parts[0], (parts[1][0], other, None), parts[2]])  # every kind of difference named at once


def test_pooled_shards_with_gradients_equal_the_unsharded_study(tmp_path):
    """The same with a policy that has a model: the per-block gradient inner products pool exactly,
    so does the gradient alignment; the files round-trip through credit.json and gradients.npz."""
    pol = scripted_model_policy(tmp_path)
    cfg = toy_cfg("env.max_steps=4")
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 4, 1)
    settings = CreditSettings(groups=4, group_size=3, continuations=0, exact=True, n_boot=200, batch_groups=2,
                              sketch_dim=512)
    (_, whole, whole_g), = _records(pol, cfg, tasks, settings, [(0, 4)])
    parts = []
    for i, (where, rec, gg) in enumerate(_records(pol, cfg, tasks, settings, [(0, 2), (2, 4)])):
        write_record(tmp_path / f"s{i}", rec, gg)
        back = read_record(tmp_path / f"s{i}")
        parts.append((where, back, read_gradients(tmp_path / f"s{i}", back)))
    pooled, gg = pool_records(parts)
    for key in whole_g.pairs:
        np.testing.assert_array_equal(gg.pairs[key], whole_g.pairs[key])
    _same_study(whole, _clean(pooled))
    assert pooled["scores"]["a_star"]["gradient"]["rows"]["g2po"]["cosine"] is not None


def test_a_study_grown_in_chunks_equals_one_study_of_its_groups(tmp_path):
    """``--target-half-width`` adds blocks until the main differences are narrow enough (here never:
    it stops at --max-groups), and the result is the study of those groups run at once."""
    from g2po_bench.cli import main

    args = ["credit", "env.name=toy", "env.max_steps=6", "--policy", "toy-scripted", "--continuations", "4",
            "--batch-groups", "2", "--n-boot", "100", "--no-figures"]
    assert main([*args, "--groups", "2", "--target-half-width", "0.0001", "--max-groups", "4",
                 "--out", str(tmp_path / "grown")]) == 0
    assert main([*args, "--groups", "4", "--out", str(tmp_path / "once")]) == 0
    grown, once = read_record(tmp_path / "grown"), read_record(tmp_path / "once")
    assert grown["groups"] == [0, 4] and [p["groups"] for p in grown["parts"]] == [[0, 2], [2, 4]]
    assert grown["grown"]["reached"] is False and grown["grown"]["groups"] == 4  # stopped at --max-groups
    assert "**not reached**, stopped at 4 groups" in (tmp_path / "grown" / "report.md").read_text()
    _same_study(grown, once)


def test_a_study_without_any_ci_yet_grows_on(tmp_path):
    """Two groups of the 5-step toy corridor define no paired difference (half-width nan): the study
    grows on to --max-groups instead of stopping as if the target were reached."""
    from g2po_bench.cli import main

    assert main(["credit", "env.name=toy", "env.max_steps=5", "--policy", "toy-scripted", "--continuations", "4",
                 "--batch-groups", "2", "--n-boot", "100", "--no-figures", "--groups", "2",
                 "--target-half-width", "0.2", "--max-groups", "4", "--out", str(tmp_path / "s")]) == 0
    grown = read_record(tmp_path / "s")["grown"]
    assert grown["groups"] == 4 and [p["groups"] for p in read_record(tmp_path / "s")["parts"]] == [[0, 2], [2, 4]]


def test_pool_command_writes_one_study_and_names_what_is_missing(tmp_path, capsys):
    from g2po_bench.cli import main

    args = ["credit", "env.name=toy", "env.max_steps=6", "--policy", "toy-scripted", "--continuations", "4",
            "--batch-groups", "2", "--groups", "4", "--n-boot", "100", "--no-figures"]
    assert main([*args, "--shard", "1/2", "--out", str(tmp_path / "shards" / "a")]) == 0
    assert main(["credit", "--pool", str(tmp_path / "shards"), "--out", str(tmp_path / "pooled")]) == 2
    err = capsys.readouterr().err
    assert "groups 2..3 are missing: run their shards" in err and "--groups" not in err  # advice that works
    assert main([*args, "--shard", "2/2", "--out", str(tmp_path / "shards" / "b")]) == 0
    assert "b (credit.json, credit_config.yaml, report.md)" in capsys.readouterr().err  # what is there: no figures/
    # a study's options would be ignored by a pool (it keeps the shards' settings): refused, named
    assert main(["credit", "--pool", str(tmp_path / "shards"), "--out", str(tmp_path / "pooled"), "--groups", "8",
                 "--no-figures", "env.max_steps=7"]) == 2
    assert "--pool takes --out and --no-figures only" in (err := capsys.readouterr().err), err
    assert "drop --groups, env.max_steps=7" in err and not (tmp_path / "pooled").exists()
    assert main(["credit", "--pool", str(tmp_path / "shards"), "--out", str(tmp_path / "pooled"),
                 "--continuations", "16", "--policy=model"]) == 2  # at their default values: refused all the same
    assert "drop --continuations, --policy" in capsys.readouterr().err
    assert main(["credit", "--pool", str(tmp_path / "shards"), "--out", str(tmp_path / "pooled"), "--no-figures"]) == 0
    pooled = read_record(tmp_path / "pooled")
    assert pooled["groups"] == [0, 4] and pooled["settings"]["shards"] == 1
    assert "pooled from 2 parts" in (tmp_path / "pooled" / "report.md").read_text()
    assert main([*args, "--shard", "3/2"]) == 2 and "--shard '3/2'" in capsys.readouterr().err


def test_credit_json_is_readable_by_others(tmp_path):
    """The atomic write's temporary file is created 0600; the record is not left so."""
    old = os.umask(0o022)
    try:
        write_record(tmp_path, {"kind": "credit"})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "credit.json").stat().st_mode) == 0o644


def test_continuations_that_meet_in_one_wave_share_their_end():
    """With common random numbers, a continuation that reaches a history another of the same wave
    (same task, same k) passed through has its future: it stops and takes that end, with the
    results of running every continuation to its end, in one wave (where no earlier wave is
    known)."""
    from g2po_bench.analysis.credit.study import _study_rows, sample_groups

    cfg = toy_cfg("env.max_steps=10", "env.stop_after_refusals=0")
    tasks = choose_tasks(TOY.load_tasks(cfg.env, "train"), 3, 2)
    pol = ScriptedCorridorPolicy()
    with EnvPool(TOY, cfg.env, 2, max_episodes=0) as pool:
        base = CreditSettings(groups=3, group_size=4, continuations=8, seed=2, wave=100_000)
        rows = _study_rows(sample_groups(pol, pool, TOY, cfg, tasks, base), tasks)
        joined, timing = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
        base.merge = False
        full, _ = run_continuations(pol, pool, TOY, cfg, tasks, rows, base)
    for field in ("success", "length", "first_action", "ok"):
        np.testing.assert_array_equal(getattr(joined, field), getattr(full, field))
    assert joined.merged.mean() > 0.1
    assert timing["first_step_joins"] > 0  # joined to the start of another continuation of the wave


# ------------------------------------------------------------------ one set of groups, resolution
def _gs(spearman):
    s = np.asarray(spearman, dtype=float)
    n = len(s)
    return GroupStats(groups=np.arange(n), spearman=s, pearson=s.copy(), decisive=np.ones(n), agree=np.ones(n),
                      mass_decisive=np.ones(n), mass=np.ones(n) * 2, rows=np.full(n, 4.0))


def test_every_row_is_scored_on_the_groups_where_the_oracle_and_every_main_row_are_defined():
    nan = math.nan
    stats = {"a": _gs([0.2, nan, 0.6, 0.4]), "b": _gs([0.1, 0.3, nan, 0.2]), "c": _gs([0.9, 0.9, 0.9, nan]),
             ORACLE: _gs([0.5, 0.7, 0.9, nan])}
    assert shared_groups(stats, ["a", "b", ORACLE]).tolist() == [True, False, False, False]
    variants = [{"name": "a", "estimator": "a", "axis": ""}, {"name": "b", "estimator": "b", "axis": ""},
                {"name": "c", "estimator": "a", "axis": "ablation"}]
    sc = score_groups(GroupData(groups=np.arange(4), stats={"a_star": stats}), variants,
                      {"n_boot": 50, "seed": 0, "confidence": 0.95})["a_star"]
    assert sc["shared"]["groups"] == 1 and sc["groups"] == 4
    assert sc["rows"]["a"]["spearman"]["mean"] == pytest.approx(0.2)  # not (0.2 + 0.6 + 0.4) / 3
    assert sc["rows"][ORACLE]["spearman"]["mean"] == pytest.approx(0.5)  # the ceiling's groups too
    assert sc["rows"]["a"]["spearman"]["defined_all_groups"] == 3
    assert sc["ceiling"]["split_half"]["mean"] == pytest.approx(0.5)
    d = next(x["spearman"] for x in sc["differences"] if (x["a"], x["b"]) == ("b", "a"))
    assert d["mean"] == pytest.approx(-0.1) and d["groups"] == 1 and d["defined_fraction"] == pytest.approx(0.25)


def test_holm_family_wise_intervals_and_groups_needed_by_hand():
    # Holm: sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    np.testing.assert_allclose(holm([0.04, 0.01, 0.03, math.nan]), [0.06, 0.03, 0.06, math.nan])
    z = NormalDist().inv_cdf
    # a between-group SD of 0.18: 0.18^2 (1.960 + 0.842)^2 / 0.05^2 = 101.7 groups defining the difference;
    # 55 % of the groups define it: 185; under Holm over 28 comparisons (alpha / 28): 204 defined
    assert groups_needed(0.18) == pytest.approx(0.0324 * (z(0.975) + z(0.8)) ** 2 / 0.0025)
    assert groups_needed(0.18) == pytest.approx(101.7, abs=0.1)
    assert groups_needed(0.18, defined_fraction=0.55) == pytest.approx(101.7 / 0.55, abs=0.2)
    assert groups_needed(0.18, family=28) == pytest.approx(0.0324 * (z(1 - 0.05 / 56) + z(0.8)) ** 2 / 0.0025)
    assert 1.9 < groups_needed(0.18, family=28) / groups_needed(0.18) < 2.1  # "about twice that"
    # the half-width of a 95 % interval: 1.96 x 0.18 / sqrt(n) = 0.05 at n = 49.8
    assert groups_for_half_width(0.18, 0.05) == pytest.approx((1.959964 * 0.18 / 0.05) ** 2, rel=1e-5)
    assert normal_p(0.1, 0.05) == pytest.approx(2 * (1 - NormalDist().cdf(2.0)))
    lo, hi = familywise_ci(0.1, 0.05, 28)
    assert (hi - lo) / 2 == pytest.approx(z(1 - 0.05 / 56) * 0.05)
    assert math.isnan(groups_needed(None)) and groups_needed(0.0) == 0.0
