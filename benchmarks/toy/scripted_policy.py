"""A scripted stochastic policy for the toy corridor, with explicit action probabilities.

:class:`ScriptedCorridorPolicy` implements :class:`g2po_bench.runtime.policy_protocol.Policy` without a
model: the distribution over its responses is a known function of the current observation
(the ``Now:`` part of the toy prompt, :func:`g2po_bench.benchmarks.toy.build_prompt`), so values
can be computed exactly by dynamic programming (the credit instrument's exact mode,
:mod:`g2po_bench.analysis.credit.exact`) and compared with Monte-Carlo estimates from the same
policy. It samples per batch from ``seed`` or per prompt from ``seeds``
(:mod:`g2po_bench.core.seeding`, one uniform per response, inverse CDF over the responses in
the order of the table). The sampling temperature is ignored: the probabilities are the
policy's.

Default table (:func:`corridor_probabilities`): in room k of n the policy goes east with
probability 0.4 + 0.3 k / (n - 1), west 0.2, looks 0.1, tries the unknown ``jump`` (refused:
"Nothing happens.") or answers without tags (invalid) with the rest split 2:1; after a refused
action it goes east 0.5, jumps 0.3, looks 0.2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from g2po_bench.core.seeding import uniforms
from g2po_bench.runtime.policy_protocol import Generation

__all__ = ["ScriptedCorridorPolicy", "corridor_probabilities", "current_observation", "respond", "INVALID_RESPONSE"]

#: the response without action tags (invalid output; the parser's fallback text is refused)
INVALID_RESPONSE = "i am not sure what to do"


def respond(action: str) -> str:
    """The response text of ``action`` in the think/action format."""
    return f"<think>go on</think><action>{action}</action>"


def current_observation(prompt: str) -> str:
    """The current observation text of a toy prompt (between ``" Now: "`` and ``" Actions: "``).

    Raises:
        ValueError: ``prompt`` is not a toy prompt.
    """
    head, sep, tail = prompt.rpartition(" Now: ")
    if not sep or " Actions: " not in tail:
        raise ValueError(f"not a toy corridor prompt (no 'Now: ... Actions:' part): {prompt[:80]!r}")
    return tail.rsplit(" Actions: ", 1)[0]


def corridor_probabilities(observation: str) -> dict[str, float]:
    """The default response distribution (module docstring) for an observation text.

    Returns:
        response text -> probability (sums to 1), in a fixed order.
    """
    if observation.startswith("Nothing happens"):
        return {respond("go east"): 0.5, respond("jump"): 0.3, respond("look"): 0.2}
    words = observation.replace(".", " ").split()
    try:
        k, n = int(words[words.index("room") + 1]), int(words[words.index("of") + 1])
    except (ValueError, IndexError):
        k, n = 0, 2
    east = 0.4 + 0.3 * k / max(n - 1, 1)
    rest = 1.0 - east - 0.3
    return {respond("go east"): east, respond("go west"): 0.2, respond("look"): 0.1,
            respond("jump"): rest * 2 / 3, INVALID_RESPONSE: rest / 3}


class ScriptedCorridorPolicy:
    """The scripted policy (module docstring).

    Args:
        probabilities: observation text -> {response text: probability}; default
            :func:`corridor_probabilities`. A mapping is used for every observation.

    Raises:
        ValueError (from :meth:`response_probabilities`): probabilities that are negative or do
            not sum to 1 (within 1e-9).
    """

    def __init__(self, probabilities: Callable[[str], Mapping[str, float]] | Mapping[str, float] | None = None):
        if probabilities is None:
            probabilities = corridor_probabilities
        if not callable(probabilities):
            table = dict(probabilities)
            probabilities = lambda _obs: table  # noqa: E731
        self._probabilities = probabilities

    def response_probabilities(self, prompt: str) -> dict[str, float]:
        """response text -> probability for a toy prompt, in sampling order."""
        probs = dict(self._probabilities(current_observation(prompt)))
        values = np.array(list(probs.values()), dtype=float)
        if np.any(values < 0) or abs(values.sum() - 1.0) > 1e-9:
            raise ValueError(f"response probabilities must be >= 0 and sum to 1, got {probs}")
        return probs

    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int, top_p: float = 1.0,
                 seed: int | None = None, seeds: list[int] | None = None) -> list[Generation]:
        """One response per prompt drawn from :meth:`response_probabilities` (see the module
        docstring); ``temperature``, ``top_p`` and ``max_new_tokens`` are ignored.

        Raises:
            ValueError: ``seeds`` does not hold one seed per prompt.
        """
        if seeds is not None:
            if len(seeds) != len(prompts):
                raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts")
            u = uniforms(seeds, 0)
        else:
            u = np.random.default_rng(seed).random(len(prompts))
        out = []
        for prompt, x in zip(prompts, u):
            probs = self.response_probabilities(prompt)
            texts = list(probs)
            cdf = np.cumsum(list(probs.values()))
            j = min(int(np.searchsorted(cdf, x * cdf[-1], side="right")), len(texts) - 1)
            out.append(Generation(text=texts[j], info={"finished": True}))
        return out
