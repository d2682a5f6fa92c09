"""Token and time accounting around any :class:`g2po_bench.runtime.policy_protocol.Policy`.

:class:`MeteredPolicy` forwards ``generate`` and counts prompts, prompt tokens, response
tokens and the wall time spent generating, so a run can report tokens per second for any
backend. Token counts come from ``prompt_ids``/``response_ids`` when the backend exposes them
(local, vLLM) and from the server's ``usage`` (``info["prompt_tokens"]``,
``info["completion_tokens"]``) otherwise. It also records the sampling settings and seed of
every call (``calls``), which the baselines write to the run folder.
"""

from __future__ import annotations

import time
from typing import Any

from g2po_bench.runtime.policy_protocol import Generation, Policy

__all__ = ["MeteredPolicy"]


class MeteredPolicy:
    """Wrap ``policy``; see the module docstring.

    Args:
        policy: any policy.
        keep_calls: how many per-call records to keep in ``calls`` (the newest; 0 = none).
        on_call: optional callback receiving each call's record as it completes (e.g. to
            append it to a progress file, so a killed run keeps its throughput figures).
    """

    def __init__(self, policy: Policy, *, keep_calls: int = 100_000, on_call: Any = None):
        self.policy = policy
        self.keep_calls = keep_calls
        self.on_call = on_call
        self.calls: list[dict[str, Any]] = []
        self.num_calls = 0
        self.num_prompts = 0
        self.prompt_tokens = 0
        self.response_tokens = 0
        self.seconds = 0.0

    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int,
                 top_p: float = 1.0, seed: int | None = None) -> list[Generation]:
        start = time.perf_counter()
        gens = self.policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                                    top_p=top_p, seed=seed)
        dt = time.perf_counter() - start
        p_tok = sum(_count(g.prompt_ids, g.info.get("prompt_tokens")) for g in gens)
        r_tok = sum(_count(g.response_ids, g.info.get("completion_tokens")) for g in gens)
        self.num_calls += 1
        self.num_prompts += len(prompts)
        self.prompt_tokens += p_tok
        self.response_tokens += r_tok
        self.seconds += dt
        record = {"prompts": len(prompts), "temperature": temperature, "top_p": top_p,
                  "max_new_tokens": max_new_tokens, "seed": seed, "prompt_tokens": p_tok,
                  "response_tokens": r_tok, "seconds": round(dt, 4)}
        if self.keep_calls:
            self.calls.append(record)
            if len(self.calls) > self.keep_calls:
                del self.calls[: len(self.calls) - self.keep_calls]
        if self.on_call is not None:
            self.on_call(record)
        return gens

    @property
    def tokens_per_second(self) -> float:
        """Response tokens per second of generation wall time (0 before any call)."""
        return self.response_tokens / self.seconds if self.seconds > 0 else 0.0

    def stats(self) -> dict[str, Any]:
        """Totals: calls, prompts, prompt/response tokens, seconds, tokens per second."""
        return {
            "calls": self.num_calls, "prompts": self.num_prompts, "prompt_tokens": self.prompt_tokens,
            "response_tokens": self.response_tokens, "generation_seconds": round(self.seconds, 3),
            "response_tokens_per_second": round(self.tokens_per_second, 3),
            "total_tokens_per_second": round((self.prompt_tokens + self.response_tokens) / self.seconds, 3)
            if self.seconds > 0 else 0.0,
        }

    def describe(self) -> dict[str, Any]:
        inner = getattr(self.policy, "describe", None)
        return inner() if callable(inner) else {"kind": type(self.policy).__name__}

    def __getattr__(self, name: str) -> Any:  # forward anything else (close, tokenizer, ...)
        return getattr(self.policy, name)


def _count(ids: list[int], reported: Any) -> int:
    if ids:
        return len(ids)
    return int(reported) if isinstance(reported, (int, float)) else 0
