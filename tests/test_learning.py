"""A real learning test: RL raises held-out success on an easy setting (the toy corridor).

The warm start is trained on demonstrations that waste two steps (``go west``, ``go east``,
:func:`g2po_bench.benchmarks.toy.expert_detour`), so the warm-started policy sometimes goes west; with a
step limit of 7, the longest held-out corridor (length 7: six steps east, never seen in training,
whose corridors are 2-6 long) then fails. RL has one generic thing to learn (never go west),
and held-out success, sampled at temperature 1.0 on 5 corridors x 16 episodes, must rise.

The claim is judged on three seeds of each algorithm together (one warm start, shared by all
runs), not on one trajectory: the same commit and seed take another path on another set of CPU
kernels (the run folders record ``cpu_capability``) or another thread count, and one trajectory
in nine measured learns slowly. Held-out success before and after RL on seeds 0, 1, 2 (10
iterations, 2 torch threads, commit 42c1286, 2-core AMD EPYC VM):

=========  ============================  ============================  =====================
kernels    GRPO                          G2PO                          pooled (GRPO / G2PO)
=========  ============================  ============================  =====================
AVX-512    63.8->95.0 63.8->90.0 70.0->93.8  63.8->98.8 63.8->93.8 70.0->96.3  +27.1 / +30.4 points
AVX2       75.0->82.5 73.8->97.5 67.5->92.5  75.0->97.5 (see below)          +18.8 / (below)
=========  ============================  ============================  =====================

(AVX2: ``ATEN_CPU_CAPABILITY=avx2`` on the same machine; its warm start differs from AVX-512's.
GRPO seed 0 on AVX2, 75.0 -> 82.5, is the slow one: alone it failed the former one-seed bar of
+15 points.) Pooled over the three seeds (240 held-out episodes before RL and 240 after,
:func:`learning_verdict`), the test asks for at least +10 points, a one-sided z of at least
2.33 (1 %) for that rise, at least 85 % success after RL, and shorter training episodes at the
end than in the first iteration. Without learning (``train.lr=1e-12``) every run's final
evaluation equals its first (the evaluation is seeded), the rise is 0 and the test fails;
check with ``G2PO_TEST_LEARNING_OVERRIDES="train.lr=1e-12" python -m pytest tests/test_learning.py``.

Cost: one warm start (100 SFT epochs) and six runs of 10 iterations with two evaluations each.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from g2po_bench.core.rundir import read_jsonl
from g2po_bench.runconfig import load_config
from g2po_bench.train import run_train

EASY = [
    "env.name=toy", "env.max_steps=7", "env.num_workers=1", "train.iterations=10",
    "train.groups_per_batch=5", "train.group_size=8", "train.lr=8e-4", "train.mini_batch_size=64",
    "train.sft_epochs=100", "train.sft_batch_size=8", "train.sft_lr=1e-2", "train.sft_detour_prob=1.0",
    "train.max_response_tokens=24", "model.hidden_size=64", "model.intermediate_size=128",
    "model.num_heads=2", "model.vocab_size=300", "eval.num_tasks=0", "eval.episodes_per_task=16",
    "eval.every=0", "eval.at_train_temperature=false", "eval.temperature=1.0", "progress=false",
]
SEEDS = (0, 1, 2)
MIN_RISE = 0.10  # pooled held-out success after RL minus before, in success-rate units
MIN_Z = 2.33  # one-sided 1 % for the rise
MIN_FINAL = 0.85
MAX_BEFORE = 0.85  # the warm start leaves room


def learning_verdict(runs: list[dict]) -> list[str]:
    """What keeps ``runs`` (one dict per seed: ``before`` and ``final`` successes as episode
    counts of ``episodes`` each, ``first_len`` and ``last_len`` the mean training episode length
    of the first and last iteration) from showing that RL raised held-out success; empty when
    they show it.

    Pooled over the runs: before-RL success at most :data:`MAX_BEFORE`; the rise (after minus
    before) at least :data:`MIN_RISE` with a z-score of at least :data:`MIN_Z`, the standard
    error being the unpaired two-proportion one ``sqrt(p0 (1 - p0) / n + p1 (1 - p1) / n)``
    (conservative: the evaluations before and after share their seeds); after-RL success at
    least :data:`MIN_FINAL`; the last iteration's mean episode length below the first's.
    """
    n = sum(r["episodes"] for r in runs)
    p0 = sum(r["before"] for r in runs) / n
    p1 = sum(r["final"] for r in runs) / n
    rise = p1 - p0
    se = math.sqrt(p0 * (1 - p0) / n + p1 * (1 - p1) / n)
    z = rise / se if se > 0 else (math.inf if rise > 0 else 0.0)
    first = sum(r["first_len"] for r in runs) / len(runs)
    last = sum(r["last_len"] for r in runs) / len(runs)
    where = f"(pooled over {len(runs)} runs, {n} held-out episodes each before and after: {p0:.3f} -> {p1:.3f})"
    out = []
    if p0 > MAX_BEFORE:
        out.append(f"the warm start leaves no room: {p0:.3f} > {MAX_BEFORE} before RL {where}")
    if rise < MIN_RISE or z < MIN_Z:
        out.append(f"held-out success rose by {rise:+.3f} (z = {z:.2f}); needs >= {MIN_RISE} and z >= {MIN_Z} {where}")
    if p1 < MIN_FINAL:
        out.append(f"held-out success after RL {p1:.3f} < {MIN_FINAL} {where}")
    if not last < first:
        out.append(f"training episodes did not get shorter: {first:.3f} steps in the first iteration, {last:.3f} "
                   "in the last")
    return out


def _outcome(run_dir) -> dict:
    ev = json.loads((run_dir / "eval.json").read_text())
    before, final = ev["before"], ev["final"]
    assert before["num_episodes"] == final["num_episodes"] == 80
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    return {"episodes": 80, "before": round(before["success_rate"] * 80), "final": round(final["success_rate"] * 80),
            "first_len": metrics[0]["train/episode_len"], "last_len": metrics[-1]["train/episode_len"]}


@pytest.fixture(scope="module")
def warm_start_cache(tmp_path_factory):
    """One warm start for every run of the module (its key ignores the algorithm and the seed)."""
    return tmp_path_factory.mktemp("learning_warm_start")


@pytest.mark.parametrize("algorithm", ["g2po", "grpo"])
def test_rl_raises_held_out_success_on_the_easy_toy_setting(tmp_path, warm_start_cache, algorithm):
    extra = os.environ.get("G2PO_TEST_LEARNING_OVERRIDES", "").split()  # e.g. train.lr=1e-12: must fail
    runs = []
    for seed in SEEDS:
        cfg = load_config(None, [*EASY, f"algorithm.name={algorithm}", f"seed={seed}",
                                 f"output_dir={tmp_path / 'runs'}", f"train.warm_start_cache={warm_start_cache}",
                                 *extra])
        runs.append(_outcome(run_train(cfg).root))
    assert learning_verdict(runs) == [], runs


def _runs(pairs, lens=(4.0, 3.2)) -> list[dict]:
    return [{"episodes": 80, "before": round(b * 80), "final": round(f * 80), "first_len": lens[0],
             "last_len": lens[1]} for b, f in pairs]


def test_the_verdict_accepts_what_was_measured_and_rejects_no_learning():
    """Hand-computed: GRPO on AVX2 (table above) pools 173/240 = 0.7208 -> 218/240 = 0.9083, a
    rise of 0.1875 with se = sqrt(0.7208 * 0.2792 / 240 + 0.9083 * 0.0917 / 240) = 0.03443,
    z = 5.446. No learning: the same counts before and after, rise 0."""
    grpo_avx2 = _runs([(0.75, 0.825), (0.7375, 0.975), (0.675, 0.925)])
    assert learning_verdict(grpo_avx2) == []
    p0, p1 = 173 / 240, 218 / 240
    assert math.isclose((p1 - p0) / math.sqrt(p0 * (1 - p0) / 240 + p1 * (1 - p1) / 240), 5.446, abs_tol=1e-3)
    still = _runs([(0.75, 0.75), (0.7375, 0.7375), (0.675, 0.675)], lens=(4.0, 4.0))
    assert [v.split(":")[0].split(" (")[0] for v in learning_verdict(still)] == [
        "held-out success rose by +0.000", "held-out success after RL 0.721 < 0.85", "training episodes did not get shorter"]
    # the one slow trajectory alone (the former one-seed test's failure) is not enough
    assert len(learning_verdict(_runs([(0.75, 0.825)]))) == 2
    # a warm start without room
    assert "leaves no room" in learning_verdict(_runs([(0.9, 1.0)] * 3))[0]
