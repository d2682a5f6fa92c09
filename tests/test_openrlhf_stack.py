"""The OpenRLHF backend against the real OpenRLHF 0.11.2 package, on a CPU.

Needs ``openrlhf`` installed without its GPU dependencies (docs/gpu-backends.md "OpenRLHF backend"; CI
installs it): skipped with the install line outside CI when it is missing, a failure in CI.
``flash_attn`` and ``vllm`` (import-time needs of OpenRLHF that do not install on a CPU) come
from ``tests/stubs`` when the real packages are absent: that folder is put on ``sys.path`` (and
on the Ray workers' PYTHONPATH) only while this module runs, and removed afterwards.
"""

import copy
import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
STUBS = Path(__file__).resolve().parent / "stubs"
INSTALL = ("pip install --no-deps openrlhf==0.11.2 ray==2.55.0 deepspeed==0.19.6 peft accelerate datasets ... "
           "(docs/gpu-backends.md, 'OpenRLHF backend', CPU install for the tests)")

if importlib.util.find_spec("openrlhf") is None:  # pragma: no cover - depends on the install
    if os.environ.get("CI"):
        pytest.fail(f"openrlhf is not installed in CI: {INSTALL}", pytrace=False)
    pytest.skip(f"openrlhf is not installed: {INSTALL}", allow_module_level=True)

from fake_rollouts import TOY, act, toy_rollouts  # noqa: E402

from g2po_bench.algorithms.registry import (  # noqa: E402
    bind_run_estimator,
    estimate,
    rollout_inputs,
    run_estimator_options,
)
from g2po_bench.benchmarks.registry import get_benchmark  # noqa: E402
from g2po_bench.benchmarks.rollout import collect_rollouts  # noqa: E402
from g2po_bench.runconfig import load_config  # noqa: E402
from g2po_bench.runtime.workers import EnvPool  # noqa: E402

_STUB_ROOTS = ("vllm", "flash_attn")


@pytest.fixture(scope="module")
def orl():
    """OpenRLHF and the backend's OpenRLHF-side modules, with the stand-ins while needed."""
    need = [m for m in _STUB_ROOTS if importlib.util.find_spec(m) is None]
    if need:
        sys.path.insert(0, str(STUBS))
    try:
        ns = SimpleNamespace(
            experience=importlib.import_module("openrlhf.trainer.ppo_utils.experience"),
            models=importlib.import_module("openrlhf.models"),
            model_utils=importlib.import_module("openrlhf.models.utils"),
            utils=importlib.import_module("openrlhf.utils"),
            launcher=importlib.import_module("openrlhf.trainer.ray.launcher"),
            args=importlib.import_module("g2po_bench.algorithms.backends.openrlhf.args"),
            exp=importlib.import_module("g2po_bench.algorithms.backends.openrlhf.experience"),
            maker=importlib.import_module("g2po_bench.algorithms.backends.openrlhf.experience_maker"),
            trainer=importlib.import_module("g2po_bench.algorithms.backends.openrlhf.trainer"),
            policy=importlib.import_module("g2po_bench.algorithms.backends.openrlhf.engine_policy"),
            cpu_workers=importlib.import_module("openrlhf_cpu_workers"),
            settings=importlib.import_module("g2po_bench.algorithms.backends.openrlhf.settings"),
            stubbed=need,
        )
        yield ns
    finally:
        if need:
            sys.path.remove(str(STUBS))
            for name in [m for m in sys.modules if m.split(".")[0] in need]:
                del sys.modules[name]


# ---------------------------------------------------------------------------- helpers
def parsed_args(orl, cfg, settings=None, **kw):
    settings = settings or orl.settings.OpenRLHFSettings(num_nodes=1, gpus_per_node=1).resolved()
    argv = orl.args.build_argv(cfg, settings, model_path=kw.pop("model_path", "/models/x"),
                               ckpt_path=kw.pop("ckpt_path", "/tmp/ckpt"), **kw)
    return orl.args.parse_openrlhf_args(argv), argv


def index_samples(samples):
    for i, s in enumerate(samples):
        s.index = [i]
    return samples


def micro_batches(orl, samples, size):
    Experience = orl.experience.Experience
    return [Experience.concat_experiences(samples[i:i + size], 0) for i in range(0, len(samples), size)]


