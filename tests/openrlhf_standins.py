"""Test support: CPU stand-ins for OpenRLHF's GPU workers, with the same remote interfaces.

:class:`openrlhf_cpu_workers.CPUWorkers` (a :class:`g2po_bench.algorithms.backends.openrlhf.trainer.Workers`,
injected into ``train(cfg, workers=CPUWorkers())``) runs the backend's whole orchestration (Ray
cluster, OpenRLHF ``RayActorGroup`` dispatch, ``RemoteExperienceMaker.make_experience``, the
suite's rollout engine and advantages, weight sync after each update, checkpoints) with these
classes in place of OpenRLHF's DeepSpeed and vLLM actors:

- :class:`openrlhf_cpu_engine.HFRolloutEngine`: OpenRLHF's ``RolloutRayActor.generate(prompt_token_ids,
  sampling_params)`` on a transformers model (returns a vLLM-``RequestOutput``-shaped object),
  plus ``load_weights`` for the weight sync and no-op ``sleep``/``wake_up`` (no OpenRLHF import).
- :class:`CPUModelActor`: a subclass of OpenRLHF's ``BaseModelActor`` with the methods the
  driver calls on ``PolicyModelActor`` / ``ReferenceModelActor`` / ``CriticModelActor``
  (``init_model_from_pretrained``, ``forward``, ``append``, ``fit``, ``broadcast_to_vllm``,
  ``save_checkpoint``, ...). Log-probabilities come from OpenRLHF's own ``Actor`` module, and the
  update uses OpenRLHF's ``PolicyLoss``, ``ValueLoss``, ``compute_approx_kl`` and
  ``aggregate_loss`` with torch's AdamW instead of a DeepSpeed engine.

It exists for the test suite; it is not a way to train on a CPU (``backend=local`` is). The
classes are importable by module path from ``tests/`` (``CPUWorkers.worker_env`` puts that folder
on the Ray workers' PYTHONPATH); this module imports no more than the actors need.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from openrlhf.trainer.ray.launcher import BaseModelActor
from openrlhf_cpu_engine import HFRolloutEngine, cpu_sampling_params

from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer

__all__ = ["HFRolloutEngine", "CPUModelActor", "CPUReferenceActor", "CPUCriticActor", "cpu_sampling_params"]


def _load(path: str | os.PathLike):
    return load_model_and_tokenizer(path, dtype="float32", device="cpu")



class _ValueModel(torch.nn.Module):
    """Backbone + scalar head (zero-initialised), values at every position like OpenRLHF's critic."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(backbone.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, sequences, action_mask, attention_mask):
        pos = attention_mask.long().cumsum(-1) - 1
        pos.masked_fill_(attention_mask == 0, 1)
        out = self.backbone(input_ids=sequences, attention_mask=attention_mask, position_ids=pos,
                            output_hidden_states=True, use_cache=False)
        values = self.head(out.hidden_states[-1].float()).squeeze(-1)[:, :-1]
        return values[:, -action_mask.shape[1]:] * action_mask.float()


