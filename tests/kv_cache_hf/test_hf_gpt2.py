"""Section 10: our decoder against transformers.GPT2LMHeadModel, and the three traps it must catch."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from .appendix import appendix_cells, run_appendix  # noqa: E402

TOL = 1e-10
SHORT_CHUNKS = [7, 1, 1, 4, 1, 18]          # 32 tokens: prefill, single steps, multi-token chunks


def test_pinned_transformers_version(nb):
    requirements = Path(__file__).resolve().parents[2] / "requirements.txt"
    pinned = [line.split("==")[1].strip() for line in requirements.read_text().splitlines()
              if line.startswith("transformers==")]
    assert pinned == [transformers.__version__] == [nb["PINNED_TRANSFORMERS"]]
    assert nb["HAVE_TRANSFORMERS"] is True


def test_config_mapping(nb):
    c, cfg = nb["hf_config"], nb["cfg"]
    assert (c.vocab_size, c.n_embd, c.n_head, c.n_layer, c.n_inner, c.n_positions) == (97, 64, 4, 2, 256, 512)
    assert (c.vocab_size, c.n_embd, c.n_head, c.n_layer, c.n_inner, c.n_positions) == (
        cfg.vocab, cfg.width, cfg.heads, cfg.layers, cfg.mlp, cfg.max_positions)
    assert c.activation_function == "gelu" and c.layer_norm_epsilon == 1e-5
    assert c.resid_pdrop == c.embd_pdrop == c.attn_pdrop == 0.0
    assert c.tie_word_embeddings is False
    for token in (c.bos_token_id, c.eos_token_id, c.pad_token_id):
        assert token is None or 0 <= token < cfg.vocab
    assert c.scale_attn_weights and not c.scale_attn_by_inverse_layer_idx and not c.reorder_and_upcast_attn
    assert c._attn_implementation == "eager"
    gpt2 = nb["gpt2_64"]
    assert gpt2.config._attn_implementation == "eager" and not gpt2.training
    assert gpt2.lm_head.weight is not gpt2.transformer.wte.weight


def test_weight_layout(nb):
    ours, sd = nb["ours64"], nb["gpt2_state_dict"](nb["ours64"])
    attn = ours.blocks[1].attn
    c_attn = sd["transformer.h.1.attn.c_attn.weight"]
    assert tuple(c_attn.shape) == (64, 192)                                       # Conv1D: [in, out]
    for part, linear in zip(c_attn.split(64, dim=1), (attn.q, attn.k, attn.v)):
        assert torch.equal(part, linear.weight.T)                                 # nn.Linear: [out, in]
    assert torch.equal(sd["transformer.h.1.attn.c_attn.bias"], torch.cat([attn.q.bias, attn.k.bias, attn.v.bias]))
    assert torch.equal(sd["transformer.h.1.attn.c_proj.weight"], attn.proj.weight.T)
    assert torch.equal(sd["transformer.h.1.mlp.c_fc.weight"], ours.blocks[1].mlp.fc.weight.T)
    assert torch.equal(sd["lm_head.weight"], ours.lm_head.weight)                 # a plain Linear in GPT-2 too
    assert set(sd) == set(nb["gpt2_64"].state_dict())


def test_notebook_comparison_agrees(nb):
    errors = nb["peer_errors"]
    assert nb["agrees"](errors)
    assert max(errors["full_logits"], errors["cached_logits"], *errors["k"], *errors["v"]) <= TOL
    assert len(errors["k"]) == len(errors["v"]) == 2
    assert nb["peer_ids"].shape == (2, 512) and sum(nb["PEER_CHUNKS"]) == 512


def test_correct_mapping_agrees_for_other_weights(nb):
    """The mapping holds for a decoder with other random weights, another batch size and other chunks."""
    ours = nb["build_model"](seed=123).to(torch.float64)
    gpt2 = nb["build_gpt2"](ours)
    ids = torch.randint(0, 97, (1, sum(SHORT_CHUNKS)), generator=torch.Generator().manual_seed(5))
    errors = nb["compare_with_gpt2"](ours, gpt2, ids, SHORT_CHUNKS)
    assert nb["agrees"](errors), errors


def test_cache_is_a_dynamic_cache_grown_in_place(nb):
    gpt2, ours = nb["gpt2_64"], nb["ours64"]
    ids = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(6))
    cache = transformers.DynamicCache(config=gpt2.config)
    with torch.inference_mode():
        first = gpt2(input_ids=ids[:, :4], past_key_values=cache, use_cache=True)
        second = gpt2(input_ids=ids[:, 4:], past_key_values=cache, use_cache=True)
        _, ours_cache = ours(ids)
    assert first.past_key_values is cache and second.past_key_values is cache
    assert cache.get_seq_length() == 6 and len(cache.layers) == 2
    for layer, (k, v) in zip(cache.layers, ours_cache):
        assert layer.keys.shape == k.shape == (2, 4, 6, 16)
        assert (layer.keys - k).abs().max().item() <= TOL and (layer.values - v).abs().max().item() <= TOL


@pytest.mark.parametrize("trap", ["tied_embeddings", "square_without_transpose", "gelu_new"])
def test_notebook_traps_caught(nb, trap):
    assert not nb["agrees"](nb["trap_errors"][trap])


def short_ids():
    return torch.randint(0, 97, (2, sum(SHORT_CHUNKS)), generator=torch.Generator().manual_seed(7))


def test_trap_tied_embeddings_detected(nb):
    ours = nb["ours64"]
    tied = nb["build_gpt2"](ours, tie_word_embeddings=True)
    assert tied.lm_head.weight is tied.transformer.wte.weight                 # loads without any error
    errors = nb["compare_with_gpt2"](ours, tied, short_ids(), SHORT_CHUNKS)
    assert not nb["agrees"](errors)
    assert errors["full_logits"] > 1e-3


def test_trap_square_weight_without_transpose_detected(nb):
    ours = nb["ours64"]
    wrong = nb["gpt2_state_dict"](ours)
    wrong["transformer.h.1.attn.c_proj.weight"] = ours.blocks[1].attn.proj.weight.detach().clone()
    gpt2 = nb["build_gpt2"](ours, state_dict=wrong)                          # square: loads without complaint
    errors = nb["compare_with_gpt2"](ours, gpt2, short_ids(), SHORT_CHUNKS)
    assert not nb["agrees"](errors)
    assert errors["full_logits"] > 1e-3


def test_non_square_weight_without_transpose_refused(nb):
    ours = nb["ours64"]
    wrong = nb["gpt2_state_dict"](ours)
    wrong["transformer.h.0.mlp.c_proj.weight"] = ours.blocks[0].mlp.proj.weight.detach().clone()
    with pytest.raises(RuntimeError, match="size mismatch"):
        nb["build_gpt2"](ours, state_dict=wrong)


def test_trap_gelu_new_detected_though_tiny(nb):
    ours = nb["ours64"]
    gpt2 = nb["build_gpt2"](ours, activation_function="gelu_new")
    errors = nb["compare_with_gpt2"](ours, gpt2, short_ids(), SHORT_CHUNKS)
    worst = max(errors["full_logits"], errors["cached_logits"])
    assert not nb["agrees"](errors)
    assert TOL < worst < 1e-3                                                 # tiny, yet far above 1e-10
    assert nb["agrees"](errors, tol=1e-3)                                     # a loose tolerance misses it


def test_results_json_peer_block(nb, base_dir):
    results = json.loads((base_dir / "results.json").read_text(encoding="utf-8"))
    assert list(results)[-1] == "peer"
    assert {"schema_version", "equivalence", "timing"} <= set(results)         # section 9's content kept
    peer = results["peer"]
    assert peer["transformers"] == transformers.__version__ and peer["tolerance"] == TOL
    assert peer["dtype"] == "fp64" and peer["attn_implementation"] == "eager" and peer["agrees"] is True
    errors = peer["max_abs_error"]
    assert max(errors["full_logits"], errors["cached_logits"], *errors["k"], *errors["v"]) <= TOL
    assert set(peer["traps"]) == {"tied_embeddings", "square_without_transpose", "gelu_new"}
    assert all(trap["caught"] for trap in peer["traps"].values())
    gelu = peer["gelu_new"]["logit_error"]
    assert gelu["MLP inputs x 0.1"]["fp64_gelu_new"] > TOL                   # FP64 sees it ...
    assert gelu["MLP inputs x 0.1"]["fp32_gelu_new"] < peer["gelu_new"]["fp32_tolerance"]   # ... FP32 does not
    timing = peer["timing"]
    assert (timing["prompt_tokens"], timing["continuation_tokens"], timing["threads"]) == (256, 16, 1)
    assert (timing["warmups"], timing["repeats"]) == (1, 3)                    # QUICK
    for side in ("ours_ms", "gpt2_ms"):
        assert len(timing[side]["samples"]) == timing["repeats"] and timing[side]["p50"] > 0
    assert math.isfinite(timing["p50_ratio_gpt2_over_ours"]) and timing["p50_ratio_gpt2_over_ours"] > 0
    assert not (base_dir / "results.json.tmp").exists()


def test_skips_cleanly_without_transformers(base, base_dir, tmp_path, monkeypatch, capsys):
    shutil.copy(base_dir / "results.json", tmp_path / "results.json")
    before = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    before.pop("peer", None)
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.setitem(sys.modules, name, None)                         # `import transformers` fails
    namespace = dict(base, OUTPUT_DIR=str(tmp_path))
    run_appendix(namespace)
    assert namespace["HAVE_TRANSFORMERS"] is False
    out = capsys.readouterr().out
    assert "transformers is not installed" in out
    after = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert after.pop("peer") == {"skipped": namespace["SKIP_NOTE"]}
    assert after == before


class CacheWithoutConfig(transformers.DynamicCache):
    """Like releases whose DynamicCache does not take `config=`."""

    def __init__(self):
        super().__init__()


class CacheWithoutLayers(transformers.DynamicCache):
    """Like releases that keep K/V in `key_cache` / `value_cache` lists instead of `layers`."""

    @property
    def layers(self):
        raise AttributeError("'DynamicCache' object has no attribute 'layers'")

    @layers.setter
    def layers(self, value):
        pass


@pytest.mark.parametrize("old_cache", [CacheWithoutConfig, CacheWithoutLayers])
def test_skips_cleanly_without_the_cache_api(old_cache, base, base_dir, tmp_path, monkeypatch, capsys):
    """A transformers whose cache API differs gets one printed sentence per cell and no traceback."""
    shutil.copy(base_dir / "results.json", tmp_path / "results.json")
    before = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    before.pop("peer", None)
    # what the appendix's `from transformers import DynamicCache` gets (an earlier test may have re-imported
    # the package, so patch the module in sys.modules rather than this file's `transformers`)
    monkeypatch.setattr(sys.modules["transformers"], "DynamicCache", old_cache)
    namespace = dict(base, OUTPUT_DIR=str(tmp_path))
    run_appendix(namespace)
    assert namespace["HAVE_TRANSFORMERS"] is False
    note = namespace["SKIP_NOTE"]
    assert note.startswith(f"transformers {transformers.__version__} lacks the cache API this appendix uses (")
    assert note.endswith("the appendix is skipped.") and "\n" not in note
    assert "4.57.1" in note and "5.23.0" in note
    assert "gpt2_64" not in namespace and "peer_errors" not in namespace     # nothing past the guard ran
    lines = capsys.readouterr().out.splitlines()
    assert lines.count(note) == sum(1 for cell in appendix_cells() if "print(SKIP_NOTE)" in cell.source)
    after = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert after.pop("peer") == {"skipped": note}
    assert after == before


def test_cache_api_probe_passes_on_this_version(nb):
    assert nb["cache_api_problem"]() is None and nb["SKIP_NOTE"] is None
