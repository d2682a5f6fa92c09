"""One sampling definition, shared by the local sampler and the trainer's log-probabilities.

PPO's ratio pi_theta / pi_old is only right when pi_old is the distribution the tokens were
sampled from. ``model.generate`` merges the model's own ``generation_config.json`` into
every call (Qwen2.5-Instruct sets ``repetition_penalty`` 1.05-1.1, ``temperature`` 0.7,
``top_p`` 0.8, ``top_k`` 20), while the trainer rescored raw ``logits / T``; the two
disagreed from the first step. Here:

- :class:`SamplingParams` is the whole definition: temperature, top-p, top-k, and nothing
  else. :meth:`SamplingParams.generation_config` gives ``generate`` an explicit
  :class:`transformers.GenerationConfig` that sets every logits-processor field to its
  neutral value (repetition penalty 1, no n-gram blocking, no minimum length, no top-k ...),
  so the model's ``generation_config.json`` cannot switch a processor on; a model config
  that sets a processor without a neutral value (e.g. ``suppress_tokens``) is refused with a
  clear error. The warpers themselves come from :meth:`SamplingParams.logits_processors`
  (transformers' own ``TemperatureLogitsWarper`` / ``TopKLogitsWarper`` /
  ``TopPLogitsWarper``), passed to ``generate`` as its only processors.
- :meth:`SamplingParams.rescore` applies the same processors to the logits of a scoring
  forward pass, so the trainer's old log-probs are log-probs of the sampled distribution.
  Training requires top-p 1 and top-k 0 (``g2po_bench.core.config`` refuses others): with truncation a
  token outside the *current* policy's nucleus would get log-prob -inf in the update.
- :class:`SampledLogprobs` records, inside ``generate``, the log-probability of every sampled
  token and the entropy of the distribution it was drawn from, under the final processed
  scores (what ``generate`` sampled from), without keeping a (steps, batch, vocabulary) tensor
  of scores. Recording reads the scores and changes nothing that is sampled.
- :class:`SeededCategorical` (per-sample seeds, an option of ``generate``): draws each row's
  token from the same processed distribution by inverse CDF with a uniform that depends on the
  row's own seed and the token index only (:mod:`g2po_bench.core.seeding`), so a response does
  not depend on the other rows of its batch; ``generate`` then decodes greedily over the one
  token left.

Sources: transformers ``GenerationMixin._get_logits_processor`` and
``_prepare_generation_config`` (which processors a config switches on, and that unset
fields are filled from ``model.generation_config``); verl and OpenRLHF likewise recompute
old log-probs from ``logits / T``.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any

import torch

from g2po_bench.core.seeding import uniforms

__all__ = ["SamplingParams", "SampledLogprobs", "SeededCategorical", "model_generation_overrides", "accepts_keyword"]

# GenerationConfig fields that switch a logits processor on, with their neutral value
# (transformers GenerationMixin._get_logits_processor); set explicitly on every call so that
# the model's generation_config.json cannot fill them in.
_NEUTRAL = {
    "temperature": 1.0, "top_k": 0, "top_p": 1.0, "typical_p": 1.0, "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "min_length": 0,
    "min_new_tokens": 0, "renormalize_logits": False, "remove_invalid_values": False,
    "num_beams": 1, "num_return_sequences": 1, "length_penalty": 1.0, "diversity_penalty": 0.0,
}
# fields whose neutral value is None (unset): the model's config would fill them in; refused
_NONE_NEUTRAL = ("sequence_bias", "bad_words_ids", "forced_bos_token_id", "forced_eos_token_id",
                 "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
                 "min_p", "top_h", "watermarking_config", "guidance_scale")


def model_generation_overrides(model) -> dict[str, Any]:
    """The sampling-relevant fields that ``model.generation_config`` sets to a non-neutral
    value (what ``generate`` would have applied by default). Token ids are not included.

    Returns:
        ``{field: value}``, e.g. ``{"repetition_penalty": 1.1, "temperature": 0.7}``.
    """
    gc = getattr(model, "generation_config", None)
    if gc is None:
        return {}
    out: dict[str, Any] = {}
    for key, neutral in _NEUTRAL.items():
        v = getattr(gc, key, None)
        if v is not None and v != neutral:
            out[key] = v
    for key in _NONE_NEUTRAL:
        v = getattr(gc, key, None)
        if v is not None and not (key == "guidance_scale" and v == 1):
            out[key] = v
    if getattr(gc, "do_sample", None):
        out["do_sample"] = True
    return out


@dataclass(frozen=True)
class SamplingParams:
    """The sampling distribution of a policy: ``softmax(warp(logits))``.

    Attributes:
        temperature: > 0 samples from ``logits / temperature``; 0 means greedy decoding.
        top_p: nucleus mass in (0, 1]; 1 disables it.
        top_k: keep the k largest logits; 0 disables it.

    Raises:
        ValueError: out-of-range values (named).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        """Whether this is greedy decoding (temperature 0)."""
        return self.temperature == 0

    @property
    def truncates(self) -> bool:
        """Whether top-p or top-k removes tokens (not allowed for training rollouts)."""
        return self.top_p < 1.0 or self.top_k > 0

    def logits_processors(self):
        """transformers' warpers of this distribution, in ``generate``'s order (temperature,
        top-k, top-p): a ``LogitsProcessorList``, empty for greedy decoding."""
        from transformers import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        procs = LogitsProcessorList()
        if self.greedy:
            return procs
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(float(self.temperature)))
        if self.top_k > 0:
            procs.append(TopKLogitsWarper(int(self.top_k)))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(float(self.top_p)))
        return procs

    def generate_kwargs(self, model, *, max_new_tokens: int, pad_token_id: int | None,
                        eos_token_id: int | list[int] | None, record: SampledLogprobs | None = None,
                        seeded: SeededCategorical | None = None) -> dict[str, Any]:
        """Keywords for ``model.generate``: an explicit ``GenerationConfig`` with every processor
        field at its neutral value and sampling on unless greedy, this definition's warpers as
        the only ``logits_processor`` (``record`` appended last, so it sees the final scores),
        and ``use_model_defaults=False`` on transformers versions that have it (4.50-4.x, where
        an explicit config's default-valued fields are otherwise replaced by the model's).

        With ``seeded`` (per-sample seeds; ignored for greedy definitions) the draw happens in
        ``seeded``, appended after ``record``, and ``generate`` decodes greedily over the one
        token it leaves: the same distribution, sampled row by row from each row's own seed.

        Raises:
            ValueError: ``model.generation_config`` sets a processor that has no neutral
                value (``suppress_tokens``, ``bad_words_ids``, ``min_p`` ...): remove it from
                the model folder's ``generation_config.json``.
        """
        from transformers import GenerationConfig

        bad = {k: v for k, v in model_generation_overrides(model).items() if k in _NONE_NEUTRAL}
        if bad:
            raise ValueError(
                f"the model's generation_config.json sets {bad}; these logits processors would change "
                "the sampled distribution without the trainer knowing. Remove them from the model "
                "folder's generation_config.json"
            )
        seeded = None if self.greedy else seeded
        config = GenerationConfig(**_NEUTRAL, do_sample=not self.greedy and seeded is None,
                                  max_new_tokens=int(max_new_tokens), pad_token_id=pad_token_id,
                                  eos_token_id=eos_token_id)
        procs = self.logits_processors()
        if record is not None:
            procs.append(record)
        if seeded is not None:
            procs.append(seeded)
        kwargs: dict[str, Any] = {"generation_config": config, "logits_processor": procs}
        if accepts_keyword(model.generate, "use_model_defaults"):
            kwargs["use_model_defaults"] = False
        return kwargs

    def rescore(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities (same shape, float32) of the distribution sampled from, given raw
        ``logits`` (..., V) of a scoring pass: the same processors as :meth:`logits_processors`
        (applied to the flattened positions), then ``log_softmax``. Temperature-only
        definitions (all training ones) reduce to ``log_softmax(logits / T)``.
        """
        x = logits.float()
        procs = self.logits_processors()
        if procs:
            shape = x.shape
            flat = x.reshape(-1, shape[-1])
            for proc in procs:  # none of these warpers reads input_ids
                flat = proc(None, flat)
            x = flat.reshape(shape)
        return torch.log_softmax(x, dim=-1)

    def describe(self) -> dict[str, Any]:
        """JSON record of this definition and the processors ``generate`` applies."""
        return {**asdict(self), "processors": [type(p).__name__ for p in self.logits_processors()],
                "repetition_penalty": 1.0, "model_generation_config": "ignored (explicit GenerationConfig)"}


def accepts_keyword(fn, name: str) -> bool:
    """Whether the callable ``fn`` (a model's ``forward`` or ``generate``) takes the keyword
    ``name``: transformers adds and renames keywords between versions. False when its
    signature cannot be read."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class SampledLogprobs:
    """A logits processor, placed last, that records log p(sampled token) and the entropy of
    the sampling distribution, under the final processed scores of each decoding step.

    ``generate`` calls processors before sampling, so the token of step t is known at the call
    of step t+1 (it is the last column of ``input_ids``) and the last one from the returned
    sequences (:meth:`finish`). Only one (batch, vocabulary) tensor is kept at a time. The
    entropy -sum p log p (nats; masked tokens, log p = -inf, add 0) is known at the call
    itself; :attr:`entropy_steps` holds one (batch,) tensor per decoding step.
    """

    def __init__(self):
        self._prev: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []
        self.entropy_steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._prev is not None:
            self.steps.append(self._prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self._prev = torch.log_softmax(scores.float(), dim=-1)
        self.entropy_steps.append(-(self._prev.exp() * self._prev).nan_to_num(0.0).sum(-1))
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """(B, T) float32 log-probs of the T generated tokens; ``sequences`` is the output of
        ``generate`` (prompt columns first)."""
        if self._prev is not None:
            self.steps.append(self._prev.gather(-1, sequences[:, -1:]).squeeze(-1))
            self._prev = None
        if not self.steps:
            return torch.zeros((sequences.shape[0], 0), dtype=torch.float32, device=sequences.device)
        return torch.stack(self.steps, dim=1)

    def entropies(self, batch_size: int) -> torch.Tensor:
        """(B, T) float32 entropies (nats) of the sampling distribution at each generated token."""
        if not self.entropy_steps:
            return torch.zeros((batch_size, 0), dtype=torch.float32)
        return torch.stack(self.entropy_steps, dim=1)


class SeededCategorical:
    """A logits processor, placed last, that samples each row's next token from its own seed.

    At the j-th decoding step (the j-th call), row r's token is the inverse-CDF draw
    ``min{v : cdf_r(v) > u_r * cdf_r(V-1)}`` from ``softmax(scores_r)`` (the processed scores:
    temperature, top-k, top-p already applied; computed in float64), with
    ``u_r = uniforms([seeds[r]], j)`` (:func:`g2po_bench.core.seeding.uniforms`). The returned
    scores are -inf everywhere but at the drawn token, so greedy decoding emits it. The draw of
    a row depends only on its seed, the token index and its own scores, never on the other rows
    of the batch (up to the float rounding of the model's forward pass, which can differ with
    the batch's shape and padding; a flip needs a uniform within that rounding of a CDF step).

    Args:
        seeds: one non-negative integer per row of the batch, in row order.
    """

    def __init__(self, seeds):
        self.seeds = [int(s) for s in seeds]
        self.calls = 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.shape[0] != len(self.seeds):
            raise ValueError(f"SeededCategorical has {len(self.seeds)} seeds for a batch of {scores.shape[0]} rows")
        u = torch.as_tensor(uniforms(self.seeds, self.calls), dtype=torch.float64, device=scores.device)
        self.calls += 1
        cdf = torch.softmax(scores.double(), dim=-1).cumsum(dim=-1)
        target = (u * cdf[:, -1]).unsqueeze(-1)
        token = torch.searchsorted(cdf, target, right=True).clamp(max=scores.shape[-1] - 1)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, token, 0.0)