class CPUModelActor(BaseModelActor):
    """CPU stand-in for OpenRLHF's policy, reference and critic model actors.

    Wrap with ``ray.remote`` and use through OpenRLHF's ``RayActorGroup`` with
    ``num_gpus_per_actor=0`` (one rank per group: no data parallelism on a CPU).
    """

    role = "actor"

    def init_model_from_pretrained(self, strategy, pretrain: str, max_steps: int | None = None,
                                   vllm_engines=None):
        from openrlhf.models import Actor

        torch.set_num_threads(1)
        self.strategy = strategy
        args = strategy.args
        self.args = args
        self.engines = vllm_engines
        self.items: list = []
        self.ckpt_dir = Path(args.ckpt.path) / ("_critic" if self.role == "critic" else "_actor")
        path, self.checkpoint_states = pretrain, {}
        if self.role != "reference" and args.ckpt.load_enable and (self.ckpt_dir / "latest.json").exists():
            meta = json.loads((self.ckpt_dir / "latest.json").read_text())
            path, self.checkpoint_states = str(self.ckpt_dir / meta["tag"]), meta.get("client_states", {})
        model, self.tokenizer = _load(path)
        self.tiny_marker = Path(pretrain) / "g2po_tiny.json"
        if self.role == "critic":
            self.model = _ValueModel(model)
            head = Path(path) / "value_head.pt"
            if head.exists():
                self.model.head.load_state_dict(torch.load(head))
            lr, betas, wd = args.critic.adam.lr, args.critic.adam.betas, args.critic.adam.weight_decay
        else:
            self.model = Actor(model, temperature=args.rollout.temperature)
            self.model.packing_samples = False
            lr, betas, wd = args.actor.adam.lr, args.actor.adam.betas, args.actor.adam.weight_decay
        self.model.eval()
        self.optimizer = None
        if self.role != "reference":
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=tuple(betas), weight_decay=wd)
            optim = Path(path) / "optim.pt"
            if optim.exists():
                self.optimizer.load_state_dict(torch.load(optim))

    # ------------------------------------------------------------------ experience side
    @torch.no_grad()
    def forward(self, sequences, action_mask=None, attention_mask=None, packed_seq_lens=None,
                mm_train_inputs_list=None, **_):
        """Action log-probs (actor, reference) or values (critic), (B, A), 0 off the mask."""
        self.model.eval()
        return self.model(sequences, action_mask, attention_mask)

    def empty_cache(self) -> None:
        return None

    def append(self, experience) -> None:
        from openrlhf.trainer.ppo_utils.experience import (
            remove_padding_in_sequences,
            split_experience_batch,
        )

        self.items.extend(remove_padding_in_sequences(split_experience_batch(experience)))

    def reload_states(self) -> None:
        return None

    def offload_states(self) -> None:
        return None

    def get_checkpoint_states(self) -> dict:
        return self.checkpoint_states

    # ------------------------------------------------------------------ update
    def fit(self, kl_ctl: float = 0.0) -> dict[str, float]:
        """One PPO pass over the appended samples (OpenRLHF's losses, torch AdamW)."""
        from openrlhf.models import PolicyLoss, ValueLoss, aggregate_loss
        from openrlhf.models.utils import compute_approx_kl
        from openrlhf.trainer.ppo_utils.experience import make_experience_batch

        args = self.args
        items, self.items = self.items, []
        if self.role == "critic":
            loss_fn = ValueLoss(args.critic.value_clip)
        else:
            low, high = args.actor.eps_clip_low_high
            loss_fn = PolicyLoss(clip_eps_low=low, clip_eps_high=high, dual_clip=args.actor.dual_clip,
                                 token_level_loss=args.actor.loss_agg_mode == "token-mean", policy_loss_type="ppo")
        tbs, micro = args.train.batch_size, args.train.micro_batch_size
        gen = torch.Generator().manual_seed(int(args.train.seed) + len(items))
        sums: dict[str, float] = {}
        windows = 0
        self.model.train()
        for _ in range(args.train.max_epochs):
            order = torch.randperm(len(items), generator=gen).tolist()
            for s in range(0, len(items), tbs):
                window = [items[i] for i in order[s:s + tbs]]
                n_tok = float(sum(float(it.action_mask.sum()) for it in window))
                if n_tok == 0:
                    continue
                # one token-mean over the whole optimizer step, as OpenRLHF's iter_grad_accum_global_norm
                info = {"dp_size": 1, "batch_num_tokens": torch.tensor(n_tok),
                        "global_batch_size": torch.tensor(float(len(window)))}
                stats: dict[str, float] = {}
                self.optimizer.zero_grad(set_to_none=True)
                for m in range(0, len(window), micro):
                    exp = make_experience_batch(window[m:m + micro])
                    mask = exp.action_mask
                    share = float(mask.sum()) / n_tok
                    if self.role == "critic":
                        values = self.model(exp.sequences, mask, exp.attention_mask)
                        loss = loss_fn(values, exp.values, exp.returns, action_mask=mask, **info)
                        terms = {"critic_loss": float(loss)}
                    else:
                        logp, out = self.model(exp.sequences, mask, attention_mask=exp.attention_mask,
                                               return_output=True, return_entropy=args.actor.entropy_coef is not None)
                        pl, clip, _, _, _ = loss_fn(logp, exp.action_log_probs, exp.advantages, action_mask=mask, **info)
                        loss = pl
                        terms = {"policy_loss": float(pl), "ppo_clip_ratio": float(clip) * share}
                        if args.algo.kl.use_loss and args.algo.kl.init_coef > 0:
                            kl = compute_approx_kl(logp, exp.base_action_log_probs, kl_estimator=args.algo.kl.estimator)
                            kl_loss = aggregate_loss(kl, mask, **info)
                            loss = loss + kl_ctl * kl_loss
                            terms["kl"] = float(kl_loss)
                        if args.actor.entropy_coef is not None:
                            ent = aggregate_loss(out.entropy[:, -mask.shape[1]:], mask, **info)
                            loss = loss - args.actor.entropy_coef * ent
                            terms["entropy_loss"] = float(ent)
                    loss.backward()
                    for k, v in terms.items():
                        stats[k] = stats.get(k, 0.0) + v
                max_norm = args.critic.max_norm if self.role == "critic" else args.actor.max_norm
                stats["critic_grad_norm" if self.role == "critic" else "actor_grad_norm"] = float(
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
                self.optimizer.step()
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                windows += 1
        self.model.eval()
        return {k: v / max(windows, 1) for k, v in sums.items()}

    def broadcast_to_vllm(self) -> None:
        """Weight sync: every engine loads the actor's current parameters."""
        import ray

        if not self.engines:
            return
        state = {k: v.detach().clone() for k, v in self.model.model.state_dict().items()}
        ray.get([e.load_weights.remote(state) for e in self.engines])

    def save_checkpoint(self, tag, client_states=None, metric_value=None, metric_key=None) -> None:
        """Resume state under ``<ckpt.path>/_actor/<tag>`` (model + optimizer), and an HF export
        ``<ckpt.path>/<tag>_hf`` when ``--ckpt.save_hf`` (the layout of OpenRLHF's actors)."""
        if self.role == "reference":
            return
        args = self.args
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        target = self.ckpt_dir / tag
        self._save_to(target)
        torch.save(self.optimizer.state_dict(), target / "optim.pt")
        (self.ckpt_dir / "latest.json").write_text(json.dumps({"tag": tag, "client_states": client_states or {}}))
        for old in self.ckpt_dir.iterdir():
            if old.is_dir() and old.name != tag:
                shutil.rmtree(old)
        if args.ckpt.save_hf and self.role == "actor":
            self._save_to(Path(args.ckpt.path) / f"{tag}_hf")

    def _save_to(self, folder: Path) -> None:
        if folder.exists():
            shutil.rmtree(folder)
        backbone = self.model.backbone if self.role == "critic" else self.model.model
        backbone.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        if self.tiny_marker.exists():
            shutil.copy(self.tiny_marker, folder / "g2po_tiny.json")
        if self.role == "critic":
            torch.save(self.model.head.state_dict(), folder / "value_head.pt")

    def save_model(self) -> None:
        return None


class CPUReferenceActor(CPUModelActor):
    """CPU stand-in for OpenRLHF's ReferenceModelActor (same methods; tests only)."""
    role = "reference"


class CPUCriticActor(CPUModelActor):
    """CPU stand-in for OpenRLHF's CriticModelActor (same methods; tests only)."""
    role = "critic"
