"""Names OpenRLHF's ring-attention helpers import; any call raises (packing is never used on CPU)."""


def _unavailable(*_args, **_kwargs):
    raise RuntimeError("flash_attn is a test stand-in here; packing_samples needs the real flash-attn")


index_first_axis = pad_input = rearrange = unpad_input = _unavailable
