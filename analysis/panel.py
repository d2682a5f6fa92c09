"""Play a run config's held-out panel once with a model folder, for the failure scripts
(``scripts/alfworld_failures.py``, ``scripts/webshop_failures.py``).

The episodes are played as ``g2po eval`` plays them: the run's own settings (``env.max_steps``,
``env.stop_after_refusals``, prompt, history, response length) and the evaluation's sampling seed
(``seed + 7919``), one episode per panel task, on the CPU with the run's thread rule. It imports
torch and the local trainer's model code: the scripts import it after checking their arguments.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import torch

from g2po_bench.algorithms.backends.common import load_task_splits
from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.trainer import torch_threads
from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import collect_rollouts
from g2po_bench.runtime.workers import EnvPool

__all__ = ["PanelEpisodes", "play_panel"]

#: added to the run's seed for the panel's sampling, as the evaluation does
EVAL_SEED_OFFSET = 7919


@dataclass
class PanelEpisodes:
    """The panel's episodes: ``bench`` (the environment), ``panel`` (its tasks), ``rollouts``
    (the :class:`~g2po_bench.benchmarks.rollout` batch: ``trajectories``, ``state_texts``,
    ``responses``, ``actions``, ``steps``) and ``rows`` (trajectory id -> its step rows in order)."""

    bench: Any
    panel: list
    rollouts: Any
    rows: dict[int, list[int]]

    def steps(self, traj_id: int) -> list[int]:
        """The step rows of trajectory ``traj_id``, in order (empty for an unknown id)."""
        return self.rows.get(int(traj_id), [])


def play_panel(model_dir: str, cfg, temperature: float) -> PanelEpisodes:
    """One episode per held-out task of ``cfg`` with the model in ``model_dir`` at ``temperature``.

    Args:
        model_dir: a model folder (``config.json``, tokenizer, weights): a warm start's
            ``policy`` or a run's ``checkpoints/latest/policy``.
        cfg: the run config (:func:`g2po_bench.runconfig.load_config`).
        temperature: the sampling temperature (the evaluation's is 0.4).

    Raises:
        OSError: the model folder cannot be loaded; the environment's own errors for its data.
    """
    torch.set_num_threads(torch_threads(cfg))
    bench = get_benchmark(cfg.env.name)
    _, panel = load_task_splits(cfg, bench)
    model, tok = load_model_and_tokenizer(model_dir, dtype=cfg.model.dtype, device="cpu")
    policy = LocalPolicy(model, tok, max_prompt_tokens=cfg.train.max_prompt_tokens)
    with EnvPool(bench, cfg.env, cfg.env.num_workers) as pool:
        rb = collect_rollouts(policy, pool, bench, panel, group_size=1, max_steps=cfg.env.max_steps,
                              temperature=temperature, max_new_tokens=cfg.train.max_response_tokens,
                              seed=cfg.seed + EVAL_SEED_OFFSET, history_length=cfg.env.history_length,
                              prompt_style=cfg.env.prompt, stop_after_refusals=cfg.env.stop_after_refusals)
    rows: dict[int, list[int]] = collections.defaultdict(list)
    for i, traj in enumerate(rb.steps.traj_id):
        rows[int(traj)].append(i)
    return PanelEpisodes(bench, panel, rb, dict(rows))
