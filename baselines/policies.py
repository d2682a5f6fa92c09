"""``make_policy(kind, **settings)``: build any policy backend by name.

=========  ==========================================================================
kind       implementation and its settings
=========  ==========================================================================
``local``  :class:`LocalChatPolicy` (= :class:`g2po_bench.algorithms.backends.local.transformers_policy.LocalPolicy`
           plus stop strings and a description): ``path`` (model folder) or
           ``model`` + ``tokenizer``; ``dtype``, ``device``, ``max_prompt_tokens``,
           ``batch_size``, ``use_chat_template``, ``stop``.
``vllm``   :class:`g2po_bench.runtime.policies.VLLMPolicy`: ``path``, ``dtype``,
           ``max_prompt_tokens``, ``stop``, ``gpu_memory_utilization``, ... (GPU extra).
``openai`` :class:`g2po_bench.runtime.policies.OpenAIPolicy`: ``base_url``, ``model``,
           ``api_key_env``, ``timeout``, ``max_retries``, ``max_concurrency``, ``stop``, ...
=========  ==========================================================================

The factory lives here rather than in :mod:`g2po_bench.runtime.policies` because the local backend
belongs to ``g2po_bench.algorithms.backends``, above the runtime, which never imports it (docs/design.md).
Every policy built here has ``describe() -> dict`` (its settings, for the run folder).
"""

from __future__ import annotations

from typing import Any

from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy
from g2po_bench.baselines.config import POLICY_KINDS
from g2po_bench.runtime.policies.openai import OpenAIPolicy
from g2po_bench.runtime.policy_protocol import Policy

__all__ = ["make_policy", "LocalChatPolicy", "POLICY_KINDS"]



class _StopStringModel:
    """A transformers model whose ``generate`` also stops at any of ``stop`` (per row).

    Everything else is forwarded to the wrapped model, so :class:`LocalPolicy` uses it as is.
    A row that stopped is padded by ``generate``; LocalPolicy strips the padding.
    """

    def __init__(self, model, tokenizer, stop: list[str]):
        from transformers import StopStringCriteria

        self._model = model
        self._criterion = StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop))

    def generate(self, *args, **kwargs):
        from transformers import StoppingCriteriaList

        crit = list(kwargs.pop("stopping_criteria", None) or [])
        kwargs["stopping_criteria"] = StoppingCriteriaList([*crit, self._criterion])
        return self._model.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class LocalChatPolicy(LocalPolicy):
    """:class:`LocalPolicy` with optional stop strings and a :meth:`describe` for run folders.

    Args:
        model, tokenizer: a loaded causal LM and its tokenizer.
        stop: stop strings (kept in the text; e.g. ``["</action>"]`` ends a ReAct step).
        path, dtype: recorded by :meth:`describe`.
        **kwargs: :class:`LocalPolicy` options (``max_prompt_tokens``, ``batch_size``,
            ``use_chat_template``).
    """

    kind = "local"

    def __init__(self, model, tokenizer, *, stop: list[str] | None = None, path: str | None = None,
                 dtype: str = "float32", **kwargs):
        self.stop = list(stop) if stop else None
        self.path = path
        self.dtype = dtype
        super().__init__(_StopStringModel(model, tokenizer, self.stop) if self.stop else model, tokenizer, **kwargs)

    def describe(self) -> dict[str, Any]:
        import torch

        return {"kind": self.kind, "path": self.path, "dtype": self.dtype, "device": str(self.device),
                "max_prompt_tokens": self.max_prompt_tokens, "batch_size": self.batch_size,
                "use_chat_template": self.use_chat_template, "stop": self.stop,
                "torch_threads": torch.get_num_threads(),
                "seed_rule": "torch.manual_seed(seed) before each generate call"}


def make_policy(kind: str, **settings: Any) -> Policy:
    """Build a policy backend by name (see the module docstring for the settings).

    Raises:
        ValueError: unknown kind or a missing required setting.
        ImportError: ``vllm`` without the GPU extra (the message names the install command).
    """
    if kind == "local":
        stop = settings.pop("stop", None)
        dtype = settings.pop("dtype", "float32")
        device = settings.pop("device", "auto")
        path = settings.pop("path", None)
        model = settings.pop("model", None)
        tokenizer = settings.pop("tokenizer", None)
        if model is None or tokenizer is None:
            if not path:
                raise ValueError("make_policy('local') needs path=<model folder> (or model= and tokenizer=)")

            model, tokenizer = load_model_and_tokenizer(path, dtype=dtype, device=device)
        return LocalChatPolicy(model, tokenizer, stop=stop, path=None if path is None else str(path),
                               dtype=dtype, **settings)
    if kind == "vllm":
        # lazy: vLLM is an optional GPU dependency
        from g2po_bench.runtime.policies.vllm import VLLMPolicy

        if not settings.get("path"):
            raise ValueError("make_policy('vllm') needs path=<model folder>")
        return VLLMPolicy(settings.pop("path"), **settings)
    if kind == "openai":

        base_url = settings.pop("base_url", None)
        model = settings.pop("model", None)
        if not base_url or not model:
            raise ValueError("make_policy('openai') needs base_url=<.../v1> and model=<name>")
        return OpenAIPolicy(base_url, model, **settings)
    raise ValueError(f"unknown policy kind {kind!r}; choose one of {', '.join(POLICY_KINDS)}")
