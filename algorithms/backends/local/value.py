"""The PPO critic of the local backend: a value model V_phi(prompt of step t).

PPO with a critic (arXiv 1707.06347; the verl-agent PPO baseline; docs/estimators/ppo.md): a
value model scores the step prompt (the state s_t as the agent sees it). As in the reference
(verl's critic: the policy's checkpoint loaded as ``AutoModelForTokenClassification`` with one
output), it is the policy's transformer trunk
(``model.base_model``: embeddings, layers, final norm; no LM head, so no vocabulary-sized
logits are ever computed) plus a scalar head on the last prompt token's final hidden state,
trained with the reference critic's clipped value loss and update (:func:`g2po_bench.algorithms.losses.value_loss`,
:meth:`ValueModel.fit`) towards the estimator's returns, at lr 1e-5 by default (the reference
critic learning rate). The trunk
keeps float32 master weights and runs under autocast in the policy's compute dtype
(:mod:`g2po_bench.algorithms.backends.local.precision`); gradient checkpointing is optional.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from g2po_bench.algorithms import losses
from g2po_bench.algorithms.backends.batching import split_mini_batches
from g2po_bench.algorithms.backends.local.memory import enable_checkpointing
from g2po_bench.algorithms.backends.local.precision import autocast, check_master_weights

__all__ = ["ValueModel"]


class ValueModel(torch.nn.Module):
    """A transformer trunk plus a linear value head.

    Args:
        trunk: a transformer returning ``last_hidden_state`` (e.g. ``LlamaModel``; the
            ``base_model`` of a causal LM), with float32 parameters.
        lr: AdamW learning rate of the critic (``train.value_lr``).
        weight_decay: AdamW weight decay (reference ``critic.optim.weight_decay`` 0.01).
        compute_dtype: autocast dtype of the forward pass (None or float32 = none).
        gradient_checkpointing: recompute the trunk's layer activations in the backward pass.

    Raises:
        TypeError: a trunk parameter is not float32 (see
            :func:`g2po_bench.algorithms.backends.local.precision.check_master_weights`).
    """

    def __init__(self, trunk, lr: float = 1e-5, *, weight_decay: float = 0.01,
                 compute_dtype: torch.dtype | None = None, gradient_checkpointing: bool = False):
        super().__init__()
        self.backbone = trunk
        check_master_weights(trunk, "critic")
        self.compute_dtype = compute_dtype
        hidden = trunk.config.hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.head.to(next(trunk.parameters()).device)
        if gradient_checkpointing:
            enable_checkpointing(trunk)
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    @classmethod
    def from_policy(cls, policy_model, lr: float = 1e-5, **kwargs) -> ValueModel:
        """A critic whose trunk is a copy of the policy's trunk (``policy_model.base_model``;
        the LM head is not copied). ``kwargs`` go to :class:`ValueModel`."""
        trunk = getattr(policy_model, "base_model", policy_model)
        return cls(copy.deepcopy(trunk), lr=lr, **kwargs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values (B,) float32 of left-padded prompts ``input_ids`` (B, L) int64."""
        pos = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        with autocast(input_ids.device, self.compute_dtype):
            out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                                use_cache=False)
        last = out.last_hidden_state[:, -1, :].float()
        return self.head(last).squeeze(-1)

    def _batch(self, prompts: Sequence[Sequence[int]], pad: int):
        device = next(self.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        att = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            att[i, width - len(p):] = 1
        return ids.to(device), att.to(device)

    @torch.no_grad()
    def predict(self, prompts: Sequence[Sequence[int]], pad: int, batch_size: int = 16) -> np.ndarray:
        """V(s_t) for every step prompt: float64 array of shape (len(prompts),)."""
        self.eval()
        out = np.zeros(len(prompts), dtype=np.float64)
        for s in range(0, len(prompts), batch_size):
            ids, att = self._batch(prompts[s:s + batch_size], pad)
            out[s:s + batch_size] = self(ids, att).double().cpu().numpy()
        return out

    def fit(self, prompts: Sequence[Sequence[int]], returns: np.ndarray, old_values: np.ndarray, pad: int,
            *, clip: float | None, mini_batch_size: int, micro_batch_size: int,
            response_lengths: Sequence[int] | None = None, loss_agg_mode: str = "token-mean",
            mini_batch_split: str = "fixed", epochs: int = 1, seed: int = 0) -> dict[str, float]:
        """Regress V on ``returns`` with the reference critic's update (verl ``dp_critic.update_critic``
        as the G2PO repository ships it): per epoch, the shuffled step samples are cut into
        mini-batches (``mini_batch_split``, :mod:`g2po_bench.algorithms.backends.batching`); each
        mini-batch is one AdamW step, its gradient accumulated over micro-batches of
        ``micro_batch_size`` as the mean of their losses (:func:`g2po_bench.algorithms.losses.value_loss`,
        aggregated with ``loss_agg_mode``), the gradient norm clipped to 1.0 (reference
        ``critic.grad_clip``).

        The reference critic puts a value on every response token; this turn-level critic has one
        value per step, which stands for each of the step's response tokens: with
        ``response_lengths`` the loss and its aggregation see a (micro-batch, longest response)
        matrix with the step's value, old value and return on its response tokens (token-mean
        weighs a step by its response length, as the reference does); without, one entry per step.

        Args:
            prompts: step prompts (token ids); returns, old_values: (B,) float targets and values at
                rollout time; pad: pad token id; clip: value clip range (None: unclipped).
            mini_batch_size, micro_batch_size: step samples per optimizer step / per forward pass.
            response_lengths: (B,) response tokens per step (>= 1), or None.

        Returns:
            ``loss/value`` (the aggregated loss, mean over micro-batches), ``loss/value_clip_frac``
            (the clip fraction, mean over micro-batches), ``loss/value_grad_norm`` (mean over steps).

        Raises:
            ValueError: lengths of the inputs differ, or as :func:`g2po_bench.algorithms.losses.value_loss`.
        """
        n = len(prompts)
        if len(returns) != n or len(old_values) != n or (response_lengths is not None and len(response_lengths) != n):
            raise ValueError(f"{n} prompts but {len(returns)} returns, {len(old_values)} old values"
                             + ("" if response_lengths is None else f", {len(response_lengths)} response lengths"))
        self.train()
        rng = np.random.default_rng(seed)
        losses_, fracs, norms = [], [], []
        for _ in range(epochs):
            for mini in split_mini_batches(rng.permutation(n), mini_batch_size, mini_batch_split):
                micros = [mini[m:m + micro_batch_size] for m in range(0, len(mini), micro_batch_size)]
                self.optimizer.zero_grad(set_to_none=True)
                for idx in micros:
                    ids, att = self._batch([prompts[i] for i in idx], pad)
                    v = self(ids, att)
                    ret = torch.as_tensor(returns[idx], dtype=torch.float32, device=v.device)
                    old = torch.as_tensor(old_values[idx], dtype=torch.float32, device=v.device)
                    mask = None
                    if response_lengths is not None:
                        lengths = torch.as_tensor([response_lengths[i] for i in idx], device=v.device)
                        mask = torch.arange(int(lengths.max()), device=v.device)[None, :] < lengths[:, None]
                        v, ret, old = (x[:, None].expand(mask.shape) for x in (v, ret, old))
                    loss, stats = losses.value_loss(v, old, ret, mask, clip=clip, loss_agg_mode=loss_agg_mode,
                                                    return_metrics=True)
                    (loss / len(micros)).backward()
                    losses_.append(stats["vf_loss"])
                    fracs.append(stats["vf_clip_frac"])
                norms.append(float(torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)))
                self.optimizer.step()
        self.eval()
        return {"loss/value": float(np.mean(losses_)) if losses_ else 0.0,
                "loss/value_clip_frac": float(np.mean(fracs)) if fracs else 0.0,
                "loss/value_grad_norm": float(np.mean(norms)) if norms else 0.0}
