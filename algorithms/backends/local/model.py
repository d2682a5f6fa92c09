"""Loading a policy model, and building a tiny one for CPU runs and tests.

Tests and the CPU default need no model hub: the CPU default builds a Llama-style causal LM with
tiny dimensions and a byte-level BPE tokenizer trained with ``tokenizers`` on the environment's own
text (prompts and expert responses), wrapped in ``PreTrainedTokenizerFast`` and saved with
``save_pretrained`` so it reloads like any local model folder. Any other local folder (e.g. a
user's Qwen2.5-1.5B-Instruct) loads through ``AutoModelForCausalLM``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

__all__ = ["build_tiny_model", "train_tokenizer", "load_model_and_tokenizer", "SPECIAL_TOKENS", "resolve_device"]

SPECIAL_TOKENS = {"pad_token": "<|pad|>", "bos_token": "<|bos|>", "eos_token": "<|eos|>"}


def _quiet_transformers() -> None:
    """Silence transformers' per-shard progress bars and info logs (they flood run logs)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> cuda when available else cpu; ``"cuda"`` without a GPU raises RuntimeError."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device=cuda but no CUDA device is visible; use model.device=cpu")
    return torch.device(device)


def train_tokenizer(corpus: Iterable[str], vocab_size: int, words: Iterable[str] = ()):
    """A byte-level BPE tokenizer trained on ``corpus`` with ``tokenizers``, wrapped in
    ``PreTrainedTokenizerFast`` with :data:`SPECIAL_TOKENS`, left padding.

    Args:
        corpus: training text.
        vocab_size: vocabulary size of the BPE, including the special tokens and the 256 byte symbols.
        words: strings that become one token each wherever they occur as whole words (not
            inside a longer word; the longest match wins), added after the BPE (``tokenizers``
            added tokens, matched before pre-tokenization; duplicates once): the strings a
            benchmark's policy copies (:meth:`g2po_bench.benchmarks.base.Benchmark.tokenizer_words`).

    Returns:
        The tokenizer (``len(tokenizer)`` <= ``vocab_size`` + the number of distinct ``words``;
        every byte sequence encodes).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    extra = list(dict.fromkeys(w for w in words if w))
    if extra:
        tok.add_tokens([AddedToken(w, normalized=False, single_word=True) for w in extra])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    hf_tok.padding_side = "left"
    return hf_tok


def build_tiny_model(
    out_dir: str | os.PathLike,
    corpus: Iterable[str],
    *,
    vocab_size: int = 1024,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 256,
    max_position_embeddings: int = 1024,
    seed: int = 0,
    words: Iterable[str] = (),
) -> Path:
    """Train a byte-level BPE tokenizer on ``corpus`` and save a randomly initialised tiny
    Llama model with it to ``out_dir`` (written to a temporary folder, then renamed).

    Args:
        out_dir: target folder (replaced if it exists).
        corpus: training text for the tokenizer (prompts and responses of the environment).
        vocab_size: BPE vocabulary size including the special tokens.
        hidden_size, num_layers, num_heads, intermediate_size, max_position_embeddings:
            Llama dimensions.
        seed: torch seed of the weight initialisation.
        words: strings the tokenizer keeps as one token each (:func:`train_tokenizer`).

    Returns:
        The model folder (loadable with :func:`load_model_and_tokenizer`).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    _quiet_transformers()

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    hf_tok = train_tokenizer(corpus, vocab_size, words)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=hf_tok.pad_token_id,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    model.save_pretrained(staging)
    hf_tok.save_pretrained(staging)
    (staging / "g2po_tiny.json").write_text(json.dumps({"built_by": "g2po build_tiny_model", "seed": seed}))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(staging, out_dir)
    return out_dir


def load_model_and_tokenizer(path: str | os.PathLike, *, dtype: str = "float32", device: str = "auto"):
    """Load a causal LM and its tokenizer from a local folder (no hub access).

    The tokenizer is loaded with ``PreTrainedTokenizerFast`` when the folder holds a
    ``tokenizer.json`` built by this project (``AutoTokenizer`` can swap the pre-tokenizer of
    some configs, e.g. Qwen2's, for another than the one saved), else with ``AutoTokenizer``.
    Padding is on the left.

    Returns:
        (model, tokenizer); the model is in eval mode on the resolved device.

    Raises:
        FileNotFoundError: the folder does not exist or holds no model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    _quiet_transformers()
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"no model in {str(path)!r} (config.json missing); set model.path to a local model "
            "folder, or leave it empty to build the tiny CPU model"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if (path / "g2po_tiny.json").exists():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    model.to(resolve_device(device))
    model.eval()
    return model, tokenizer
