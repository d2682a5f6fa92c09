"""A :class:`g2po_bench.runtime.policy_protocol.Policy` over OpenRLHF's vLLM engines.

The suite's rollout engine (:func:`g2po_bench.benchmarks.rollout.collect_rollouts`: step prompts with
history, groups of N rollouts, environments in worker processes) asks this policy for one
response per active environment at every step; the policy tokenizes the prompts exactly as the
local backend does (:class:`g2po_bench.algorithms.backends.local.transformers_policy.LocalPolicy`: chat template when
the tokenizer has one, else BOS + text; long prompts keep their last ``max_prompt_tokens``
tokens), spreads them over the engines, and returns the sampled tokens.

An engine is any Ray actor handle with OpenRLHF 0.11.2's ``RolloutRayActor.generate``
interface: ``generate.remote(prompt_token_ids, sampling_params)`` returning a vLLM
``RequestOutput`` (``.outputs[0].token_ids``, ``.finish_reason``). OpenRLHF's own engines are
used unchanged (``create_vllm_engines``); :mod:`.cpu` has a CPU stand-in with the same method.
Every request carries its own seed (``seed + k`` for the k-th prompt of the call), so results
do not depend on how requests are spread over the engines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from g2po_bench.runtime.policy_protocol import Generation

__all__ = ["EnginePolicy", "encode_prompt", "vllm_sampling_params"]


def encode_prompt(tokenizer, prompt: str, max_prompt_tokens: int, use_chat_template: bool = True) -> tuple[list[int], bool]:
    """Token ids of one prompt as the local backend builds them; returns (ids, truncated)."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        ids = list(ids)
    else:
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        if tokenizer.bos_token_id is not None:
            ids = [tokenizer.bos_token_id] + ids
    if len(ids) > max_prompt_tokens:
        return ids[-max_prompt_tokens:], True
    return ids, False


def vllm_sampling_params(**kwargs: Any):
    """``vllm.SamplingParams(**kwargs)`` (imported lazily: only the GPU path needs vLLM)."""
    from vllm import SamplingParams

    return SamplingParams(**kwargs)


class EnginePolicy:
    """Policy over a list of engine actor handles (see the module docstring).

    Args:
        engines: Ray actor handles with ``generate(prompt_token_ids, sampling_params)``.
        tokenizer: the policy's tokenizer (prompts are encoded and responses decoded here).
        max_prompt_tokens: left truncation of prompts (``train.max_prompt_tokens``).
        sampling_params: factory ``(**kwargs) -> sampling params`` (default vLLM's).
        use_chat_template: as LocalPolicy.
    """

    def __init__(self, engines: Sequence[Any], tokenizer, *, max_prompt_tokens: int,
                 sampling_params: Callable[..., Any] = vllm_sampling_params, use_chat_template: bool = True):
        if not engines:
            raise ValueError("EnginePolicy needs at least one engine")
        self.engines = list(engines)
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.sampling_params = sampling_params
        self.use_chat_template = use_chat_template
        self.truncated_prompts = 0

    def encode_prompt(self, prompt: str) -> list[int]:
        ids, truncated = encode_prompt(self.tokenizer, prompt, self.max_prompt_tokens, self.use_chat_template)
        self.truncated_prompts += int(truncated)
        return ids

    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int,
                 top_p: float = 1.0, seed: int | None = None) -> list[Generation]:
        """Sample one response per prompt (see :class:`g2po_bench.runtime.policy_protocol.Policy`)."""
        import ray

        if not prompts:
            return []
        pairs = [encode_prompt(self.tokenizer, p, self.max_prompt_tokens, self.use_chat_template) for p in prompts]
        self.truncated_prompts += sum(int(cut) for _, cut in pairs)
        encoded = [ids for ids, _ in pairs]
        refs = []
        for k, ids in enumerate(encoded):
            params = self.sampling_params(
                temperature=float(temperature), top_p=float(top_p) if temperature > 0 else 1.0,
                top_k=-1, max_tokens=int(max_new_tokens), min_tokens=1,
                seed=None if seed is None else int(seed) + k, skip_special_tokens=True,
            )
            refs.append(self.engines[k % len(self.engines)].generate.remote(ids, params))
        outputs = ray.get(refs)
        eos = self.tokenizer.eos_token_id
        gens = []
        for (ids, p_cut), out in zip(pairs, outputs):
            comp = out.outputs[0]
            resp = list(comp.token_ids)
            text = self.tokenizer.decode(resp, skip_special_tokens=True)
            finish = getattr(comp, "finish_reason", None)
            gens.append(Generation(text=text, prompt_ids=ids, response_ids=resp,
                                   info={"finish_reason": finish,
                                         "finished": finish == "stop" or (bool(resp) and resp[-1] == eos),
                                         "prompt_truncated": p_cut}))
        return gens