# ---------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("case", ["g2po_1gpu", "ppo_2x8_actor_ref", "preset_alfworld_7b_zero3"])
def test_arguments_are_accepted_by_openrlhfs_own_parser(orl, case, tmp_path):
    S = orl.settings.OpenRLHFSettings
    if case == "g2po_1gpu":
        cfg = load_config(overrides=["backend=openrlhf"])
        settings = S(num_nodes=1, gpus_per_node=1).resolved()
    elif case == "ppo_2x8_actor_ref":
        cfg = load_config(overrides=["backend=openrlhf", "algorithm.name=ppo", "train.mini_batch_size=100",
                                     "train.micro_batch_size=4"])
        settings = S(num_nodes=2, gpus_per_node=8, colocate="actor_ref", vllm_num_engines=4).resolved(
            needs_critic=True)
    else:
        (tmp_path / "model").mkdir()
        cfg = load_config(preset="alfworld_7b", overrides=["backend=openrlhf", f"model.path={tmp_path / 'model'}",
                                                            f"env.data_dir={tmp_path}"])
        settings = S(num_nodes=1, gpus_per_node=8, zero_stage=3).resolved()
    args, argv = parsed_args(orl, cfg, settings, model_path=str(tmp_path / "model"), ckpt_path=str(tmp_path / "ck"))
    t = cfg.train
    # the local backend's objective, as OpenRLHF's workers will read it
    assert args.actor.eps_clip_low_high == (t.clip_ratio, t.clip_ratio)
    assert args.algo.kl.use_loss and args.algo.kl.init_coef == t.kl_coef and args.algo.kl.estimator == t.kl_estimator
    assert args.actor.entropy_coef == t.entropy_coef and args.actor.loss_agg_mode == "token-mean"
    assert args.actor.dual_clip == t.clip_ratio_c == 3.0  # reference dual-clip PPO
    assert args.actor.adam.weight_decay == t.weight_decay == 0.01
    assert args.actor.adam.lr == t.lr and tuple(args.actor.adam.betas) == (0.9, 0.999)
    assert args.actor.lr_scheduler == "constant" and args.actor.lr_warmup_ratio == 0.0
    assert args.rollout.temperature == t.temperature and args.rollout.n_samples_per_prompt == t.group_size
    assert args.data.max_len == t.max_prompt_tokens + t.max_response_tokens
    assert args.train.max_epochs == t.ppo_epochs and args.train.micro_batch_size == t.micro_batch_size
    ranks = settings.actor_gpus
    assert args.train.batch_size % (t.micro_batch_size * ranks) == 0 and args.train.batch_size >= t.mini_batch_size
    assert args.ds.zero_stage == settings.zero_stage and args.vllm.num_engines == settings.vllm_num_engines
    if case == "ppo_2x8_actor_ref":
        assert args.critic.model_name_or_path == str(tmp_path / "model") and args.critic.value_clip == t.value_clip
        assert args.critic.adam.lr == t.value_lr == 1e-5 and args.critic.adam.weight_decay == t.value_weight_decay == 0.01
        assert args.train.colocate_actor_ref and not args.train.colocate_all
        assert (args.actor.num_nodes, args.actor.num_gpus_per_node) == settings.group_shape() == (1, 6)
        assert args.train.batch_size == 120  # 100 rounded up to a multiple of 4 x 6 ranks
    else:
        assert args.critic.model_name_or_path is None
        assert args.train.colocate_all
    strategy = orl.utils.get_strategy(args)
    assert strategy.train_batch_size == args.train.batch_size and strategy.stage == settings.zero_stage
    # the real parser: an unknown flag and a failed OpenRLHF assertion are rejected
    with pytest.raises(orl.args.OpenRLHFArgsError, match="unrecognized arguments"):
        orl.args.parse_openrlhf_args(argv + ["--no.such_flag", "1"])
    with pytest.raises(orl.args.OpenRLHFArgsError, match="n_samples_per_prompt|sample batches"):
        orl.args.parse_openrlhf_args(argv + ["--rollout.micro_batch_size", "100000"])


