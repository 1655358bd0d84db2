"""The decoder, the exercise, the formulas and the equivalence check, on the notebook's live objects."""

from __future__ import annotations

import pytest
import torch


def fresh_model(nb, **hooks):
    """A new decoder from the notebook's seed; hooks (positions_fn / mask_fn) go in through the constructor."""
    torch.manual_seed(nb["SEED"])
    return nb["CacheDecoder"](nb["DecoderConfig"](), **hooks).eval()


def test_parameter_count(nb):
    cfg = nb["DecoderConfig"]()
    model = fresh_model(nb)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == nb["parameter_formula"](cfg) == nb["N_PARAMS"] == 145_280
    assert cfg.head_dim == 16
    assert isinstance(model.blocks[0].mlp.act, torch.nn.GELU) and model.blocks[0].mlp.act.approximate == "none"
    assert model.lm_head.bias is None and model.lm_head.weight is not model.wte.weight


def test_same_seed_same_weights(nb):
    a, b = fresh_model(nb), nb["build_model"](nb["SEED"])
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, q), name


def test_forward_api_and_shapes(nb):
    model = nb["model"]
    with torch.inference_mode():
        ids = torch.tensor([[12, 7, 31, 4, 9, 18], [1, 2, 3, 4, 5, 6]])
        logits, cache = model(ids[:, :4])
        assert logits.shape == (2, 4, 97) and len(cache) == 2
        logits, cache2 = model(ids[:, 4:], cache)
        assert logits.shape == (2, 2, 97)
        assert all(k.shape == v.shape == (2, 4, 6, 16) for k, v in cache2)
        assert all(k.shape == (2, 4, 4, 16) for k, _ in cache)   # the old list is untouched


def test_six_token_table_shapes(nb):
    step = nb["step"]
    assert step["q"].shape == (1, 4, 2, 16)
    assert step["k"].shape == step["v"].shape == (1, 4, 6, 16)
    assert step["scores"].shape == (1, 4, 2, 6)
    assert step["logits"].shape == (1, 2, 97)


def test_exercise(nb):
    causal_mask, local = nb["causal_mask"], nb["local_triangle_mask"]
    mask = causal_mask(10, 3)
    assert mask.shape == (3, 13)
    assert mask.sum(-1).tolist() == [11, 12, 13]
    assert local(10, 3).sum(-1).tolist() == [1, 2, 3]
    assert nb["absolute_positions"](10, 3).tolist() == [10, 11, 12]
    assert nb["exercise_positions"] == [10, 11, 12]


def test_sdpa_alignment(nb):
    checks = nb["sdpa_checks"]
    assert checks["lower_right vs ours"] < 1e-5
    assert checks["is_causal=True vs ours"] > 1e-2


def test_projected_positions_formula_and_counts(nb):
    assert nb["projected_positions"](256, 16) == {"full": 4_232, "cached": 16}
    model, stream = nb["model"], nb["TIMING_STREAM"]
    for prompt_len, generated in ((5, 3), (16, 4)):
        prompt, cont = stream[:, :prompt_len], stream[:, prompt_len:prompt_len + generated]
        cache, fed_prefill = nb["prefill"](model, prompt)
        _, full_fed = nb["full_continuation"](model, prompt, cont)
        _, cached_fed, _ = nb["cached_continuation"](model, cache, cont)
        expected = nb["projected_positions"](prompt_len, generated)
        assert fed_prefill == prompt_len
        assert (full_fed, cached_fed) == (expected["full"], expected["cached"])
    assert (nb["full_fed"], nb["cached_fed"]) == (nb["full_hooked"], nb["cached_hooked"]) == (4_232, 16)


@pytest.mark.parametrize("batch,length,dtype", [(1, 272, torch.float32), (2, 7, torch.float64)])
def test_kv_payload_against_live_cache(nb, batch, length, dtype):
    model = nb["with_dtype"](nb["model"], dtype)
    cfg = nb["cfg"]
    with torch.inference_mode():
        ids = torch.randint(0, cfg.vocab, (batch, length), generator=torch.Generator().manual_seed(1))
        _, cache = model(ids[:, :-1])
        _, cache = model(ids[:, -1:], cache)
    size = torch.empty((), dtype=dtype).element_size()
    assert nb["cache_bytes"](cache) == nb["kv_payload_bytes"](batch, length, cfg, size)
    if (batch, length, dtype) == (1, 272, torch.float32):
        assert nb["cache_bytes"](cache) == 278_528


def test_correct_model_passes_all_12(nb):
    model, stream, check = fresh_model(nb), nb["STREAM"], nb["check_equivalence"]
    results = [check(model, stream, b, c, d) for d in (torch.float32, torch.float64) for b in (1, 2) for c in (1, 2, 5)]
    assert len(results) == 12
    assert all(r["passed"] and r["cache_unchanged"] and r["shapes_ok"] for r in results), results
    assert max(r["max_abs_logit_err"] for r in results if r["dtype"] == "fp64") < 1e-10
    assert [r["passed"] for r in nb["EQUIVALENCE"]] == [True] * 12


def test_chunk_lengths(nb):
    assert nb["chunk_lengths"](24, 5) == [5, 5, 5, 5, 4]
    assert nb["chunk_lengths"](24, 1) == [1] * 24
    assert nb["chunk_lengths"](6, [4, 2]) == [4, 2]
