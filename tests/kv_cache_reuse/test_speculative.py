"""Section 6: speculative decoding with rollback, and section 11's referee as recorded."""

from __future__ import annotations

import torch


def test_crop_keeps_a_prefix_of_every_layer(nb):
    cache = [(torch.arange(24.0).view(1, 2, 12, 1), -torch.arange(24.0).view(1, 2, 12, 1)) for _ in range(2)]
    cropped = nb["crop"](cache, 5)
    assert all(k.shape[-2] == v.shape[-2] == 5 for k, v in cropped)
    assert torch.equal(cropped[0][0], cache[0][0][:, :, :5]) and nb["crop"](None, 3) is None
    assert nb["cached_length"](cropped) == 5 and nb["cached_length"](None) == 0


def test_the_draft_is_the_targets_first_layer(nb):
    draft, model = nb["draft"], nb["model"]
    assert draft.config.layers == 1 and len(draft.blocks) == 1
    assert all(torch.equal(w, model.state_dict()[name]) for name, w in draft.state_dict().items())


def test_bookkeeping_of_every_run(nb):
    spec = nb["Speculator"]
    for k in (1, 3, 5):
        for prompt, (logits, tokens) in zip(nb["SPEC_PROMPTS"], nb["PLAIN"]):
            s = spec(nb["model"], nb["draft"], k)
            run = s.generate(prompt, 17)
            assert run["tokens"] == tokens[:17]
            # Each call yields its accepted drafts plus one token; no call drafts past the budget.
            assert sum(run["accepted"]) + run["target_calls"] == 17 and all(0 <= n <= k for n in run["accepted"])
            assert run["logits"].shape == (17, nb["cfg"].vocab)
            # After the last rollback both caches hold the confirmed tokens but the newest.
            assert nb["cached_length"](s.target_cache) == len(prompt) + 16
            assert nb["cached_length"](s.draft_cache) <= len(prompt) + 16


def test_one_new_token_needs_one_target_call_and_no_draft(nb):
    run = nb["Speculator"](nb["model"], nb["draft"], 4).generate(nb["SPEC_PROMPTS"][0], 1)
    assert run["target_calls"] == 1 and run["draft_calls"] == 0 and run["tokens"] == nb["PLAIN"][0][1][:1]


def test_the_grid_and_its_counts(nb):
    spec = nb["SPEC"]
    assert [r["k"] for r in spec] == list(nb["SPEC_KS"])
    assert all(r["tokens_identical"] and r["logits_close"] for r in spec)
    calls = [r["target_calls"] for r in spec]
    assert all(a >= b for a, b in zip(calls, calls[1:])) and calls[0] < spec[0]["plain_calls"]
    assert all(abs(r["tokens_per_call"] - (1 + r["accepted_per_call"])) < 1e-12 for r in spec)
    assert 0.5 < nb["DRAFT_AGREEMENT"] < 0.95


def test_the_control_is_caught(nb):
    assert nb["spec_caught"] and not nb["no_rollback"]["tokens_identical"]


def test_the_referee_agreed_with_every_k(nb):
    assisted = nb["ASSISTED"]
    assert assisted is not None, "transformers is installed in the test environment"
    assert [r["k"] for r in assisted] == list(nb["SPEC_KS"])
    assert all(r["tokens_identical"] and r["logits_close"] and r["target_calls_hf"] == r["target_calls_ours"] for r in assisted)
    assert [r["target_calls_ours"] for r in assisted] == [r["target_calls"] for r in nb["SPEC"]]
    assert nb["ASSISTED_CONTROL"]["caught"]


def test_the_traced_loop_is_the_same_loop_and_every_round_follows_the_lengths_of_the_worked_trace(nb):
    for k in (2, 4, 5):
        for seed in (7, 8):
            prompt = torch.randint(0, nb["cfg"].vocab, (11,), generator=torch.Generator().manual_seed(seed)).tolist()
            traced = nb["TracedSpeculator"](nb["model"], nb["draft"], k)
            run = traced.generate(prompt, 23)
            plain = nb["Speculator"](nb["model"], nb["draft"], k).generate(prompt, 23)
            assert run["tokens"] == plain["tokens"] and run["accepted"] == plain["accepted"]
            assert [row["accepted"] for row in traced.log] == run["accepted"]
            for row in traced.log[1:]:
                t, n, drafts = row["text"], row["accepted"], len(row["drafts"])
                assert row["target_after_verify"] == t + drafts and row["target_after_rollback"] == t + n
                if drafts:
                    assert row["draft_after_propose"] == t + drafts - 1
                    assert row["draft_after_rollback"] == min(t + n, t + drafts - 1)
                assert row["new"] == row["drafts"][:n] + row["choices"][n:n + 1]