# ---------------------------------------------------------------------------- experiences
def test_step_rows_become_openrlhf_experiences_and_back(orl):
    rb = toy_rollouts(seed=2)
    n = len(rb.steps)
    ss = orl.exp.build_samples(rb, eos_token_id=2, pad_to=16)
    S = len(ss.samples)
    assert S % 16 == 0 and S - n < 16 and ss.num_real == n
    assert sorted(ss.rows[ss.rows >= 0].tolist()) == list(range(n)) and (ss.rows[n:] == -1).all()
    for s, row in zip(ss.samples, ss.rows):
        t = s.sequences.shape[1]
        assert s.sequences.shape == s.attention_mask.shape == (1, t) and s.action_mask.shape == (1, t - 1)
        if row < 0:
            assert s.action_mask.sum() == 0  # padding copies have no action token
            continue
        p, r = len(rb.prompt_ids[row]), len(rb.response_ids[row])
        assert t == p + r and int(s.response_length) == r  # response tokens only (no prompt/tool tokens)
        m = s.action_mask[0]
        assert m.sum() == r and m[: p - 1].sum() == 0 and m[p - 1:].all()
        # position k predicts token k + 1: the masked positions predict exactly the response
        assert s.sequences[0, 1:][m.bool()].tolist() == rb.response_ids[row]
        assert s.sequences[0, :p].tolist() == rb.prompt_ids[row]
    index_samples(ss.samples)
    exps = micro_batches(orl, ss.samples, 4)
    adv_rows = np.linspace(-2, 3, n)
    per_sample = np.zeros(S)
    per_sample[ss.rows >= 0] = adv_rows[ss.rows[ss.rows >= 0]]
    orl.exp.attach_step_values(exps, per_sample)
    for e in exps:
        b, t = e.sequences.shape
        assert e.attention_mask.shape == (b, t) and e.action_mask.shape == e.advantages.shape == (b, t - 1)
        assert (e.advantages[e.action_mask == 0] == 0).all()
        for j, pos in enumerate(e.index):
            vals = e.advantages[j][e.action_mask[j].bool()]
            assert torch.all(vals == torch.tensor(per_sample[pos], dtype=torch.float32))
    # and back
    back = orl.exp.experiences_to_rows(exps)
    assert len(back) == n
    for pos, rec in back.items():
        row = int(ss.rows[pos])
        assert rec["prompt_ids"] == rb.prompt_ids[row] and rec["response_ids"] == rb.response_ids[row]
        assert rec["advantage"] == pytest.approx(adv_rows[row], rel=1e-6)
    # through OpenRLHF's replay-buffer transforms (what the actor workers do on append)
    E = orl.experience
    items = []
    for e in exps:  # (split_experience_batch resets .index: work on copies, as the workers do)
        items.extend(E.remove_padding_in_sequences(E.split_experience_batch(copy.deepcopy(e))))
    rebatched = E.make_experience_batch(items[:5])
    for j in range(5):
        a, m = rebatched.advantages[j], rebatched.action_mask[j].bool()
        assert (a[~m] == 0).all() and len(set(a[m].tolist())) == 1
    # the critic trains on V(prompt) only: one position, P - 1, per real sample
    for e in exps:
        view = orl.exp.critic_view(e, ss.prompt_lens, ss.rows)
        for j, pos in enumerate(e.index):
            nz = torch.nonzero(view.action_mask[j]).flatten().tolist()
            assert nz == ([int(ss.prompt_lens[pos]) - 1] if ss.rows[pos] >= 0 else [])


