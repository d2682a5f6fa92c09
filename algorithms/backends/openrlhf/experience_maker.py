"""OpenRLHF's experience maker with the suite's step-level advantages.

:class:`StepExperienceMaker` subclasses OpenRLHF 0.11.2's ``RemoteExperienceMaker`` and keeps
everything it does on the model side (``make_experience``: old log-probs from the actor group,
reference log-probs from the reference group, values from the critic group, dispatched to the
Ray actor groups micro-batch by micro-batch) but replaces ``compute_advantages_and_returns``
(OpenRLHF's if/elif chain over episode rewards, with no plug-in point) by the suite's registry
estimator on the StepBatch (the run's bound estimator, :func:`g2po_bench.algorithms.registry.bind_run_estimator`),
whose per-step scalars become per-token advantages on the action positions
(:func:`g2po_bench.algorithms.backends.openrlhf.experience.attach_step_values`).

It runs in the driver process, where the backend creates it; the Ray workers (actor,
reference, critic, vLLM) run OpenRLHF's classes unchanged and only ever receive finished
experiences, so nothing has to be patched inside a worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

from g2po_bench.algorithms.backends.openrlhf.experience import (
    StepSamples,
    attach_step_values,
    interleave_for_ranks,
    prompt_end_values,
)
from g2po_bench.algorithms.registry import AdvantageResult

__all__ = ["StepExperienceMaker"]


class StepExperienceMaker(RemoteExperienceMaker):
    """``RemoteExperienceMaker`` whose advantages come from the suite's estimator.

    Args:
        *args, **kwargs: those of ``RemoteExperienceMaker`` (actor, critic, reward, reference
            groups, KL controller, strategy, tokenizer).
        dp_ranks: data-parallel ranks of the actor group (micro-batches are interleaved so every
            rank gets a balanced share).

    Use: :meth:`prepare` with the batch's :class:`StepSamples` and an advantage function, then
    ``make_experience_batch(step_samples.samples)``. After it, ``timing`` holds
    ``logprob_s`` (reference and old log-probs, and values) and ``adv_s``; ``result`` the
    registry's AdvantageResult; ``values`` the per-row critic values (or None).
    """

    def __init__(self, *args, dp_ranks: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.dp_ranks = max(1, int(dp_ranks))
        self.step_samples: StepSamples | None = None
        self.advantage_fn: Callable[[np.ndarray | None], AdvantageResult] | None = None
        self.timing: dict[str, float] = {}
        self.result: AdvantageResult | None = None
        self.values: np.ndarray | None = None

    def prepare(self, step_samples: StepSamples, advantage_fn: Callable[[np.ndarray | None], AdvantageResult]):
        """Set the samples of the next batch and ``advantage_fn(values_per_row) -> AdvantageResult``."""
        self.step_samples = step_samples
        self.advantage_fn = advantage_fn

    def split_rollout_samples(self, rollout_samples):
        """OpenRLHF's micro-batching, then interleaved across the data-parallel ranks."""
        return interleave_for_ranks(super().split_rollout_samples(rollout_samples), self.dp_ranks)

    @torch.no_grad()
    def make_experience_batch(self, rollout_samples):
        """OpenRLHF's pipeline (split, model forwards, advantages), timed per phase."""
        t0 = time.time()
        samples_list = self.split_rollout_samples(rollout_samples)
        experiences = self.make_experience(samples_list)
        t1 = time.time()
        experiences = self.compute_advantages_and_returns(experiences)
        self.timing = {"logprob_s": t1 - t0, "adv_s": time.time() - t1}
        return experiences

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences):
        """Per-token advantages and returns from the suite's per-step estimator.

        Reads V(s_t) at the last prompt token when a critic group exists, calls the advantage
        function on the rows, and writes the step scalar on every action token (0 elsewhere).
        OpenRLHF's reward shaping, KL-in-reward, length penalties and whitening are not applied
        (the KL enters as a loss term; the estimator does its own normalization).
        """
        ss = self.step_samples
        if ss is None or self.advantage_fn is None:
            raise RuntimeError("StepExperienceMaker.prepare() must be called before make_experience_batch()")
        n = len(ss.samples)
        real = ss.rows >= 0
        n_rows = int(ss.rows.max()) + 1 if real.any() else 0
        values = None
        if self.critic_model_group is not None:
            per_sample = prompt_end_values(experiences, ss.prompt_lens, n)
            values = np.zeros(n_rows, dtype=np.float64)
            values[ss.rows[real]] = per_sample[real]
        result = self.advantage_fn(values)
        adv = np.zeros(n, dtype=np.float64)
        adv[real] = result.advantages[ss.rows[real]]
        ret = None
        if self.critic_model_group is not None:
            row_ret = result.returns if result.returns is not None else result.advantages + values
            ret = np.zeros(n, dtype=np.float64)
            ret[real] = row_ret[ss.rows[real]]
        attach_step_values(experiences, adv, ret)
        for exp in experiences:
            exp.kl = None
        self.result, self.values = result, values
        return experiences
