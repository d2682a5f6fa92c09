"""Stand-in for ``vllm.inputs``."""


def TokensPrompt(**kwargs):  # noqa: N802  (vLLM's TypedDict constructor)
    return dict(kwargs)
