"""Policy backends beyond the local transformers one.

- :class:`~g2po_bench.runtime.policies.openai.OpenAIPolicy`: any OpenAI-compatible chat-completions
  endpoint (``httpx``; retries, backoff, timeouts, rate limits, clear auth/connection errors);
- :class:`~g2po_bench.runtime.policies.vllm.VLLMPolicy`: an in-process vLLM engine (optional GPU
  extra, imported lazily inside the class);
- :class:`~g2po_bench.runtime.policies.meter.MeteredPolicy`: token/time accounting around any policy.

The local transformers policy lives with its trainer
(:class:`g2po_bench.algorithms.backends.local.transformers_policy.LocalPolicy`); the factory that builds any of the
three by name is :func:`g2po_bench.baselines.policies.make_policy` (the runtime never imports the
algorithms' backends, docs/design.md). All implement
:class:`g2po_bench.runtime.policy_protocol.Policy`.
"""

from g2po_bench.runtime.policies.meter import MeteredPolicy
from g2po_bench.runtime.policies.openai import (
    OpenAIPolicy,
    PolicyAuthError,
    PolicyConnectionError,
    PolicyError,
    PolicyRateLimitError,
    PolicyRequestError,
    PolicyServerError,
    PolicyTimeoutError,
)
from g2po_bench.runtime.policies.vllm import VLLMPolicy

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
