"""The run config as OpenRLHF 0.11.2 command-line arguments, checked by OpenRLHF's own parser.

:func:`build_argv` maps the suite's config onto ``openrlhf.cli.train_ppo_ray`` flags so that
OpenRLHF's actor, reference and critic workers optimise exactly the local backend's objective
(:mod:`g2po_bench.algorithms.backends.local.trainer`; docs/design-notes.md "Training-loop facts"):

===============================  =================================================================
suite config                     OpenRLHF flags
===============================  =================================================================
train.lr, weight_decay           ``--actor.adam.lr``, ``--actor.adam.weight_decay``, betas
                                 (0.9, 0.999) as torch's AdamW, ``--actor.lr_scheduler constant``,
                                 no warm-up
train.clip_ratio                 ``--actor.eps_clip`` (symmetric), ``--actor.policy_loss_type ppo``
train.clip_ratio_c               ``--actor.dual_clip`` (dual-clip PPO; omitted when null)
train.kl_coef, kl_estimator      ``--algo.kl.use_loss --algo.kl.init_coef --algo.kl.estimator``
                                 (KL to the reference as a loss term, k3 = low-variance)
train.kl_clamp                   none: OpenRLHF clamps every estimate to [-10, 10]; only 10.0
                                 is accepted
train.entropy_coef               ``--actor.entropy_coef``
train.loss_agg_mode              ``--actor.loss_agg_mode``: ``token-mean`` or
                                 ``seq-mean-token-mean`` (OpenRLHF normalises by the whole
                                 optimizer step, not per micro-batch); the other modes are refused
train.max_grad_norm              ``--actor.max_norm`` (and the critic's)
train.mini_batch_size            ``--train.batch_size`` (samples per optimizer step, rounded up to
                                 a multiple of micro batch x data-parallel ranks)
train.micro_batch_size           ``--train.micro_batch_size``, ``--rollout.micro_batch_size``
train.ppo_epochs                 ``--train.max_epochs``
train.temperature, top_p         ``--rollout.temperature`` (the actor divides logits by it, as the
                                 local backend does), ``--rollout.top_p``
train.max_prompt/response_tokens ``--data.max_len`` (their sum; vLLM's max_model_len),
                                 ``--rollout.max_new_tokens``
train.value_lr, value_clip       ``--critic.adam.lr``, ``--critic.value_clip`` (``ppo`` only)
train.value_weight_decay         ``--critic.adam.weight_decay``
train.group_size, groups         ``--rollout.n_samples_per_prompt``, ``--rollout.batch_size``
seed                             ``--train.seed``
===============================  =================================================================

``--algo.advantage.estimator`` is ``gae`` for the critic estimator (so OpenRLHF builds a
critic) and ``reinforce`` otherwise; either way OpenRLHF's estimators are never called (the
backend's experience maker overrides ``compute_advantages_and_returns``).

:func:`parse_openrlhf_args` runs OpenRLHF's own parser *and* the validation and defaulting
code that follows it in ``openrlhf/cli/train_ppo_ray.py`` (the ``__main__`` block), stopping
just before ``train(args)``; the result is the hierarchical namespace OpenRLHF's workers read.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import sys
from pathlib import Path
from typing import Any

from g2po_bench.algorithms.backends.common import needs_critic
from g2po_bench.algorithms.backends.openrlhf.settings import OpenRLHFSettings

__all__ = ["build_argv", "parse_openrlhf_args", "OpenRLHFArgsError", "train_batch_size"]

OPENRLHF_VERSION = "0.11.2"
#: ``--actor.loss_agg_mode`` choices of OpenRLHF 0.11.2
OPENRLHF_AGG_MODES = ("token-mean", "seq-mean-token-mean")
#: the clamp OpenRLHF 0.11.2 applies to every KL estimate (``compute_approx_kl``)
OPENRLHF_KL_CLAMP = 10.0


class OpenRLHFArgsError(ValueError):
    """OpenRLHF's parser or its validation rejected the arguments."""


def train_batch_size(cfg, settings: OpenRLHFSettings) -> int:
    """Samples per optimizer step: ``train.mini_batch_size`` rounded up to a multiple of
    ``micro_batch_size x`` the actor's data-parallel ranks (DeepSpeed needs whole micro-batches)."""
    unit = cfg.train.micro_batch_size * max(1, settings.actor_gpus)
    return max(unit, math.ceil(cfg.train.mini_batch_size / unit) * unit)


def _flag(argv: list[str], name: str, value: Any = True) -> None:
    if value is True:
        argv.append(f"--{name}")
    elif value is False or value is None:
        return
    elif isinstance(value, (list, tuple)):
        argv.append(f"--{name}")
        argv.extend(str(v) for v in value)
    else:
        argv.extend([f"--{name}", str(value)])


