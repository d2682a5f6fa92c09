"""A :class:`g2po_bench.runtime.policy_protocol.Policy` over an in-process vLLM engine (GPU; optional extra).

``vllm`` is imported inside :class:`VLLMPolicy` only, so importing this module, the package,
its CLI and its tests never needs it (docs/design-notes.md "Rules of the house"). Install the GPU
extra (``pip install -e '.[gpu]'``) on a CUDA machine to use it.

Prompts are tokenised here with the model's tokenizer (chat template applied, as in
:class:`g2po_bench.algorithms.backends.local.transformers_policy.LocalPolicy`, and left-truncated to
``max_prompt_tokens``) and passed to vLLM as token ids, so ``prompt_ids`` and ``response_ids``
are exact and the training rollouts can re-score them. Prompt ``i`` of a :meth:`generate` call
is sampled with seed ``seed + i``.
"""

from __future__ import annotations

from typing import Any

from g2po_bench.runtime.policy_protocol import Generation

__all__ = ["VLLMPolicy", "VLLM_INSTALL_HINT"]

VLLM_INSTALL_HINT = (
    "the vLLM policy needs the optional GPU extra: pip install -e '.[gpu]' (or pip install vllm) on a "
    "CUDA machine; on a CPU use policy kind 'local'"
)


def _import_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{VLLM_INSTALL_HINT} ({exc})") from None
    return vllm


class VLLMPolicy:
    """Generation with ``vllm.LLM`` from a local model folder.

    Args:
        path: local model folder (the same folders :func:`load_model_and_tokenizer` reads).
        dtype: "float32" | "bfloat16" | "float16" | "auto".
        max_prompt_tokens: prompts longer than this keep their last tokens
            (counted in ``truncated_prompts``).
        use_chat_template: wrap each prompt as one user message when the tokenizer has a template.
        stop: stop strings (kept in the returned text, so a closing tag stays parseable).
        gpu_memory_utilization, tensor_parallel_size, max_model_len, enforce_eager, seed:
            passed to ``vllm.LLM``.
        llm: an already built engine (tests, or sharing one engine); ``path`` is then only recorded.
        engine_kwargs: further ``vllm.LLM`` keyword arguments.
    """

    kind = "vllm"

    def __init__(
        self,
        path: str,
        *,
        dtype: str = "bfloat16",
        max_prompt_tokens: int = 2048,
        use_chat_template: bool = True,
        stop: list[str] | None = None,
        gpu_memory_utilization: float = 0.85,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
        seed: int = 0,
        llm: Any = None,
        engine_kwargs: dict[str, Any] | None = None,
    ):
        self._vllm = _import_vllm()
        self.path = str(path)
        self.dtype = dtype
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.stop = list(stop) if stop else None
        self.engine_settings = {
            "dtype": dtype, "gpu_memory_utilization": gpu_memory_utilization,
            "tensor_parallel_size": tensor_parallel_size, "max_model_len": max_model_len,
            "enforce_eager": enforce_eager, "seed": seed, **(engine_kwargs or {}),
        }
        if llm is None:
            kwargs = {k: v for k, v in self.engine_settings.items() if v is not None}
            llm = self._vllm.LLM(model=self.path, tokenizer=self.path, trust_remote_code=False, **kwargs)
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.use_chat_template = use_chat_template and bool(getattr(self.tokenizer, "chat_template", None))
        self.truncated_prompts = 0

    def describe(self) -> dict[str, Any]:
        """The settings of this policy for the run folder."""
        return {"kind": self.kind, "path": self.path, "max_prompt_tokens": self.max_prompt_tokens,
                "use_chat_template": self.use_chat_template, "stop": self.stop,
                "engine": dict(self.engine_settings),
                "vllm_version": getattr(self._vllm, "__version__", None),
                "seed_rule": "prompt i of a generate call gets seed + i"}

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of one prompt (chat template applied if enabled), left-truncated."""
        tok = self.tokenizer
        if self.use_chat_template:
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                          add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            ids = list(ids)
        else:
            ids = list(tok(prompt, add_special_tokens=False)["input_ids"])
            if getattr(tok, "bos_token_id", None) is not None:
                ids = [tok.bos_token_id] + ids
        if len(ids) > self.max_prompt_tokens:
            self.truncated_prompts += 1
            ids = ids[-self.max_prompt_tokens:]
        return ids

    def sampling_params(self, *, temperature: float, max_new_tokens: int, top_p: float,
                        seed: int | None) -> Any:
        """The ``vllm.SamplingParams`` of one prompt (temperature 0 = greedy)."""
        kwargs: dict[str, Any] = {"n": 1, "temperature": float(temperature), "max_tokens": int(max_new_tokens),
                                  "top_p": float(top_p) if temperature > 0 else 1.0, "seed": seed}
        if self.stop:
            kwargs.update(stop=list(self.stop), include_stop_str_in_output=True)
        return self._vllm.SamplingParams(**kwargs)

    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int,
                 top_p: float = 1.0, seed: int | None = None) -> list[Generation]:
        """Sample one response per prompt (see :class:`g2po_bench.runtime.policy_protocol.Policy`)."""
        if not prompts:
            return []
        ids, cut = [], []
        for p in prompts:
            before = self.truncated_prompts
            ids.append(self.encode_prompt(p))
            cut.append(self.truncated_prompts > before)
        params = [self.sampling_params(temperature=temperature, max_new_tokens=max_new_tokens, top_p=top_p,
                                       seed=None if seed is None else seed + i) for i in range(len(prompts))]
        inputs = [{"prompt_token_ids": x} for x in ids]
        outputs = self.llm.generate(inputs, sampling_params=params, use_tqdm=False)
        out: list[Generation] = []
        eos = getattr(self.tokenizer, "eos_token_id", None)
        for p_ids, o, sp, p_cut in zip(ids, outputs, params, cut):
            c = o.outputs[0]
            r_ids = list(c.token_ids)
            out.append(Generation(
                text=c.text, prompt_ids=p_ids, response_ids=r_ids,
                info={"finish_reason": c.finish_reason,
                      "finished": c.finish_reason == "stop" or (bool(r_ids) and r_ids[-1] == eos),
                      "seed": sp.seed, "prompt_truncated": p_cut}))
        return out
