"""The local transformers policy: tiny model build, seeded generation, log-probs of responses."""

import pytest
import torch

from g2po_bench.algorithms.backends.local.model import build_tiny_model, load_model_and_tokenizer
from g2po_bench.algorithms.backends.local.transformers_policy import (
    LocalPolicy,
    pack_sequences,
    response_logprobs,
)

CORPUS = ["You are in room 0 of 5. <think>go on</think><action>go east</action>"] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", CORPUS, vocab_size=300, hidden_size=32,
                            num_layers=2, num_heads=2, intermediate_size=64)
    return load_model_and_tokenizer(path, device="cpu")


def test_generation_is_seeded_and_decodes(tiny):
    model, tok = tiny
    pol = LocalPolicy(model, tok)
    prompts = ["You are in room 0", "go east please, now"]
    a = pol.generate(prompts, temperature=1.0, max_new_tokens=6, seed=3)
    b = pol.generate(prompts, temperature=1.0, max_new_tokens=6, seed=3)
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert all(1 <= len(g.response_ids) <= 6 for g in a)
    assert a[0].prompt_ids[0] == tok.bos_token_id
    assert a[0].text == tok.decode(a[0].response_ids, skip_special_tokens=True)


def test_prompt_truncation_keeps_the_end(tiny):
    model, tok = tiny
    pol = LocalPolicy(model, tok, max_prompt_tokens=5)
    ids = pol.encode_prompt("You are in room 0 of 5. go east go west look")
    assert len(ids) == 5 and pol.truncated_prompts == 1
    full = tok("You are in room 0 of 5. go east go west look", add_special_tokens=False)["input_ids"]
    assert ids == full[-5:]


def test_response_logprobs_match_unpadded_full_forward(tiny):
    """Batched, left-padded scoring with logits_to_keep equals scoring each row alone from
    the full logits (log_softmax at the position before each response token)."""
    model, tok = tiny
    prompts = [[1, 5, 6, 7, 8, 9], [1, 10]]
    responses = [[11, 12, 2], [13, 14, 15, 16]]
    packed = pack_sequences(prompts, responses, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp, ent = response_logprobs(model, packed, with_entropy=True)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            ids = torch.tensor([p + r])
            logits = model(input_ids=ids).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            expected = torch.stack([logp[len(p) - 1 + j, r[j]] for j in range(len(r))])
            torch.testing.assert_close(lp[i, : len(r)], expected, atol=1e-5, rtol=1e-5)
            assert torch.all(lp[i, len(r):] == 0)
            h = -(logp.exp() * logp).sum(-1)[len(p) - 1: len(p) - 1 + len(r)]
            torch.testing.assert_close(ent[i, : len(r)], h, atol=1e-5, rtol=1e-5)
    assert packed["response_mask"].sum().item() == 7