def build_argv(cfg, settings: OpenRLHFSettings, *, model_path: str, ckpt_path: str,
               max_steps: int | None = None, resume: bool = False) -> list[str]:
    """OpenRLHF ``train_ppo_ray`` arguments for ``cfg`` on the resolved ``settings``.

    Args:
        cfg: the RunConfig.
        settings: resolved :class:`OpenRLHFSettings` (:meth:`OpenRLHFSettings.resolved`).
        model_path: local folder of the starting policy (also the reference and the critic's
            initialisation).
        ckpt_path: folder of OpenRLHF's DeepSpeed checkpoints (``_actor``, ``_critic``).
        max_steps: optimizer steps of the run (scheduler length; the schedule is constant).
        resume: load the DeepSpeed checkpoint in ``ckpt_path``.
    """
    t = cfg.train
    critic = needs_critic(cfg)
    _refuse_unsupported(t)
    nodes, gpn = settings.group_shape()
    tbs = train_batch_size(cfg, settings)
    if max_steps is None:
        est_rows = t.groups_per_batch * t.group_size * cfg.env.max_steps
        max_steps = max(1, t.iterations * t.ppo_epochs * math.ceil(est_rows / tbs))
    argv: list[str] = []
    f = lambda name, value=True: _flag(argv, name, value)  # noqa: E731
    _layout_flags(f, settings, model_path, critic)
    _objective_flags(f, cfg, tbs, critic)
    # checkpoints (the backend saves them itself, every train.checkpoint_every iterations)
    f("ckpt.path", ckpt_path)
    f("ckpt.output_dir", str(Path(ckpt_path) / "final"))
    f("ckpt.save_steps", -1)
    f("ckpt.save_hf")
    f("ckpt.max_num", 2)  # OpenRLHF deletes the oldest before saving: keep the previous one meanwhile
    f("ckpt.load_enable", resume)
    f("eval.steps", -1)
    f("logger.logging_steps", 1)
    return argv


def _refuse_unsupported(t) -> None:
    """Raise :class:`OpenRLHFArgsError` for a ``train.*`` setting OpenRLHF cannot follow."""
    if t.loss_agg_mode not in OPENRLHF_AGG_MODES:
        raise OpenRLHFArgsError(
            f"train.loss_agg_mode={t.loss_agg_mode} is not available with backend=openrlhf "
            f"(OpenRLHF {OPENRLHF_VERSION} has {', '.join(OPENRLHF_AGG_MODES)}); choose one of those or backend=local"
        )
    if t.kl_clamp != OPENRLHF_KL_CLAMP:
        raise OpenRLHFArgsError(
            f"train.kl_clamp={t.kl_clamp} is not available with backend=openrlhf (OpenRLHF {OPENRLHF_VERSION} "
            f"always clamps the KL estimate to [-10, 10]); set train.kl_clamp=10.0 or use backend=local"
        )


def _layout_flags(f, settings: OpenRLHFSettings, model_path: str, critic: bool) -> None:
    """The models, their GPUs, the vLLM engines and DeepSpeed (``f(name, value)`` adds a flag)."""
    nodes, gpn = settings.group_shape()
    f("actor.model_name_or_path", model_path)
    f("actor.num_nodes", nodes)
    f("actor.num_gpus_per_node", gpn)
    f("ref.num_nodes", nodes)
    f("ref.num_gpus_per_node", gpn)
    if critic:
        f("critic.model_name_or_path", model_path)
        f("critic.num_nodes", nodes)
        f("critic.num_gpus_per_node", gpn)
    f("train.colocate_all", settings.colocate == "all")
    f("train.colocate_actor_ref", settings.colocate == "actor_ref")
    f("vllm.num_engines", settings.vllm_num_engines)
    f("vllm.tensor_parallel_size", settings.vllm_tensor_parallel_size)
    f("vllm.gpu_memory_utilization", settings.vllm_gpu_memory_utilization)
    f("vllm.enable_sleep", bool(settings.vllm_enable_sleep))
    f("vllm.enable_prefix_caching", settings.vllm_enable_prefix_caching)
    f("vllm.enforce_eager", settings.vllm_enforce_eager)
    # DeepSpeed
    f("ds.zero_stage", settings.zero_stage)
    f("ds.param_dtype", "bf16")
    f("ds.attn_implementation", settings.attn_implementation)
    f("ds.enable_sleep", bool(settings.ds_enable_sleep))
    f("ds.adam_offload", settings.adam_offload)
    f("ref.offload", settings.ref_offload)
    f("actor.gradient_checkpointing_enable", settings.gradient_checkpointing)


