"""A real learning test: RL raises held-out success on an easy setting (the toy corridor).

The warm start is trained on demonstrations that waste two steps (``go west``, ``go east``,
:func:`g2po_bench.benchmarks.toy.expert_detour`), so the warm-started policy sometimes goes west; with a
step limit of 7, the longest held-out corridor (length 7: six steps east, never seen in training,
whose corridors are 2-6 long) then fails. RL has one generic thing to learn (never go west),
and held-out success, sampled at temperature 1.0 on 5 corridors x 16 episodes, must rise.
Measured in 10 iterations on seeds 0, 1, 2 (this setting, 2026-12-01): GRPO 63.8 -> 95.0 %, 63.8 -> 90.0 %,
70.0 -> 93.8 %; G2PO 63.8 -> 98.8 %, 63.8 -> 93.8 %, 70.0 -> 96.3 %. With lr 4e-4 and 8 episodes per corridor (the
setting before) GRPO seed 0 went 72.5 -> 85.0 % on one machine and failed the +15 bar: too slow a
learner measured on too small a panel, so the test depended on the machine's floating point.
"""

import json

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
    "eval.every=5", "eval.temperature=1.0", "progress=false",
]


@pytest.mark.parametrize("algorithm", ["g2po", "grpo"])
def test_rl_raises_held_out_success_on_the_easy_toy_setting(tmp_path, algorithm):
    cfg = load_config(None, [*EASY, f"algorithm.name={algorithm}", f"output_dir={tmp_path / 'runs'}",
                             f"train.warm_start_cache={tmp_path / 'warm_start'}"])
    run = run_train(cfg)
    ev = json.loads(run.eval_path.read_text())
    before, final = ev["before"], ev["final"]
    assert before["num_episodes"] == final["num_episodes"] == 80
    # the warm start leaves room: some held-out episodes fail
    assert before["success_rate"] <= 0.85
    # RL learns: at least 15 points more held-out success, and most episodes now succeed
    assert final["success_rate"] >= before["success_rate"] + 0.15
    assert final["success_rate"] >= 0.85
    # and it wastes fewer steps on the training corridors than in the first iteration
    metrics = read_jsonl(run.metrics_path)
    assert metrics[-1]["train/episode_len"] < metrics[0]["train/episode_len"]
