"""The credit study's replay on WebShop's real 1,000-product setting: search and pages reproduce.

`g2po credit` continues every prefix of a sampled episode from a fresh environment by replaying its
actions and checking each observation against the recorded one (``ReplayMismatch`` otherwise,
:mod:`g2po_bench.analysis.credit.replay`). On WebShop the replayed steps go through the BM25
search (results pages), product pages and option clicks, and through another worker than the
one that recorded them. Here the instruction expert's episodes on held-out goals are recorded
through the rollout driver, every prefix of every episode is replayed (in reverse task order, so
in other pool slots) with the expert playing on, and each continuation must reproduce the
recorded observations and end as the recorded episode did.

The real data come from ``../shared/data/webshop`` (``G2PO_SHARED_DATA``): skipped with the reason
when missing, failed in CI.
"""

from __future__ import annotations

import pytest
from conftest import require_shared

from g2po_bench.algorithms.backends.common import load_task_splits, training_rollout_settings
from g2po_bench.analysis.credit.replay import CreditHooks, EpisodeStart
from g2po_bench.benchmarks.demos import collect_demonstrations
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.policy_protocol import Generation
from g2po_bench.runtime.workers import EnvPool

pytestmark = pytest.mark.shared_data


class ExpertByPrompt:
    """Answers each prompt with the instruction expert's response to it (a prompt names the
    instruction, the recent actions and the page, which decide the expert's action)."""

    def __init__(self, demos):
        self.answer = {d.prompt: d.response for d in demos}
        self.calls = 0

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None, seeds=None):
        self.calls += len(prompts)
        return [Generation(text=self.answer[p]) for p in prompts]


def _episodes(rb):
    """Per trajectory: (task id, actions, observations, valid flags, success, steps)."""
    out = {}
    st = rb.steps
    for r in sorted(range(len(rb.actions)), key=lambda r: (int(st.traj_id[r]), int(st.step[r]))):
        t = int(st.traj_id[r])
        ep = out.setdefault(t, ([], [], []))
        ep[0].append(rb.actions[r])
        ep[1].append(rb.observations[r])
        ep[2].append(bool(st.action_valid[r]))
    return [(rb.trajectories[t]["task_id"], *out[t], bool(rb.trajectories[t]["success"]),
             int(rb.trajectories[t]["num_steps"])) for t in sorted(out)]


def test_every_prefix_of_an_expert_episode_replays_its_search_and_pages(tmp_path):
    data = require_shared("webshop")
    cfg = load_config(None, [f"env.data_dir={data}", "env.num_workers=2"], preset="webshop_cpu")
    bench = get_benchmark("webshop")
    _, panel = load_task_splits(cfg, bench)
    tasks = panel[:6]
    kw = training_rollout_settings(cfg) | {"group_size": 1}
    with EnvPool(bench, cfg.env, 2) as pool:
        demos, _ = collect_demonstrations(pool, bench, tasks, max_steps=cfg.env.max_steps,
                                          history_length=cfg.env.history_length, prompt_style=cfg.env.prompt)
        expert = ExpertByPrompt(demos)
        recorded = _episodes(collect_rollouts(expert, pool, bench, tasks, seed=0, **kw))
        assert len(recorded) == len(tasks) and sum(ep[4] for ep in recorded) >= 3  # the expert wins most
        assert all(ep[1][0].startswith("search[") for ep in recorded)
        by_id = {t.task_id: t for t in tasks}
        starts, replay_tasks, ends = [], [], []
        for task_id, actions, observations, valid, success, steps in reversed(recorded):
            for t in range(1, steps):  # every prefix after the search, up to the last action
                starts.append(EpisodeStart(tuple(actions[:t]), tuple(observations[:t + 1]), tuple(valid[:t])))
                replay_tasks.append(by_id[task_id])
                ends.append((success, steps))
        calls = expert.calls
        replayed = collect_rollouts(expert, pool, bench, replay_tasks, seed=1, hooks=CreditHooks(bench, starts=starts),
                                    **kw)
    assert len(starts) >= 3 * len(tasks)  # search, product, option and purchase pages
    # each continuation replayed its prefix (a differing page raises ReplayMismatch) and ended as recorded
    assert [(bool(tr["success"]), int(tr["num_steps"])) for tr in replayed.trajectories] == ends
    assert [tr["start_step"] for tr in replayed.trajectories] == [len(s.actions) for s in starts]
    # the policy was asked only for the steps after each prefix
    assert expert.calls - calls == sum(n - len(s.actions) for s, (_, n) in zip(starts, ends))
