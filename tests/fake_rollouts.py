"""Rollouts of the toy benchmark from a seeded fake policy, for the backend tests that need a
RolloutBatch with token ids but no model (OpenRLHF unit and stack tests)."""

from __future__ import annotations

import numpy as np

from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.rollout import RolloutBatch, collect_rollouts
from g2po_bench.runtime.policy_protocol import Generation
from g2po_bench.runtime.workers import EnvPool

TOY = get_benchmark("toy")


class TokenPolicy:
    """Seeded random responses (drawn from ``responses``) with fake token ids: prompt ids of
    3-9 tokens (from the prompt's length), responses of 1-5 tokens then EOS (id 2)."""

    def __init__(self, responses: list[str]):
        self.responses = responses

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None):
        rng = np.random.default_rng(seed)
        out = []
        for p in prompts:
            text = self.responses[int(rng.integers(len(self.responses)))]
            prompt_ids = [1] + [int(x) for x in rng.integers(3, 50, size=len(p) % 7 + 3)]
            resp = [int(x) for x in rng.integers(3, 50, size=int(rng.integers(1, 6)))] + [2]
            out.append(Generation(text=text, prompt_ids=prompt_ids, response_ids=resp))
        return out


def act(action: str) -> str:
    """A well-formed model response choosing ``action``."""
    return f"<think>t</think><action>{action}</action>"


def toy_rollouts(seed: int = 0, groups: int = 3, group_size: int = 4, max_steps: int = 5) -> RolloutBatch:
    """``groups`` groups of ``group_size`` toy episodes (valid, invalid and untagged outputs)."""
    tasks = TOY.load_tasks(None, "train")[:groups]
    pol = TokenPolicy([act("go east"), act("go west"), act("look"), "no tags"])
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        return collect_rollouts(pol, pool, TOY, tasks, group_size=group_size, max_steps=max_steps,
                                temperature=1.0, max_new_tokens=8, seed=seed)
