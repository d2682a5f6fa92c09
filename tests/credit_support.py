"""Test support for the credit instrument: a scripted toy policy that also has a model.

:class:`ScriptedModelPolicy` chooses its responses with the toy corridor's scripted, explicit
probabilities (so exact mode computes A* by dynamic programming) and reports them as token ids of
a tiny transformers model (so the gradient alignment takes the loss gradient of those tokens under
that model). Sampling and scoring then disagree (the model did not sample them), which the
instrument's checks do not need: they compare gradients of the same rows.
"""

from __future__ import annotations

from local_trainer import tiny_model_dir

from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.benchmarks.toy.scripted_policy import ScriptedCorridorPolicy


class ScriptedModelPolicy(ScriptedCorridorPolicy):
    """The scripted corridor policy with a ``model`` and ``tokenizer`` (module docstring)."""

    def __init__(self, model, tokenizer, probabilities=None):
        super().__init__(probabilities)
        self.model = model
        self.tokenizer = tokenizer

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, *, temperature, max_new_tokens, top_p=1.0, seed=None, seeds=None):
        out = super().generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens, top_p=top_p,
                               seed=seed, seeds=seeds)
        for prompt, g in zip(prompts, out):
            g.prompt_ids = self._ids(prompt)[-96:]
            g.response_ids = self._ids(g.text) + [self.tokenizer.eos_token_id]
        return out


def scripted_model_policy(root) -> ScriptedModelPolicy:
    """A :class:`ScriptedModelPolicy` over the tests' tiny model (built under ``root``)."""
    model, tok = load_model_and_tokenizer(tiny_model_dir(root), dtype="float32", device="cpu")
    return ScriptedModelPolicy(model, tok)
