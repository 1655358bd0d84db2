"""Property tests of the notebook's own pieces, on inputs the notebook does not try: the sink cache, the cache
positions of section 7, the MLA forms and their multiply-add formula, the eviction policies, and the seed. The
shared pieces (the ring buffer, the decoder, the check) are tested with the architectures notebook."""

from __future__ import annotations

import pytest
import torch


def kv(positions, heads: int = 2, dim: int = 3, dtype=torch.float64):
    """K and V whose every entry encodes its position (K = p, V = -p), [1, heads, len, dim]."""
    p = torch.as_tensor(positions, dtype=dtype)
    k = p[None, None, :, None].expand(1, heads, len(p), dim).clone()
    return k, -k


@pytest.mark.parametrize("sinks, slots", [(0, 3), (1, 1), (4, 7), (3, 12)])
def test_sink_ring_keeps_the_first_and_the_newest(nb, sinks, slots):
    cache, seen = nb["SinkRingKV"](sinks, slots), 0
    for n in (1, 2, 5, 3, 9, 1, 4):
        positions = torch.arange(seen, seen + n)
        _, _, key_pos = cache.update(*kv(positions), positions)
        old = list(range(min(sinks, seen))) + list(range(max(sinks, seen - slots), seen))
        assert key_pos.tolist() == old + positions.tolist()
        seen += n
    k, _, pos = cache.contents()
    assert pos.tolist() == list(range(sinks)) + list(range(max(sinks, seen - slots), seen))
    assert k[0, 0, :, 0].tolist() == pos.tolist()


def test_cache_positions_number_the_keys_a_query_reads(nb):
    mask, positions = nb["sink_window_mask"](4, 8), torch.arange(60)
    allowed = mask(positions, positions)
    ranks = nb["cache_positions"](allowed)
    for p in (0, 3, 11, 12, 30, 59):
        read = allowed[p].nonzero().flatten()
        assert ranks[p, read].tolist() == list(range(len(read)))          # 0, 1, 2, ... in key order
        assert int(allowed[p].sum()) == min(p + 1, 4 + 8)
    # With every earlier key readable (the window covers the stream), cache positions are text positions.
    full = nb["sink_window_mask"](4, 100)(positions, positions)
    assert torch.equal(nb["cache_positions"](full)[full], positions[None, :].expand(60, -1)[full])


