"""Test-only stand-in for vLLM (see tests/stubs/README.md).

Provides the names OpenRLHF 0.11.2 imports at module level (``SamplingParams``,
``vllm.inputs.TokensPrompt``, ``vllm.utils.random_uuid``) plus ``__version__``. Engines cannot be
built: ``AsyncEngineArgs`` / ``AsyncLLMEngine`` raise.
"""

__version__ = "0.29.0+stub"
STUB = True


class SamplingParams:
    """Keeps its keyword arguments as attributes (the fields the suite's policy reads)."""

    def __init__(self, **kwargs):
        defaults = {"n": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 16,
                    "seed": None, "logprobs": None, "skip_special_tokens": True, "min_tokens": 0}
        defaults.update(kwargs)
        self.__dict__.update(defaults)

    def __repr__(self):
        return f"SamplingParams({self.__dict__})"


class _Unavailable:
    def __init__(self, *_args, **_kwargs):
        raise RuntimeError("vllm is a test stand-in here; building an engine needs the real vLLM on a GPU")

    @classmethod
    def from_engine_args(cls, *_args, **_kwargs):
        raise RuntimeError("vllm is a test stand-in here; building an engine needs the real vLLM on a GPU")


AsyncEngineArgs = AsyncLLMEngine = LLM = _Unavailable
