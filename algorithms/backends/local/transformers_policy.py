"""Local transformers policy: batched generation and token log-probabilities.

Implements :class:`g2po_bench.runtime.policy_protocol.Policy` for a causal LM held in this process (CPU
or one GPU). Log-probabilities for training are computed from raw logits in a separate forward pass
(:func:`response_logprobs`), never from the processed scores of ``generate`` (transformers'
``output_scores`` are the scores after the logits processors; ``output_logits`` the raw ones), with
explicit ``position_ids`` for left-padded batches. Sampler and scorer share one sampling definition
(:class:`g2po_bench.algorithms.backends.local.sampling.SamplingParams`): ``generate`` gets an
explicit config (the model's ``generation_config.json`` switches nothing on) and the scorer applies
the same warpers, so the sampler's own log-probs (recorded in ``Generation.logprobs``) equal the
trainer's old log-probs.

Throughput: all prompts of a call are generated together, sorted by length and cut into
batches only where a token budget (rows x (longest prompt + max_new_tokens)) or a row limit
says so, instead of fixed chunks that each decode until their slowest row. With
``share_prefill`` (the credit instrument's continuations, which send each prompt up to K times)
identical prompts of a batch share one prefill and the CPU decodes into a preallocated cache
(:func:`shared_prefill`); training keeps the plain ``generate`` (its committed runs are
reproduced to the bit).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch.utils.checkpoint import checkpoint

from g2po_bench.algorithms.backends.local.precision import autocast
from g2po_bench.algorithms.backends.local.sampling import (
    SampledLogprobs,
    SamplingParams,
    SeededCategorical,
    accepts_keyword,
)
from g2po_bench.runtime.policy_protocol import Generation

__all__ = ["LocalPolicy", "plan_batches", "shared_prefill", "pack_sequences", "response_logprobs"]


def plan_batches(lengths: Sequence[int], max_new_tokens: int, *, max_rows: int = 0,
                 max_tokens: int = 0) -> list[list[int]]:
    """Length-bucketed generation batches: indices sorted by prompt length, cut greedily.

    Args:
        lengths: prompt lengths in tokens.
        max_new_tokens: response budget per row.
        max_rows: at most this many rows per batch (0 = no limit).
        max_tokens: at most ``rows * (longest prompt + max_new_tokens)`` tokens per batch, the
            size of the left-padded KV cache at the last step (0 = no limit); a single row
            above the budget forms its own batch.

    Returns:
        Batches of indices into ``lengths``; every index appears once.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        grown = max(longest, lengths[i])
        full = (max_rows and len(cur) + 1 > max_rows) or (
            max_tokens and (len(cur) + 1) * (grown + max_new_tokens) > max_tokens)
        if cur and full:
            batches.append(cur)
            cur, grown = [], lengths[i]
        cur.append(i)
        longest = grown
    if cur:
        batches.append(cur)
    return batches