@pytest.mark.parametrize("heads, latent, rope_dim, nope_dim, value_dim", [(2, 8, 4, 6, 10), (3, 20, 2, 4, 4)])
def test_absorbed_equals_naive_for_other_sizes(nb, heads, latent, rope_dim, nope_dim, value_dim):
    config = nb["MLAConfig"](width=24, heads=heads, latent=latent, rope_dim=rope_dim, nope_dim=nope_dim, value_dim=value_dim,
                             **nb["LLAMA_SHAPE"])
    ids = torch.randint(0, config.vocab, (2, 13), generator=torch.Generator().manual_seed(1))
    outputs = {}
    for form in ("naive", "expand_on_read", "absorbed"):
        net = nb["build"](config, lambda i, form=form: nb["MLA_FORMS"][form](config), seed=3).double()
        outputs[form], _ = nb["run_chunked"](net, ids, 4)
    torch.testing.assert_close(outputs["absorbed"], outputs["naive"], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(outputs["expand_on_read"], outputs["naive"], atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("keys", [2, 7, 33])
def test_decode_macs_formula_matches_the_counter(nb, keys):
    for form in nb["MLA_FORMS"]:
        assert nb["decode_macs"](nb["mla_cfg"], form, keys) == nb["counted_macs"](form, keys), form


def test_deepseek_v3_numbers(nb):
    d = nb["DEEPSEEK_V3"]
    assert (nb["mla_elements"](d), nb["expanded_elements"](d)) == (576, 40_960)
    assert nb["DEEPSEEK_MEMORY"]["mla_latent"] * d.layers * 2 == 70_272       # bytes per token, 61 layers, BF16


def test_keep_top_keeps_the_newest_and_the_best(nb):
    scores = torch.tensor([[[5.0, 0.0, 9.0, 1.0, 3.0, 2.0, 0.5, 0.1]]])
    assert nb["keep_top"](scores, 4, newest=2).tolist() == [[[0, 2, 6, 7]]]
    assert nb["keep_top"](scores, 3, newest=0).tolist() == [[[0, 2, 4]]]


def test_budget_cache_compresses_once_per_head(nb):
    cache = nb["BudgetKV"](nb["h2o"], budget=3)
    k, v = kv(range(6))
    cache.update(k, v, torch.arange(6))
    weights = torch.zeros(1, 2, 6, 6)
    weights[0, 0, :, 1], weights[0, 0, :, 2] = 1.0, 0.5                  # head 0 favours keys 1 and 2
    weights[0, 1, :, 4], weights[0, 1, :, 0] = 1.0, 0.5                  # head 1 favours keys 4 and 0
    cache.observe(weights)                                               # budget 3: the newest (5) + the two best
    assert cache.positions.tolist() == [[[1, 2, 5], [0, 4, 5]]]
    assert cache.k[0, :, :, 0].tolist() == cache.positions[0].double().tolist()
    cache.update(*kv([6]), torch.tensor([6]))
    cache.observe(torch.ones(1, 2, 1, 4))                                # only the prompt is compressed
    assert cache.positions.tolist()[0][0][-1] == 6 and cache.k.shape[-2] == 4


def test_budget_cache_keeps_everything_within_its_budget(nb):
    cache = nb["BudgetKV"](nb["random_eviction"], budget=6)
    cache.update(*kv(range(6)), torch.arange(6))
    cache.observe(torch.rand(1, 2, 6, 6))
    assert cache.positions.tolist() == list(range(6))


def test_random_eviction_and_models_depend_only_on_the_seed(nb):
    weights = torch.rand(2, 3, 5, 40)
    assert torch.equal(nb["random_eviction"](weights, 10), nb["random_eviction"](weights, 10))
    one, two = (nb["build"](nb["mla_cfg"], lambda i: nb["AbsorbedMLA"](nb["mla_cfg"])) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(one.state_dict().values(), two.state_dict().values()))


def test_shared_pairs_borrow_the_lower_layers_weights(nb):
    shared = nb["build"](nb["six_cfg"], nb["shared_pairs"]).state_dict()
    ordinary = nb["build"](nb["six_cfg"]).state_dict()
    assert set(ordinary) - set(shared) == {f"blocks.{i}.attn.{p}.weight" for i in (1, 3, 5) for p in ("k", "v")}
    assert all(torch.equal(shared[name], ordinary[name]) for name in shared)


def test_the_eviction_control_on_other_prompts(nb):
    """Random eviction does worse than both policies, with favourites, on prompts the notebook does not use."""
    for seed in (11, 12):
        prompts = torch.randint(0, 97, (2, nb["PROMPT_LEN"]), generator=torch.Generator().manual_seed(seed))
        runs = nb["eviction_sweep"](prompts, 8, [16, 32], nb["QUERY_BIASES"]["favourites"])
        assert min(nb["random_error_ratios"](runs).values()) > 1.0, seed


def test_sink_cache_bytes_count_the_sinks_and_the_ring(nb):
    cache = nb["SinkRingKV"](3, 5)
    cache.update(*kv(range(20)), torch.arange(20))
    assert cache.nbytes() == (3 + 5) * 2 * 2 * 3 * 8                       # K and V, 2 heads of 3, FP64


@pytest.mark.parametrize("sinks, window, query, text", [(2, 3, 10, [0, 1, 8, 9, 10]), (0, 5, 3, [0, 1, 2, 3]),
                                                        (6, 2, 4, [0, 1, 2, 3, 4]), (1, 1, 7, [0, 7])])
def test_a_query_reads_the_sinks_and_its_window_numbered_from_0(nb, sinks, window, query, text):
    assert nb["read_and_numbered"](sinks, window, query) == (text, list(range(len(text))))