@pytest.mark.parametrize("name", ["g2po", "ppo"])
def test_experience_maker_writes_the_registry_advantages_on_action_tokens(orl, name):
    """OpenRLHF's experience maker, with the suite's advantages: equal to the local backend's
    per-step advantages on every response token, 0 elsewhere (values read at the prompt end)."""
    rb = toy_rollouts(seed=3)
    cfg = load_config(overrides=[f"algorithm.name={name}", "env.name=toy", "backend=openrlhf"])
    args, _ = parsed_args(orl, cfg)
    ss = orl.exp.build_samples(rb, eos_token_id=2, pad_to=args.train.batch_size)
    maker = orl.maker.StepExperienceMaker(None, object() if name == "ppo" else None, None, None, None,
                                          SimpleNamespace(args=args), SimpleNamespace(pad_token_id=0), dp_ranks=1)
    exps = maker.split_rollout_samples(ss.samples)
    v_rows = None
    if name == "ppo":  # critic values (B, A) with V(s_t) at the last prompt token
        v_rows = np.round(np.linspace(-1, 4, len(rb.steps)), 3).astype(np.float32).astype(np.float64)
        for e in exps:
            e.values = torch.zeros(e.action_mask.shape)
            for j, pos in enumerate(e.index):
                if ss.rows[pos] >= 0:
                    e.values[j, ss.prompt_lens[pos] - 1] = float(v_rows[ss.rows[pos]])
    estimator = bind_run_estimator(cfg)  # as the trainer binds it
    maker.prepare(ss, lambda values: estimator(rb, values))
    exps = maker.compute_advantages_and_returns(exps)
    assert args.algo.advantage.gamma == 1.0  # OpenRLHF's gamma handling is bypassed, ours (0.95) is used
    if name == "ppo":
        np.testing.assert_array_equal(maker.values, v_rows)
    options = run_estimator_options(cfg)
    local = estimate(name, rb.steps, inputs=rollout_inputs(name, options, rb, v_rows), **options)
    for e in exps:
        assert e.kl is None
        for j, pos in enumerate(e.index):
            m = e.action_mask[j].bool()
            assert (e.advantages[j][~m] == 0).all()
            if ss.rows[pos] < 0:
                assert m.sum() == 0
                continue
            # the same float32 values the local backend puts on its response tokens
            want = torch.as_tensor(local.advantages[[ss.rows[pos]]], dtype=torch.float32)
            assert torch.equal(e.advantages[j][m], want.expand(int(m.sum())))
            if name == "ppo":
                assert torch.all(e.returns[j][m] == torch.tensor(local.returns[ss.rows[pos]], dtype=torch.float32))


def test_environment_tokens_never_enter_the_loss(orl):
    """OpenRLHF's policy, KL and entropy losses on our experiences: zero gradient on every
    position outside the action mask (prompt = observation, history, admissible actions)."""
    rb = toy_rollouts(seed=4)
    ss = orl.exp.build_samples(rb, eos_token_id=2)
    index_samples(ss.samples)
    e = micro_batches(orl, ss.samples, 8)[0]
    orl.exp.attach_step_values([e], np.linspace(-1, 1, len(ss.samples)))
    mask = e.action_mask
    logp = torch.randn(mask.shape, requires_grad=True)
    old, ref = torch.randn(mask.shape), torch.randn(mask.shape)
    ent = torch.rand(mask.shape, requires_grad=True)
    loss_fn = orl.models.PolicyLoss(0.2, 0.2, token_level_loss=True)
    pl = loss_fn(logp, old, e.advantages, action_mask=mask)[0]
    kl = orl.models.aggregate_loss(orl.model_utils.compute_approx_kl(logp, ref, kl_estimator="k3"), mask)
    loss = pl + 0.01 * kl - 0.001 * orl.models.aggregate_loss(ent, mask)
    loss.backward()
    off = mask == 0
    assert (logp.grad[off] == 0).all() and (ent.grad[off] == 0).all()
    assert (logp.grad[mask.bool()] != 0).any()
    for j, pos in enumerate(e.index):
        assert mask[j, : ss.prompt_lens[pos] - 1].sum() == 0  # no prompt token is ever an action


def test_openrlhf_objective_equals_the_local_backends_loss(orl):
    """What OpenRLHF's actor optimises with the arguments we pass (PolicyLoss clip 0.2 with
    dual clip 3 + kl_coef x k3 KL loss - entropy_coef x entropy, token-mean) equals the local
    backend's ppo_step_loss on the same tokens, advantages and masks."""
    from g2po_bench.algorithms import losses

    cfg = load_config(overrides=["backend=openrlhf"])
    args, _ = parsed_args(orl, cfg)
    rb = toy_rollouts(seed=5)
    ss = orl.exp.build_samples(rb, eos_token_id=2)
    index_samples(ss.samples)
    e = micro_batches(orl, ss.samples, 12)[0]
    step_adv = torch.linspace(-1, 1.5, e.action_mask.shape[0])
    orl.exp.attach_step_values([e], np.concatenate([step_adv.numpy(), np.zeros(len(ss.samples))]))
    mask = e.action_mask
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(mask.shape, generator=g) * 3
    old = logp + 0.3 * torch.randn(mask.shape, generator=g)
    ref = logp + 0.5 * torch.randn(mask.shape, generator=g)
    ent = torch.rand(mask.shape, generator=g)
    low, high = args.actor.eps_clip_low_high
    pl = orl.models.PolicyLoss(low, high, dual_clip=args.actor.dual_clip,
                               token_level_loss=args.actor.loss_agg_mode == "token-mean")(
        logp, old, e.advantages, action_mask=mask)[0]
    kl = orl.models.aggregate_loss(orl.model_utils.compute_approx_kl(logp, ref, kl_estimator=args.algo.kl.estimator),
                                   mask)
    ours = pl + args.algo.kl.init_coef * kl - args.actor.entropy_coef * orl.models.aggregate_loss(ent, mask)
    t = cfg.train
    local = losses.ppo_step_loss(logp, old, ref, step_adv[:, None].expand_as(logp), ent, mask.bool(),
                                 clip_ratio=t.clip_ratio, kl_coef=t.kl_coef, entropy_coef=t.entropy_coef,
                                 kl_estimator=t.kl_estimator, clip_ratio_c=t.clip_ratio_c,
                                 loss_agg_mode=t.loss_agg_mode)["loss"]
    torch.testing.assert_close(ours, local, rtol=1e-5, atol=1e-6)


