"""The policy interface used by training rollouts, evaluation and the prompting baselines.

A policy is reached through one small interface (generate a batch of responses with their
tokens; docs/design-notes.md "Data flow") with implementations for local transformers
(:mod:`g2po_bench.algorithms.backends.local.transformers_policy`), vLLM and OpenAI-compatible endpoints. The rollout
engine depends only on this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["Generation", "Policy", "response_was_cut", "supports_sample_seeds"]


@dataclass
class Generation:
    """One sampled response.

    Attributes:
        text: decoded response text (special tokens removed).
        prompt_ids: token ids of the prompt as the model saw it (after any chat template and
            truncation); empty for remote policies that do not expose tokens.
        response_ids: sampled token ids, including the end-of-sequence token if one was sampled.
        info: backend extras, JSON-serialisable. Keys the rollout engine reads (absent =
            not known, counted as False): ``"prompt_truncated"`` (bool: the prompt was longer
            than the policy's ``max_prompt_tokens`` and kept only its last tokens),
            ``"finished"`` (bool: the response ended by itself, e.g. with EOS or a stop
            string, rather than at ``max_new_tokens``), ``"finish_reason"`` (``"stop"``,
            ``"length"``, ... where the backend reports one).
        logprobs: per response token, its log-probability under the distribution the sampler
            drew it from (None when the backend does not report it, or for greedy decoding).
        entropies: per response token, the entropy (nats) of the distribution the sampler drew
            it from (None when the backend does not report it, or for greedy decoding); the
            estimator input ``entropies`` is their mean per step (EMPG).
    """

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    logprobs: list[float] | None = None
    entropies: list[float] | None = None


def response_was_cut(gen: Generation) -> bool:
    """Whether ``gen``'s response was cut at the token limit (``max_new_tokens``).

    ``info["finish_reason"] == "length"`` where the backend reports a finish reason (vLLM,
    OpenAI-compatible servers), else ``info["finished"] is False`` (local transformers: no EOS
    among the sampled tokens); False when the policy reports neither (e.g. scripted policies).
    """
    reason = gen.info.get("finish_reason")
    if reason is not None:
        return reason == "length"
    return gen.info.get("finished") is False


@runtime_checkable
class Policy(Protocol):
    """Anything that turns a batch of prompts into responses."""

    def generate(
        self,
        prompts: list[str],
        *,
        temperature: float,
        max_new_tokens: int,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt. ``temperature`` 0 means greedy decoding.
        ``seed`` makes sampling reproducible for the same prompts on the same backend.

        Optional capability: a policy whose ``generate`` also takes ``seeds`` (a list with one
        non-negative integer per prompt) samples each response from its own seed alone, so a
        response does not depend on which other prompts share the call or how the call is cut
        into batches (:func:`supports_sample_seeds`; :mod:`g2po_bench.core.seeding`). ``seed``
        is then ignored."""
        ...


def supports_sample_seeds(policy) -> bool:
    """Whether ``policy.generate`` takes per-prompt ``seeds`` (see :class:`Policy`)."""
    import inspect

    try:
        params = inspect.signature(policy.generate).parameters
    except (TypeError, ValueError):
        return False
    return "seeds" in params
