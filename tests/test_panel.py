"""``analysis/panel.py``: the failure scripts' play of a run config's held-out panel."""

from __future__ import annotations

from local_trainer import tiny_model_dir

from g2po_bench.analysis.panel import play_panel
from g2po_bench.runconfig import load_config


def test_play_panel_plays_one_episode_per_panel_task_with_its_steps_in_order(tmp_path):
    cfg = load_config(None, ["env.name=toy", "env.max_steps=3", "env.num_workers=1", "eval.num_tasks=3",
                             "train.max_response_tokens=8", "progress=false"])
    played = play_panel(tiny_model_dir(tmp_path), cfg, temperature=1.0)
    trajs = played.rollouts.trajectories
    assert [t["task_id"] for t in trajs] == [t.task_id for t in played.panel] and len(trajs) == 3
    rows = [played.steps(t["traj_id"]) for t in trajs]
    assert sorted(i for r in rows for i in r) == list(range(len(played.rollouts.actions)))  # every step once
    for t, r in zip(trajs, rows):
        assert r == sorted(r) and 1 <= len(r) <= 3, (t, r)
        assert {int(played.rollouts.steps.traj_id[i]) for i in r} == {int(t["traj_id"])}
    assert played.steps(10_000) == []