def test_gpu_stack_calls_openrlhfs_classes_with_their_real_signatures(orl, monkeypatch):
    """The production Workers.build (GPUs; not runnable here) against OpenRLHF's real signatures:
    create_vllm_engines, RayActorGroup and each worker's init_model_from_pretrained are bound
    with inspect.signature; layout (shared placement group, GPU shares) as OpenRLHF's launcher."""
    import inspect

    import ray

    rpg = importlib.import_module("ray.util.placement_group")
    tr = importlib.import_module("openrlhf.trainer.ray")
    real_engines = inspect.signature(tr.create_vllm_engines)
    real_group = inspect.signature(orl.launcher.RayActorGroup.__init__)
    calls = {}

    def fake_engines(*a, **k):
        calls["engines"] = real_engines.bind(*a, **k).arguments
        return ["engine0"]

    class FakeGroup:
        def __init__(self, *a, **k):
            b = real_group.bind(None, *a, **k).arguments
            self.cls = b["ray_actor_type"]
            calls.setdefault("groups", []).append(b)

        def async_init_model_from_pretrained(self, *a, **k):
            init = self.cls.__ray_metadata__.modified_class.init_model_from_pretrained
            calls.setdefault("inits", []).append(inspect.signature(init).bind(None, *a, **k).arguments)
            return []

    monkeypatch.setattr(tr, "create_vllm_engines", fake_engines)
    monkeypatch.setattr(orl.launcher, "RayActorGroup", FakeGroup)
    monkeypatch.setattr(rpg, "placement_group", lambda bundles, strategy: SimpleNamespace(ready=lambda: None,
                                                                                       bundles=bundles))
    monkeypatch.setattr(ray, "get", lambda x: x)
    cfg = load_config(overrides=["backend=openrlhf", "algorithm.name=ppo"])
    settings = orl.settings.OpenRLHFSettings(num_nodes=1, gpus_per_node=2).resolved(needs_critic=True)
    args, _ = parsed_args(orl, cfg, settings)
    stack = orl.trainer.Workers().build(args, orl.utils.get_strategy(args), settings, "/models/x", 10)
    assert stack.engines == ["engine0"] and stack.dp_ranks == 2
    eng = calls["engines"]
    assert eng["num_engines"] == 2 and eng["max_model_len"] == args.data.max_len and eng["shared_pg"] is not None
    assert eng["vllm_enable_sleep"] is True and eng["pretrain"] == "/models/x"
    names = [g["ray_actor_type"].__ray_metadata__.class_name for g in calls["groups"]]
    assert names == ["PolicyModelActor", "ReferenceModelActor", "CriticModelActor"]
    for g in calls["groups"]:
        assert (g["num_nodes"], g["num_gpus_per_node"], g["num_gpus_per_actor"]) == (1, 2, 0.2)
        assert g["pg"] is eng["shared_pg"]  # colocate all: one placement group for everything
    assert [i.get("max_steps") for i in calls["inits"]] == [10, None, 10]
    assert calls["inits"][0]["vllm_engines"] == ["engine0"]


