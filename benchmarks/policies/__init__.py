"""Policy backends beyond the local transformers one.

- :class:`~g2po_bench.benchmarks.policies.openai.OpenAIPolicy`: any OpenAI-compatible chat-completions
  endpoint (``httpx``; retries, backoff, timeouts, rate limits, clear auth/connection errors);
- :class:`~g2po_bench.benchmarks.policies.vllm.VLLMPolicy`: an in-process vLLM engine (optional GPU
  extra, imported lazily inside the class);
- :class:`~g2po_bench.benchmarks.policies.meter.MeteredPolicy`: token/time accounting around any policy.

The local transformers policy lives with its trainer
(:class:`g2po_bench.algorithms.backends.local.policy.LocalPolicy`); the factory that builds any of the
three by name is :func:`g2po_bench.baselines.policies.make_policy` (benchmarks never import the
algorithms' backends, docs/design.md). All implement
:class:`g2po_bench.benchmarks.policy.Policy`.
"""

from g2po_bench.benchmarks.policies.meter import MeteredPolicy
from g2po_bench.benchmarks.policies.openai import (
    OpenAIPolicy,
    PolicyAuthError,
    PolicyConnectionError,
    PolicyError,
    PolicyRateLimitError,
    PolicyRequestError,
    PolicyServerError,
    PolicyTimeoutError,
)
from g2po_bench.benchmarks.policies.vllm import VLLMPolicy

__all__ = [
    "MeteredPolicy",
    "OpenAIPolicy",
    "VLLMPolicy",
    "PolicyError",
    "PolicyAuthError",
    "PolicyConnectionError",
    "PolicyTimeoutError",
    "PolicyServerError",
    "PolicyRateLimitError",
    "PolicyRequestError",
]