def _objective_flags(f, cfg, tbs: int, critic: bool) -> None:
    """The rollout shape and the local backend's objective (optimizers, clipping, KL loss, the
    advantages' estimator left to the suite) (``f(name, value)`` adds a flag)."""
    t = cfg.train

    def optimizer(model: str, lr: float, weight_decay: float) -> None:
        # the local backend's optimizer: AdamW at a constant rate, no warm-up, gradient clipping
        f(f"{model}.adam.lr", lr)
        f(f"{model}.adam.betas", (0.9, 0.999))
        f(f"{model}.adam.weight_decay", weight_decay)
        f(f"{model}.lr_scheduler", "constant")
        f(f"{model}.lr_warmup_ratio", 0.0)
        f(f"{model}.max_norm", t.max_grad_norm)

    # rollout shape (generation itself is driven by the suite's rollout engine)
    f("rollout.batch_size", t.groups_per_batch)
    f("rollout.n_samples_per_prompt", t.group_size)
    f("rollout.micro_batch_size", t.micro_batch_size)
    f("rollout.temperature", t.temperature)
    f("rollout.top_p", t.top_p)
    f("rollout.max_new_tokens", t.max_response_tokens)
    f("data.max_len", t.max_prompt_tokens + t.max_response_tokens)
    # optimisation: the local backend's objective
    f("train.batch_size", tbs)
    f("train.micro_batch_size", t.micro_batch_size)
    f("train.max_epochs", t.ppo_epochs)
    f("train.seed", cfg.seed)
    optimizer("actor", t.lr, t.weight_decay)
    f("actor.eps_clip", t.clip_ratio)
    f("actor.policy_loss_type", "ppo")
    f("actor.dual_clip", t.clip_ratio_c)
    f("actor.loss_agg_mode", t.loss_agg_mode)
    f("actor.entropy_coef", t.entropy_coef)
    f("algo.kl.use_loss")
    f("algo.kl.init_coef", t.kl_coef)
    f("algo.kl.estimator", t.kl_estimator)
    f("algo.advantage.estimator", "gae" if critic else "reinforce")
    f("algo.advantage.gamma", 1.0)
    if critic:
        optimizer("critic", t.value_lr, t.value_weight_decay)
        f("critic.value_clip", t.value_clip)


def _main_block(source: str, filename: str) -> Any:
    tree = ast.parse(source, filename)
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            return compile(ast.Module(body=node.body, type_ignores=[]), filename, "exec")
    raise OpenRLHFArgsError(
        f"{filename} has no __main__ block: not the OpenRLHF {OPENRLHF_VERSION} layout this backend pins"
    )


def parse_openrlhf_args(argv: list[str], messages: list[str] | None = None):
    """Parse and validate ``argv`` with OpenRLHF's own ``train_ppo_ray`` parser.

    Runs the ``if __name__ == "__main__":`` block of ``openrlhf/cli/train_ppo_ray.py``
    (argument definitions, ``hierarchize``, validation and defaulting) in a copy of that
    module's namespace whose ``train`` only captures its argument.

    Args:
        argv: the flags (:func:`build_argv`).
        messages: if given, receives the lines OpenRLHF printed (its warnings).

    Returns:
        the hierarchical ``SimpleNamespace`` OpenRLHF's ``train(args)`` would receive.

    Raises:
        OpenRLHFArgsError: an unknown flag or bad value (argparse's message), or a failed
            OpenRLHF assertion.
    """
    import openrlhf.cli.train_ppo_ray as cli

    path = Path(cli.__file__)
    code = _main_block(path.read_text(encoding="utf-8"), str(path))
    captured: dict[str, Any] = {}
    namespace = dict(vars(cli))
    namespace["train"] = lambda args: captured.setdefault("args", args)
    old_argv = sys.argv
    err, out = io.StringIO(), io.StringIO()
    sys.argv = ["openrlhf.cli.train_ppo_ray", *map(str, argv)]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            exec(code, namespace)  # noqa: S102 - OpenRLHF's own parser and validation
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln] or err.getvalue().splitlines()[-1:]
        raise OpenRLHFArgsError(f"OpenRLHF's argument parser rejected the arguments: {' '.join(lines)}") from None
    except AssertionError as exc:
        raise OpenRLHFArgsError(f"OpenRLHF rejected the arguments: {exc}") from None
    finally:
        sys.argv = old_argv
    if "args" not in captured:
        raise OpenRLHFArgsError("OpenRLHF's __main__ block did not reach train(args)")
    if messages is not None:
        messages.extend(line for line in out.getvalue().splitlines() if line.strip())
    return captured["args"]
