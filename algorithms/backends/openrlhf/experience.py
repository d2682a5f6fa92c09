"""Step rows <-> OpenRLHF experiences: one OpenRLHF sample per agent step.

Each step row i of a :class:`~g2po_bench.benchmarks.rollout.RolloutBatch` (prompt p_i of P_i tokens, the
step prompt with its history; response r_i of R_i tokens) becomes one OpenRLHF 0.11.2
``Experience`` sample, laid out as OpenRLHF's own generator lays out a single-turn sample
(``SamplesGenerator._process_response_into_experience``):

- ``sequences`` (1, T) = p_i + r_i, T = P_i + R_i, no padding; ``attention_mask`` (1, T) ones;
- ``action_mask`` (1, T - 1): position k predicts token k + 1, so the response occupies
  k in [P_i - 1, P_i - 1 + R_i); the prompt (the environment's text: observation, history,
  admissible actions) is never an action, so it never enters the policy, KL or entropy loss;
- ``advantages`` / ``returns`` (1, T - 1) = the step's scalar A_i / G_i on the action positions,
  0 elsewhere (one scalar per step for every response token, as
  verl-agent's ``gigpo/core_gigpo.py`` tiles it; docs/design-notes.md "The StepBatch").

Batches are right-padded by OpenRLHF (``Experience.concat_experiences``), so per-token tensors
are (B, A) with A = max_i T_i - 1. The critic (``ppo``) reads V(s_t) at position P_i - 1 (the
last prompt token, the state as the agent saw it) and is trained there only
(:func:`critic_view`), as the local backend's value model is.

Padding: OpenRLHF runs ``train.batch_size / (micro x ranks)`` micro-batches per optimizer step
on every data-parallel rank, and a trailing partial window would carry its gradient into the
next iteration; :func:`build_samples` therefore pads the sample list to a multiple of the
optimizer batch with copies whose action mask is all zero. They add no token to any loss and
are excluded from every normaliser (OpenRLHF counts action tokens, and only non-empty samples).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from openrlhf.trainer.ppo_utils.experience import Experience

__all__ = ["StepSamples", "build_samples", "attach_step_values", "prompt_end_values", "critic_view",
           "experiences_to_rows", "interleave_for_ranks"]


@dataclass
class StepSamples:
    """OpenRLHF samples of one batch and their map back to the rollout rows.

    Attributes:
        samples: one single-sample ``Experience`` per entry, in sample order (short first).
        rows: (S,) int64, the RolloutBatch row of each sample, -1 for padding copies.
        prompt_lens: (S,) int64 prompt tokens P of each sample.
        response_lens: (S,) int64 action tokens of each sample (0 for padding).
    """

    samples: list[Experience]
    rows: np.ndarray
    prompt_lens: np.ndarray
    response_lens: np.ndarray

    @property
    def num_real(self) -> int:
        return int((self.rows >= 0).sum())


def _sample(prompt: list[int], response: list[int], *, reward: float, success: float,
            truncated: bool, real: bool) -> Experience:
    seq = torch.tensor(list(prompt) + list(response), dtype=torch.long)
    t = seq.numel()
    attn = torch.ones(t, dtype=torch.long)
    action = torch.zeros(t - 1, dtype=torch.long)
    if real:
        action[len(prompt) - 1: len(prompt) - 1 + len(response)] = 1
    return Experience(
        sequences=seq.unsqueeze(0),
        attention_mask=attn.unsqueeze(0),
        action_mask=action.unsqueeze(0),
        rewards=torch.tensor([reward], dtype=torch.float32),
        scores=torch.tensor([success], dtype=torch.float32),
        response_length=torch.tensor([len(response) if real else 0]),
        truncated=torch.tensor([truncated]),
        total_length=torch.tensor([float(t)]),
        info={"reward": torch.tensor([reward], dtype=torch.float32)},
    )


def build_samples(rollouts, *, eos_token_id: int | None, pad_to: int = 1) -> StepSamples:
    """One OpenRLHF sample per step row (see the module docstring).

    Args:
        rollouts: RolloutBatch with token ids (``prompt_ids``, ``response_ids``).
        eos_token_id: a response not ending with it is marked ``truncated``; it also stands in
            for an empty response (then with no action token).
        pad_to: pad the list with zero-mask copies to a multiple of this (the optimizer batch).

    Raises:
        ValueError: a row without prompt tokens (a remote policy that exposes no tokens).
    """
    n = len(rollouts.steps)
    if n == 0:
        raise ValueError("no step rows to train on")
    rewards = rollouts.steps.reward
    success = rollouts.steps.success
    prompt_lens = np.array([len(p) for p in rollouts.prompt_ids], dtype=np.int64)
    if (prompt_lens == 0).any():
        bad = int(np.flatnonzero(prompt_lens == 0)[0])
        raise ValueError(f"step row {bad} has no prompt tokens; the OpenRLHF backend needs a token-level policy")
    fill = [eos_token_id if eos_token_id is not None else 0]
    responses = [list(r) if len(r) else fill for r in rollouts.response_ids]
    real = np.array([len(r) > 0 for r in rollouts.response_ids])
    total = prompt_lens + np.array([len(r) for r in responses])
    order = np.argsort(total, kind="stable")
    samples, rows, p_lens, r_lens = [], [], [], []
    for i in order:
        i = int(i)
        resp = responses[i]
        trunc = bool(real[i] and eos_token_id is not None and resp[-1] != eos_token_id)
        samples.append(_sample(rollouts.prompt_ids[i], resp, reward=float(rewards[i]),
                               success=float(success[i]), truncated=trunc, real=bool(real[i])))
        rows.append(i)
        p_lens.append(int(prompt_lens[i]))
        r_lens.append(len(resp) if real[i] else 0)
    pad = (-len(samples)) % max(1, pad_to)
    first = int(order[0])
    for _ in range(pad):
        samples.append(_sample(rollouts.prompt_ids[first], responses[first], reward=0.0, success=0.0,
                               truncated=False, real=False))
        rows.append(-1)
        p_lens.append(int(prompt_lens[first]))
        r_lens.append(0)
    return StepSamples(samples=samples, rows=np.asarray(rows, dtype=np.int64),
                       prompt_lens=np.asarray(p_lens, dtype=np.int64),
                       response_lens=np.asarray(r_lens, dtype=np.int64))


def interleave_for_ranks(batches: list, ranks: int) -> list:
    """Reorder micro-batches so that OpenRLHF's contiguous split over ``ranks`` data-parallel
    ranks (``RayActorGroup.async_run_method_batch``) gives each rank every ``ranks``-th one
    (balanced lengths when the input is sorted by length)."""
    ranks = max(1, ranks)
    if len(batches) % ranks:
        return list(batches)
    per = len(batches) // ranks
    return [batches[r + k * ranks] for r in range(ranks) for k in range(per)]


def attach_step_values(experiences: list[Experience], per_sample_adv: np.ndarray,
                       per_sample_ret: np.ndarray | None = None) -> None:
    """Give every action token of sample s the scalar ``per_sample_adv[s]`` (and returns).

    ``experience.index`` holds the sample positions (OpenRLHF's ``split_rollout_samples``).
    Positions outside the action mask get 0. Writes ``advantages``, ``returns`` and the
    per-sample ``info["advantage"]`` / ``info["return"]``.
    """
    for exp in experiences:
        pos = np.asarray(exp.index, dtype=np.int64)
        mask = exp.action_mask.float()
        adv = torch.as_tensor(per_sample_adv[pos], dtype=torch.float32).unsqueeze(1)
        exp.advantages = adv * mask
        if per_sample_ret is not None:
            ret = torch.as_tensor(per_sample_ret[pos], dtype=torch.float32).unsqueeze(1)
            exp.returns = ret * mask
        else:
            exp.returns = exp.advantages.clone()
        exp.info["advantage"] = adv.squeeze(1)
        exp.info["return"] = exp.returns.sum(-1) / mask.sum(-1).clamp(min=1)


def prompt_end_values(experiences: list[Experience], prompt_lens: np.ndarray, num_samples: int) -> np.ndarray:
    """V(s_t) of every sample: the critic's value at position P - 1 (the last prompt token).

    Returns:
        (num_samples,) float64 in sample order.
    """
    out = np.zeros(num_samples, dtype=np.float64)
    for exp in experiences:
        vals = exp.values.float()
        for j, p in enumerate(exp.index):
            out[p] = float(vals[j, int(prompt_lens[p]) - 1])
    return out


def critic_view(exp: Experience, prompt_lens: np.ndarray, rows: np.ndarray) -> Experience:
    """The experience the critic trains on: the action mask narrowed to position P - 1 of each
    real sample (V(prompt of step t) only, as the local backend's value model)."""
    mask = torch.zeros_like(exp.action_mask)
    for j, p in enumerate(exp.index):
        if rows[p] >= 0:
            mask[j, int(prompt_lens[p]) - 1] = 1
    return dataclasses.replace(exp, action_mask=mask, info=dict(exp.info))


def experiences_to_rows(experiences: list[Experience]) -> dict[int, dict]:
    """Back from experiences to per-sample step data (the inverse of :func:`build_samples`).

    Returns:
        sample position -> ``{"prompt_ids", "response_ids", "advantage", "return"}``, for every
        sample with action tokens; ``advantage``/``return`` are None when not yet attached.

    Raises:
        ValueError: the advantages of one sample are not constant over its action tokens.
    """
    out: dict[int, dict] = {}
    for exp in experiences:
        for j, p in enumerate(exp.index):
            t = int(exp.attention_mask[j].sum())
            seq = exp.sequences[j, :t].tolist()
            mask = exp.action_mask[j, : t - 1].bool()
            idx = torch.nonzero(mask).flatten()
            if idx.numel() == 0:
                continue
            first, last = int(idx[0]), int(idx[-1])
            if idx.numel() != last - first + 1:
                raise ValueError(f"sample {p}: action positions are not contiguous")
            rec = {"prompt_ids": seq[: first + 1], "response_ids": seq[first + 1: last + 2],
                   "advantage": None, "return": None}
            for key, name in (("advantage", "advantages"), ("return", "returns")):
                val = getattr(exp, name)
                if val is not None:
                    v = val[j, : t - 1][mask]
                    if not torch.all(v == v[0]):
                        raise ValueError(f"sample {p}: {name} differ between the tokens of one step")
                    rec[key] = float(v[0])
            out[int(p)] = rec
    return out
