"""Test support: a CPU stand-in for OpenRLHF's vLLM rollout engine (``RolloutRayActor``), same
interface.

See ``tests/openrlhf_standins.py``. Imports only torch and transformers (no OpenRLHF), so engine
workers start quickly.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer

__all__ = ["HFRolloutEngine", "cpu_sampling_params"]


def cpu_sampling_params(**kwargs: Any) -> SimpleNamespace:
    """Sampling parameters for :class:`HFRolloutEngine` (the fields of vLLM's it reads)."""
    return SimpleNamespace(**kwargs)


class HFRolloutEngine:
    """A transformers model behind OpenRLHF's rollout-engine interface (see the module docstring).

    Args:
        model_path: local model folder.
        num_threads: torch threads of this worker.
    """

    def __init__(self, model_path: str, num_threads: int = 1):
        torch.set_num_threads(max(1, num_threads))
        self.model, self.tokenizer = load_model_and_tokenizer(model_path, dtype="float32", device="cpu")
        self.model.eval()
        self.weight_version = 0

    @torch.no_grad()
    def generate(self, prompt_token_ids: list[int], sampling_params) -> SimpleNamespace:
        """One sampled continuation of ``prompt_token_ids`` (vLLM ``RequestOutput`` shape)."""
        p = sampling_params
        temp = float(getattr(p, "temperature", 1.0))
        if getattr(p, "seed", None) is not None:
            torch.manual_seed(int(p.seed))
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        ids = torch.tensor([list(prompt_token_ids)], dtype=torch.long)
        kwargs = dict(max_new_tokens=int(p.max_tokens), pad_token_id=pad, eos_token_id=eos,
                      attention_mask=torch.ones_like(ids))
        if temp > 0:
            kwargs.update(do_sample=True, temperature=temp, top_p=float(getattr(p, "top_p", 1.0)), top_k=0)
        else:
            kwargs.update(do_sample=False)
        new = self.model.generate(input_ids=ids, **kwargs)[0, ids.shape[1]:].tolist()
        finish = "length"
        if eos in new:
            new, finish = new[: new.index(eos) + 1], "stop"
        out = SimpleNamespace(token_ids=new, text=self.tokenizer.decode(new, skip_special_tokens=True),
                              finish_reason=finish)
        return SimpleNamespace(prompt_token_ids=list(prompt_token_ids), outputs=[out])

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """The weight sync: load the trained actor's parameters; returns the new version."""
        self.model.load_state_dict(state_dict)
        self.weight_version += 1
        return self.weight_version

    def get_weight_version(self) -> int:
        return self.weight_version

    def get_num_unfinished_requests(self) -> int:
        return 0

    def sleep(self, level: int = 1) -> None:
        return None

    def wake_up(self, tags=None) -> None:
        return None

    def reset_prefix_cache(self) -> None:
        return None