# ---------------------------------------------------------------------------- Ray: the rollout side
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from g2po_bench.algorithms.backends.local.model import build_tiny_model

    corpus = [
        "Task: reach room 4. Step 0. History: Now: You are in room 0 of 5. Actions: go east, go west, look. Answer:",
        act("go east"), act("go west"), act("look"), "Nothing happens.",
    ] * 20
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", corpus, vocab_size=400, hidden_size=32,
                            num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=512)


@pytest.fixture(scope="module")
def ray_cluster(orl):
    import ray

    from g2po_bench.algorithms.backends.openrlhf.cluster import worker_runtime_env

    path = os.pathsep.join([str(ROOT / "tests")] + ([str(STUBS)] if orl.stubbed else []))
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
             runtime_env=worker_runtime_env({"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}))
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_rollout_side_with_a_cpu_policy(orl, ray_cluster, tiny_model):
    """Ray (a local single-node instance; Ray 2.55 has no local_mode): the suite's rollout engine
    drives engine actors through EnginePolicy (OpenRLHF's RolloutRayActor.generate interface),
    then OpenRLHF's RayActorGroup + RemoteExperienceMaker.make_experience compute old and
    reference log-probs on CPU model actors (OpenRLHF's Actor module), and the per-token
    advantages are the registry's. Log-probs equal the local backend's on the same rows."""
    ray = ray_cluster
    from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
    from g2po_bench.algorithms.backends.local.transformers_policy import (
        LocalPolicy,
        pack_sequences,
        response_logprobs,
    )

    cfg = load_config(overrides=["backend=openrlhf", "env.name=toy", "train.max_response_tokens=6",
                                 "train.micro_batch_size=4", "train.mini_batch_size=8", "train.group_size=3"])
    workers = orl.cpu_workers.CPUWorkers()
    settings = workers.resolve(orl.settings.OpenRLHFSettings(num_nodes=1, gpus_per_node=1, vllm_num_engines=2))
    args, _ = parsed_args(orl, cfg, settings, model_path=str(tiny_model))
    strategy = orl.utils.get_strategy(args)
    stack = workers.build(args, strategy, settings, str(tiny_model), max_steps=4)
    tok = orl.trainer.load_tokenizer(tiny_model)
    policy = orl.policy.EnginePolicy(stack.engines, tok, max_prompt_tokens=cfg.train.max_prompt_tokens,
                                     sampling_params=stack.sampling_params)
    # the prompt encoding is the local backend's
    model, tok_local = load_model_and_tokenizer(tiny_model)
    local_policy = LocalPolicy(model, tok_local, max_prompt_tokens=cfg.train.max_prompt_tokens)
    probe = "Task: reach room 2. Step 0. History:  Now: You are in room 0 of 3. Answer:"
    assert policy.encode_prompt(probe) == local_policy.encode_prompt(probe)

    tasks = TOY.load_tasks(None, "train")[:2]
    with EnvPool(get_benchmark("toy"), None, 2) as pool:
        kw = dict(group_size=3, max_steps=3, temperature=1.0, max_new_tokens=6, seed=11)
        rb = collect_rollouts(policy, pool, TOY, tasks, **kw)
        again = collect_rollouts(policy, pool, TOY, tasks, **kw)
    assert rb.response_ids == again.response_ids  # per-request seeds: independent of engine order
    assert sorted(set(rb.steps.group_id.tolist())) == [0, 1] and len(rb.trajectories) == 6
    assert all(len(p) > 0 and 0 < len(r) <= 6 for p, r in zip(rb.prompt_ids, rb.response_ids))

    trainer = orl.trainer.StepPPOTrainer(strategy, stack.actor, stack.critic, stack.reference, stack.engines, tok,
                                         cfg=cfg, dp_ranks=stack.dp_ranks)
    exps, ss = trainer.make_experiences(rb)
    assert len(ss.samples) % args.train.batch_size == 0
    res = trainer.experience_maker.result
    local = estimate(cfg.algorithm.name, rb.steps, mode=cfg.algorithm.mode, gamma=cfg.algorithm.gamma,
                     step_weight=cfg.algorithm.step_weight, invalid_penalty=cfg.algorithm.invalid_penalty,
                     success_reward=cfg.algorithm.success_reward)
    np.testing.assert_array_equal(res.advantages, local.advantages)
    rows = [r for r in range(len(rb.steps))]
    packed = pack_sequences([rb.prompt_ids[r] for r in rows], [rb.response_ids[r] for r in rows], tok.pad_token_id,
                            "cpu")
    with torch.no_grad():
        want, _ = response_logprobs(model, packed, temperature=cfg.train.temperature)
    seen = 0
    for e in exps:
        assert e.action_log_probs.shape == e.base_action_log_probs.shape == e.action_mask.shape
        assert (e.action_log_probs[e.action_mask == 0] == 0).all()
        for j, pos in enumerate(e.index):
            row = int(ss.rows[pos])
            if row < 0:
                continue
            m = e.action_mask[j].bool()
            got = e.action_log_probs[j][m]
            torch.testing.assert_close(got, want[row, : len(rb.response_ids[row])], rtol=1e-4, atol=1e-5)
            # the reference starts equal to the policy
            torch.testing.assert_close(e.base_action_log_probs[j][m], got)
            assert torch.all(e.advantages[j][m] == torch.tensor(local.advantages[row], dtype=torch.float32))
            seen += 1
    assert seen == len(rb.steps)

    # the update path through the CPU stand-in (tests/openrlhf_standins.py), not OpenRLHF's
    # DeepSpeed ppo_train: append the experiences to the actor group, CPUModelActor.fit (one PPO
    # pass with OpenRLHF's PolicyLoss / compute_approx_kl / aggregate_loss and torch AdamW), then
    # broadcast_to_vllm, which makes each HFRolloutEngine stand-in load the actor's weights
    status, step = trainer.train_on_rollouts(rb, 0)
    assert step == 1 and "policy_loss" in status and "kl" in status and np.isfinite(status["policy_loss"])
    assert ray.get([e.get_weight_version.remote() for e in stack.engines]) == [1, 1]  # synced after the update
    for group in (stack.actor, stack.reference):
        for h in group._actor_handlers:
            ray.kill(h)
    for e in stack.engines:
        ray.kill(e)


# ---------------------------------------------------------------------------- the CLI, end to end
@pytest.mark.slow
def test_g2po_train_backend_openrlhf_dry_run_on_cpu_and_resume(orl, tmp_path):
    """``g2po train backend=openrlhf`` with the CPU stand-ins injected (tests/openrlhf_cpu_train.py): Ray started
    locally, two iterations writing the run folder with seconds per phase, step tables and
    ``timing.json`` (the run lifecycle shared with the local backend); a resume stopped by SIGTERM
    in its second iteration (the lifecycle's signal policy: ``interrupted``, exit status 143, only
    checkpointed iterations recorded), then resumed to the end."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests")] + ([str(STUBS)] if orl.stubbed else [])
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update({"G2PO_OPENRLHF_VLLM_NUM_ENGINES": "1", "OMP_NUM_THREADS": "1",
                "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"})
    for k in ("G2PO_NUM_NODES", "SLURM_JOB_ID", "RAY_ADDRESS"):
        env.pop(k, None)
    common = ["backend=openrlhf", "env.name=toy", "env.max_steps=3", "env.num_workers=1", "train.groups_per_batch=2",
              "train.group_size=2", "train.max_response_tokens=6", "train.sft_epochs=0", "train.micro_batch_size=4",
              "train.mini_batch_size=8", "train.max_prompt_tokens=16", "eval.num_tasks=2", "eval.every=0", "model.hidden_size=32",
              "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64", "model.vocab_size=300",
              f"output_dir={tmp_path}", "run_id=dry", f"train.warm_start_cache={tmp_path / 'warm_start'}", "progress=false"]
    # the lifecycle's trackers, as on the local backend (the tracking extra; CI installs it)
    tensorboard = importlib.util.find_spec("tensorboard") is not None
    if tensorboard:
        common.append("logging.backends=[jsonl,console,tensorboard]")

    def argv(*extra):
        return [sys.executable, str(ROOT / "tests" / "openrlhf_cpu_train.py"), *common, *extra]

    def g2po(*extra):
        res = subprocess.run(argv(*extra), cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        if res.returncode != 0:
            pytest.fail(f"g2po train failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-6000:]}",
                        pytrace=False)
        return res

    first = g2po("train.iterations=2")
    # every toy prompt is longer than 16 tokens: warned once per phase (common.TruncationWarnings)
    assert first.stderr.count("training prompt(s) at iteration") == 1, first.stderr[-3000:]
    assert first.stderr.count("evaluation prompt(s) at iteration") == 1, first.stderr[-3000:]
    run = tmp_path / "dry"
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "done" and status["iteration"] == 2
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in recs] == [1, 2]
    for r in recs:
        for k in ("rollout_s", "logprob_s", "adv_s", "update_s", "sync_s"):
            assert r[k] >= 0
        assert np.isfinite(r["loss/pg_loss"]) and np.isfinite(r["loss/kl"]) and "adv/adv_mean" in r and r["train/steps"] > 0
        # counted per iteration from the rollout, as on the local backend (not a running total)
        assert r["train/truncated_prompts"] == r["train/steps"]
        assert 0.0 <= r["train/truncated_responses"] <= 1.0
    assert recs[-1]["eval/truncated_prompts"] > 0 and 0.0 <= recs[-1]["eval/truncated_responses"] <= 1.0
    ev = json.loads((run / "eval.json").read_text())
    assert ev["before"]["iteration"] == 0 and ev["final"]["iteration"] == 2
    # eval.at_train_temperature (on by default), as on the local backend: the panel at the training
    # temperature before RL and after the last iteration
    at_t = ev["at_train_temperature"]
    assert at_t["temperature"] == 1.0 and at_t["before"]["iteration"] == 0 and at_t["final"]["iteration"] == 2
    assert at_t["final"]["num_episodes"] == ev["final"]["num_episodes"]
    state = json.loads((run / "checkpoints" / "latest" / "trainer_state.json").read_text())
    assert state["iteration"] == 2 and state["backend"] == "openrlhf"
    assert (run / "checkpoints" / "latest" / "policy" / "config.json").exists()
    assert "--algo.kl.use_loss" in (run / "openrlhf_args.txt").read_text()
    # the lifecycle's records, as on the local backend: a step table per iteration (record_graphs,
    # the default) with the advantages the estimator gave, and the seconds per phase
    from g2po_bench.core.steptable import read_step_table, recorded_iterations

    assert recorded_iterations(run) == [1, 2]
    table = read_step_table(run, 2)
    assert table.estimator == "g2po" and len(table.frame) == recs[1]["train/steps"]
    assert {"node_value", "a_ep"} <= set(table.frame.columns) and np.isfinite(table.frame["advantage"]).all()
    assert recs[1]["record/bytes"] == (run / "steps" / "iter_00002.parquet").stat().st_size
    timing = json.loads((run / "timing.json").read_text())["seconds"]
    assert {"tasks", "workers", "evaluation", "RL iterations"} <= set(timing), timing

    # SIGTERM to the driver while it trains iteration 4 (as `scancel --signal=TERM` does): the
    # iteration is abandoned, the checkpoint of iteration 3 is what a resume continues from
    log = tmp_path / "stopped.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv("train.iterations=4", "resume=true"), cwd=ROOT, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 1200
        while len((run / "metrics.jsonl").read_text().splitlines()) < 3:
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=600) == 128 + signal.SIGTERM, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and "interrupted by SIGTERM during iteration 4" in status["error"], status
    assert status["iteration"] == 3
    assert [json.loads(x)["iteration"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert json.loads((run / "checkpoints" / "latest" / "trainer_state.json").read_text())["iteration"] == 3
    assert recorded_iterations(run)[:3] == [1, 2, 3]

    g2po("train.iterations=4", "resume=true")
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4]
    assert json.loads((run / "status.json").read_text())["iteration"] == 4
    assert recorded_iterations(run) == [1, 2, 3, 4]
    at_t = json.loads((run / "eval.json").read_text())["at_train_temperature"]
    assert at_t["before"]["iteration"] == 0 and at_t["final"]["iteration"] == 4  # "before" kept across the resumes
    if tensorboard:  # one series across the three attempts, equal to the records (float32)
        from tracker_files import tensorboard_scalars

        tb = tensorboard_scalars(run / "tensorboard")
        assert tb["train/success_rate"] == [(r["iteration"], float(np.float32(r["train/success_rate"]))) for r in recs]
        assert tb["loss/kl"] == [(r["iteration"], float(np.float32(r["loss/kl"]))) for r in recs]
        ev = json.loads((run / "eval.json").read_text())
        assert tb["eval/success_rate"] == [(e["iteration"], float(np.float32(e["success_rate"])))
                                           for e in ev["history"]]