class LocalPolicy:
    """A :class:`g2po_bench.runtime.policy_protocol.Policy` over a local ``transformers`` causal LM.

    Args:
        model: a causal LM (``AutoModelForCausalLM``); generation runs under ``no_grad``.
        tokenizer: its tokenizer (left padding is set here).
        max_prompt_tokens: prompts longer than this keep their last ``max_prompt_tokens``
            tokens (each Generation's ``info["prompt_truncated"]`` says whether its prompt
            was cut; ``self.truncated_prompts`` counts them over the policy's lifetime).
        batch_size: at most this many prompts per ``generate`` call (0 = no limit).
        use_chat_template: wrap prompts as one user message when the tokenizer has a chat
            template (instruct models); the tiny CPU model has none.
        max_batch_tokens: token budget of one ``generate`` call (see :func:`plan_batches`;
            0 = no limit: all prompts of a call in one batch).
        compute_dtype: run generation under autocast in this dtype (bfloat16 with float32
            master weights; None or float32 = no autocast).
        top_k: top-k of the sampling definition (0 = off; the trainer keeps it 0).
        share_prefill: prefill each distinct prompt of a batch once and, on the CPU, decode
            into a preallocated cache (:func:`shared_prefill`): the same samples up to float
            rounding, faster when prompts repeat (the credit instrument's continuations: 3-4x
            on its 512-episode waves).

    Attributes:
        stats: counters since :meth:`reset_stats`: ``prompt_tokens``, ``generated_tokens``
            (real tokens, padding excluded), ``generate_s`` (seconds inside ``generate``),
            ``batches``.
    """

    def __init__(self, model, tokenizer, *, max_prompt_tokens: int = 2048, batch_size: int = 0,
                 use_chat_template: bool = True, max_batch_tokens: int = 0,
                 compute_dtype: torch.dtype | None = None, top_k: int = 0, share_prefill: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.compute_dtype = compute_dtype
        self.top_k = top_k
        self.share_prefill = share_prefill
        self.use_chat_template = use_chat_template and bool(getattr(tokenizer, "chat_template", None))
        self.truncated_prompts = 0
        self.reset_stats()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def reset_stats(self) -> dict[str, float]:
        """Zero :attr:`stats`; returns the counters as they were."""
        old = dict(getattr(self, "stats", {}))
        self.stats = {"prompt_tokens": 0, "generated_tokens": 0, "generate_s": 0.0, "batches": 0}
        return old

    def sampling(self, temperature: float, top_p: float = 1.0) -> SamplingParams:
        """The sampling definition of a call at ``temperature`` / ``top_p``."""
        return SamplingParams(temperature=float(temperature), top_p=float(top_p), top_k=self.top_k)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of one prompt (chat template applied if enabled), left-truncated."""
        if self.use_chat_template:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            ids = list(ids)
        else:
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if self.tokenizer.bos_token_id is not None:
                ids = [self.tokenizer.bos_token_id] + ids
        if len(ids) > self.max_prompt_tokens:
            self.truncated_prompts += 1
            ids = ids[-self.max_prompt_tokens:]
        return ids

    @torch.no_grad()
    def generate(self, prompts: list[str], *, temperature: float, max_new_tokens: int,
                 top_p: float = 1.0, seed: int | None = None,
                 seeds: list[int] | None = None) -> list[Generation]:
        """Sample one response per prompt (see :class:`g2po_bench.runtime.policy_protocol.Policy`).

        Every :class:`Generation` carries ``logprobs`` and ``entropies``: the log-probability
        of each response token under the distribution it was sampled from, and that
        distribution's entropy (:class:`SampledLogprobs`; None for greedy decoding).

        Args:
            seeds: one seed per prompt (per-sample seeding, :class:`SeededCategorical`): each
                response depends on its prompt and its seed only, not on the batch; ``seed``
                is then ignored. None (the default): one ``torch.manual_seed(seed)`` per call.

        Raises:
            ValueError: ``seeds`` does not hold one seed per prompt.
        """
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts; give one seed per prompt")
        if seed is not None and seeds is None:
            torch.manual_seed(seed)
        params = self.sampling(temperature, top_p)
        was_training = self.model.training
        self.model.eval()
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        encoded, cut = [], []
        known: dict[str, tuple[list[int], bool]] = {}
        for p in prompts:
            if p not in known:
                before = self.truncated_prompts
                ids = self.encode_prompt(p)
                known[p] = (ids, self.truncated_prompts > before)
            elif known[p][1]:
                self.truncated_prompts += 1
            encoded.append(list(known[p][0]))
            cut.append(known[p][1])
        out: list[Generation | None] = [None] * len(prompts)
        t0 = time.perf_counter()
        with autocast(self.device, self.compute_dtype):
            for batch in plan_batches([len(e) for e in encoded], max_new_tokens, max_rows=self.batch_size,
                                      max_tokens=self.max_batch_tokens):
                chunk = [encoded[i] for i in batch]
                input_ids, attention_mask = _left_pad(chunk, pad, self.device)
                record = None if params.greedy else SampledLogprobs()
                seeded = None if seeds is None else SeededCategorical([seeds[i] for i in batch])
                kwargs = params.generate_kwargs(self.model, max_new_tokens=max_new_tokens, pad_token_id=pad,
                                                eos_token_id=eos, record=record, seeded=seeded)
                if self.share_prefill:
                    kwargs.update(shared_prefill(self.model, chunk, input_ids, attention_mask, max_new_tokens))
                seqs = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
                lps = record.finish(seqs).tolist() if record is not None else None
                ents = record.entropies(len(chunk)).tolist() if record is not None else None
                new = seqs[:, input_ids.shape[1]:].tolist()
                for j, (i, ids_p, ids_r) in enumerate(zip(batch, chunk, new)):
                    if eos in ids_r:
                        ids_r = ids_r[: ids_r.index(eos) + 1]
                    else:
                        while ids_r and ids_r[-1] == pad:
                            ids_r.pop()
                    text = self.tokenizer.decode(ids_r, skip_special_tokens=True)
                    out[i] = Generation(text=text, prompt_ids=ids_p, response_ids=ids_r,
                                        info={"finished": bool(ids_r) and ids_r[-1] == eos,
                                              "prompt_truncated": cut[i]},
                                        logprobs=None if lps is None else lps[j][: len(ids_r)],
                                        entropies=None if ents is None else ents[j][: len(ids_r)])
                    self.stats["prompt_tokens"] += len(ids_p)
                    self.stats["generated_tokens"] += len(ids_r)
                self.stats["batches"] += 1
        self.stats["generate_s"] += time.perf_counter() - t0
        if was_training:
            self.model.train()
        return out  # type: ignore[return-value]


def _cache_keyword(model) -> str:
    """The keyword under which the model's forward and ``generate`` take a KV cache:
    ``cache`` (transformers 5) or ``past_key_values`` (4.x)."""
    return "cache" if accepts_keyword(model.forward, "cache") else "past_key_values"


def _new_cache(model, length: int, device: torch.device):
    """An empty KV cache for ``length`` positions: a preallocated ``StaticCache`` on the CPU (a
    ``DynamicCache`` copies every row's whole cache at each decoding step, most of the decoding
    time of long prompts there), else, and on transformers without a layered ``StaticCache``, a
    ``DynamicCache`` (on a GPU ``generate`` would compile the model for a static one)."""
    from transformers import DynamicCache  # lazy: the module imports without transformers

    if device.type == "cpu":
        try:
            from transformers import StaticCache  # lazy: as above

            return StaticCache(config=model.config, max_cache_len=length)
        except (ImportError, TypeError):
            pass
    return DynamicCache()


def _select_rows(cache, rows: torch.Tensor) -> None:
    """Make row i of ``cache`` a copy of its row ``rows[i]`` (B rows from the distinct ones)."""
    if not hasattr(cache, "layers") or not all(hasattr(layer, "keys") for layer in cache.layers):
        cache.batch_select_indices(rows)  # a DynamicCache of transformers before layered caches
        return
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, rows)
        layer.values = layer.values.index_select(0, rows)
        if hasattr(layer, "batch_size"):
            layer.batch_size = int(rows.shape[0])


def shared_prefill(model, prompts: Sequence[Sequence[int]], input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   max_new_tokens: int) -> dict[str, object]:
    """The KV cache of a left-padded batch's prompts but their last column, computed once per
    distinct prompt and copied to the rows that repeat it (``LocalPolicy(share_prefill=True)``).

    ``generate`` given this cache runs only the last prompt column and the decoding steps. Every
    row's keys and values are those of its own prompt at the positions ``generate`` gives a
    left-padded batch (real tokens counted from 0, padding masked), so the sampled distribution
    is the one of a plain ``generate`` up to the float rounding of a forward pass on a batch of
    another shape (log-probabilities within 1e-5; the caveat of
    :class:`g2po_bench.algorithms.backends.local.sampling.SeededCategorical`). On the CPU the
    cache is preallocated for ``W + max_new_tokens`` positions (:func:`_new_cache`).

    Args:
        model: the causal LM (eval mode, under ``no_grad``).
        prompts: the B prompts' token ids (the rows of ``input_ids``, unpadded).
        input_ids, attention_mask: (B, W) int64, left-padded (:func:`_left_pad`).
        max_new_tokens: the response budget of the ``generate`` call.

    Returns:
        ``{cache keyword: cache}`` to add to the ``generate`` kwargs; empty (``generate``
        prefills as usual) when W < 2.
    """
    if input_ids.shape[1] < 2:
        return {}
    first: dict[tuple[int, ...], int] = {}
    source = [first.setdefault(tuple(p), i) for i, p in enumerate(prompts)]
    slot = {row: j for j, row in enumerate(first.values())}
    distinct = torch.tensor(list(first.values()), dtype=torch.long, device=input_ids.device)
    ids, mask = input_ids[distinct, :-1], attention_mask[distinct, :-1]
    # the positions generate gives a left-padded batch: real tokens counted from 0, padding at 1
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    key = _cache_keyword(model)
    cache = _new_cache(model, input_ids.shape[1] + int(max_new_tokens), input_ids.device)
    extra: dict[str, object] = {key: cache}
    if accepts_keyword(model.forward, "logits_to_keep"):
        extra["logits_to_keep"] = 1  # the prefill's logits are not used: skip the head on W - 1 columns
    model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True, **extra)
    if len(first) < len(source):
        _select_rows(cache, torch.tensor([slot[r] for r in source], dtype=torch.long, device=input_ids.device))
    return {key: cache}


def _left_pad(seqs: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def pack_sequences(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], pad: int,
                   device) -> dict[str, torch.Tensor]:
    """Pack prompt+response pairs into one batch for scoring.

    Layout per row: ``[pad..., prompt, response, pad...]``: prompts are right-aligned to a
    common boundary P = the longest prompt, so response token j of every row sits at column
    P + j. Returns a dict with ``input_ids`` (B, P+R) int64, ``attention_mask`` (B, P+R)
    int64, ``position_ids`` (B, P+R) int64 (0 at each row's first real token),
    ``response_mask`` (B, R) bool marking real response tokens (R = longest response, at
    least 1) and ``prompt_len`` (int P).
    """
    b = len(prompt_ids)
    p_len = max(len(p) for p in prompt_ids)
    r_len = max(max((len(r) for r in response_ids), default=0), 1)
    ids = torch.full((b, p_len + r_len), pad, dtype=torch.long)
    att = torch.zeros((b, p_len + r_len), dtype=torch.long)
    rmask = torch.zeros((b, r_len), dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[i, p_len - len(p):p_len] = torch.tensor(p, dtype=torch.long)
        att[i, p_len - len(p):p_len] = 1
        if r:
            ids[i, p_len:p_len + len(r)] = torch.tensor(r, dtype=torch.long)
            att[i, p_len:p_len + len(r)] = 1
            rmask[i, : len(r)] = True
    pos = (att.cumsum(dim=1) - 1).clamp(min=0)
    return {
        "input_ids": ids.to(device),
        "attention_mask": att.to(device),
        "position_ids": pos.to(device),
        "response_mask": rmask.to(device),
        "prompt_len": p_len,
    }


# causal LMs whose logits are exactly ``lm_head(base_model(...).last_hidden_state)`` (no
# soft-capping or logit scale): scored from hidden states in chunks; others use full logits
_PLAIN_LM_HEAD = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def response_logprobs(model, packed: dict[str, torch.Tensor], *, temperature: float = 1.0,
                      with_entropy: bool = False, sampling: SamplingParams | None = None,
                      chunk_tokens: int = 1024) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities of the response tokens under ``model``.

    Only response positions are scored: the final hidden states at the positions that predict
    response tokens (padding excluded) go through the LM head ``chunk_tokens`` rows at a time,
    and each chunk's logits, log-softmax and entropy are recomputed in the backward pass
    (activation checkpointing) instead of being kept, so the (tokens, vocabulary) float32
    tensors exist for one chunk at a time (a 150k vocabulary: about 0.6 GB per 1024 tokens,
    instead of several GB per micro-batch). Models outside ``_PLAIN_LM_HEAD`` compute their
    logits with their own forward (``logits_to_keep``), then the log-softmax in chunks.

    Args:
        model: causal LM (run it under :func:`g2po_bench.algorithms.backends.local.precision.autocast`
            for mixed precision); may sit on another device than ``packed`` (the inputs are
            moved to it; the outputs stay on the model's device).
        packed: output of :func:`pack_sequences`.
        temperature: the sampling temperature of the rollout (used when ``sampling`` is None).
        with_entropy: also return the per-token entropy of the distribution.
        sampling: the sampling definition the tokens were drawn from (its
            :meth:`SamplingParams.rescore` is applied to the logits).
        chunk_tokens: response tokens per LM-head chunk (>= 1).

    Returns:
        (logprobs (B, R) float32, entropy (B, R) float32 or None); positions outside
        ``response_mask`` hold 0.

    Raises:
        ValueError: ``chunk_tokens`` < 1.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    params = sampling if sampling is not None else SamplingParams(temperature=float(temperature))
    device = next(model.parameters()).device
    ids = packed["input_ids"].to(device)
    att = packed["attention_mask"].to(device)
    pos = packed["position_ids"].to(device)
    mask = packed["response_mask"].to(device)
    p = packed["prompt_len"]
    r = mask.shape[1]
    target = ids[:, p:p + r][mask]  # (N,)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    base = getattr(model, "base_model", model)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if model_type in _PLAIN_LM_HEAD and base is not model and head is not None:
        # logits at position k predict token k+1: response token j (column p+j) is predicted at p+j-1
        hidden = base(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).last_hidden_state
        rows = hidden[:, p - 1:p - 1 + r][mask]  # (N, H)
        to_logits = head
    else:
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False, logits_to_keep=r + 1)
        rows = out.logits[:, :r][mask]  # (N, V)
        to_logits = None

    def score(x: torch.Tensor, t: torch.Tensor):
        logits = to_logits(x) if to_logits is not None else x
        logp_all = params.rescore(logits)
        lp = logp_all.gather(-1, t.unsqueeze(-1)).squeeze(-1)
        if not with_entropy:
            return lp, None
        return lp, -(logp_all.exp() * logp_all).nan_to_num(0.0).sum(-1)

    lps, ents = [], []
    use_ckpt = torch.is_grad_enabled() and rows.requires_grad
    for s in range(0, rows.shape[0], chunk_tokens):
        x, t = rows[s:s + chunk_tokens], target[s:s + chunk_tokens]
        lp, ent = checkpoint(score, x, t, use_reentrant=False) if use_ckpt else score(x, t)
        lps.append(lp)
        ents.append(ent)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=device)
    flat_lp = torch.cat(lps) if lps else zeros[mask]
    logp = zeros.masked_scatter(mask, flat_lp)
    ent = None
    if with_entropy:
        ent = zeros.masked_scatter(mask, torch.cat(ents) if ents else zeros[mask])
    return logp, ent
