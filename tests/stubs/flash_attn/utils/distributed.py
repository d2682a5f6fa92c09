"""Stand-in for ``flash_attn.utils.distributed``."""

from flash_attn.bert_padding import _unavailable as all_gather  # noqa: F401
