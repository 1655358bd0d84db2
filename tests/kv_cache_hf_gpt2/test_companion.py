"""The companion notebook's functions on inputs it does not use: the mapping and the traps the comparison
must catch, the GELU curves and the configuration's defaults (moved here from the notebook, which shows
them as tables), DynamicCache and crop(), the step profile, the timing race's protocol, the skip path, and
that the decoder and the mapping are included, not copied. The notebook's own bugs are in
test_bug_injection.py."""

from __future__ import annotations

import copy
import json
import re
import sys

import pytest
import torch

from notebook_code import bilingual_stand_ins, manifest_sections, run_notebook_code

from .companion import FOLDER, MAIN, NOTEBOOK, section_paths

transformers = pytest.importorskip("transformers")

TOL = 1e-10
SHORT_CHUNKS = [7, 1, 1, 4, 1, 18]
MAPPING = ("gpt2_config", "gpt2_state_dict", "build_gpt2", "compare_with_gpt2")


def short_ids():
    return torch.randint(0, 97, (2, sum(SHORT_CHUNKS)), generator=torch.Generator().manual_seed(7))


def test_manifest_includes_the_decoder_and_the_mapping_of_the_main_notebook():
    sections = manifest_sections(NOTEBOOK)
    assert sections[:6] == ["01_setup.py", "../kv-cache/01_setup_environment.py", "../kv-cache/01_setup_helpers.py",
                            "../kv-cache/03_masks.py", "../kv-cache/05_decoder.py", "../kv-cache/10_hf_gpt2_referee.py"]
    assert all(path.exists() for path in section_paths())
    own = "\n".join(path.read_text(encoding="utf-8") for path in FOLDER.glob("[0-9][0-9]_*.py"))
    for name in MAPPING + ("CacheDecoder", "causal_mask"):
        assert not re.search(rf"^(def|class) {name}\b", own, re.M), f"{name} is defined in the companion too"
    main = (MAIN / "10_hf_gpt2_referee.py").read_text(encoding="utf-8")
    assert all(f"def {name}(" in main for name in MAPPING)


def test_trap_tied_embeddings_detected(nb):
    ours = nb["ours64"]
    tied = nb["build_gpt2"](ours, tie_word_embeddings=True)
    assert tied.lm_head.weight is tied.transformer.wte.weight
    errors = nb["compare_with_gpt2"](ours, tied, short_ids(), SHORT_CHUNKS)
    assert not nb["agrees"](errors) and errors["full_logits"] > 1e-3


def test_trap_square_weight_without_transpose_detected(nb):
    ours = nb["ours64"]
    wrong = nb["gpt2_state_dict"](ours)
    wrong["transformer.h.1.attn.c_proj.weight"] = ours.blocks[1].attn.proj.weight.detach().clone()
    errors = nb["compare_with_gpt2"](ours, nb["build_gpt2"](ours, state_dict=wrong), short_ids(), SHORT_CHUNKS)
    assert not nb["agrees"](errors) and errors["full_logits"] > 1e-3
    assert max(errors["k"][0], errors["v"][0]) <= TOL                   # layer 1's mistake, layer 0's cache intact


def test_non_square_weight_without_transpose_refused(nb):
    ours = nb["ours64"]
    wrong = nb["gpt2_state_dict"](ours)
    wrong["transformer.h.0.mlp.c_proj.weight"] = ours.blocks[0].mlp.proj.weight.detach().clone()
    with pytest.raises(RuntimeError, match="size mismatch"):
        nb["build_gpt2"](ours, state_dict=wrong)


def test_trap_gelu_new_detected_though_tiny(nb):
    ours = nb["ours64"]
    errors = nb["compare_with_gpt2"](ours, nb["build_gpt2"](ours, activation_function="gelu_new"), short_ids(),
                                     SHORT_CHUNKS)
    worst = max(errors["full_logits"], errors["cached_logits"])
    assert not nb["agrees"](errors) and TOL < worst < 1e-3
    assert nb["agrees"](errors, tol=1e-3)                               # a loose tolerance misses it


def test_dynamic_cache_object_grows_tensors_are_replaced(nb):
    """update() concatenates with torch.cat: a new tensor per call, the old one untouched."""
    gpt2, ours = nb["gpt2_64"], nb["ours64"]
    ids = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(6))
    cache = transformers.DynamicCache(config=gpt2.config)
    with torch.inference_mode():
        gpt2(input_ids=ids[:, :4], past_key_values=cache, use_cache=True)
        old = [(layer.keys, layer.values) for layer in cache.layers]
        saved = [(k.clone(), v.clone()) for k, v in old]
        out = gpt2(input_ids=ids[:, 4:], past_key_values=cache, use_cache=True)
        _, ours_cache = ours(ids)
    assert out.past_key_values is cache and cache.get_seq_length() == 6
    for layer, (k_old, v_old), (k_saved, v_saved), (k, v) in zip(cache.layers, old, saved, ours_cache):
        assert layer.keys is not k_old and torch.equal(k_old, k_saved) and torch.equal(v_old, v_saved)
        assert layer.keys.shape == k.shape == (2, 4, 6, 16)
        assert (layer.keys - k).abs().max().item() <= TOL and (layer.values - v).abs().max().item() <= TOL


@pytest.mark.parametrize("prefix, removed", [(1, 5), (17, 1), (64, 40)])
def test_crop_matches_our_truncated_cache(nb, prefix, removed):
    """crop(-n) on a DynamicCache == slicing our cache to its first `prefix` positions, for other lengths."""
    gpt2, ours, truncate = nb["gpt2_64"], nb["ours64"], nb["truncate"]
    ids = torch.randint(0, 97, (1, prefix + removed + 3), generator=torch.Generator().manual_seed(prefix))
    with torch.inference_mode():
        cache = transformers.DynamicCache(config=gpt2.config)
        gpt2(input_ids=ids[:, :prefix + removed], past_key_values=cache, use_cache=True)
        cache.crop(-removed)
        _, ours_cache = ours(ids[:, :prefix + removed])
        ours_cache = truncate(ours_cache, prefix)
        assert cache.get_seq_length() == ours_cache[0][0].shape[2] == prefix
        for layer, (k, v) in zip(cache.layers, ours_cache):
            assert (layer.keys - k).abs().max().item() <= TOL and (layer.values - v).abs().max().item() <= TOL
        tail = ids[:, prefix + removed:]
        hf_logits = gpt2(input_ids=tail, past_key_values=cache, use_cache=True).logits
        ours_logits, _ = ours(tail, ours_cache)
        full, _ = ours(torch.cat([ids[:, :prefix], tail], dim=1))
    assert (hf_logits - ours_logits).abs().max().item() <= TOL
    assert (ours_logits - full[:, prefix:]).abs().max().item() <= TOL


def test_deep_copy_keeps_the_prefix(nb):
    gpt2 = nb["gpt2_64"]
    ids = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        cache = transformers.DynamicCache(config=gpt2.config)
        gpt2(input_ids=ids[:, :8], past_key_values=cache, use_cache=True)
        prefix = copy.deepcopy(cache)
        gpt2(input_ids=ids[:, 8:], past_key_values=cache, use_cache=True)
    assert prefix.get_seq_length() == 8 and cache.get_seq_length() == 12


def test_timing_race_protocol(nb):
    """Protocol only (timing is reported, never asserted): every measured round ran, and no round extended the
    prefix cache the library's rounds start from (each took a deep copy)."""
    assert (nb["WARMUPS"], nb["REPEATS"]) == (1, 5)
    assert all(len(s) == nb["REPEATS"] for s in nb["race_samples"].values())
    assert nb["gpt2_prefix"].get_seq_length() == nb["PEER_PROMPT"] == 256
    assert all(torch.equal(k, k2) for (k, _), (k2, _) in zip(nb["ours_prefix"], nb["model"](nb["race_prompt"])[1]))


def test_step_profile_counts_the_same_matrix_arithmetic_for_a_chunk(nb):
    """profile_step on a step the notebook does not profile (a 3-token chunk): both models do the same
    matrix-product FLOPs, the count grows with the chunk, and the Python calls are grouped by file."""
    model, gpt2, prefix = nb["model"], nb["gpt2_32"], nb["gpt2_prefix"]
    chunk = torch.randint(0, 97, (1, 3), generator=torch.Generator().manual_seed(5))
    caches = [copy.deepcopy(prefix) for _ in range(5)]
    with torch.inference_mode():
        ours = nb["profile_step"](lambda: model(chunk, nb["ours_prefix"]), steps=2)
        theirs = nb["profile_step"](lambda: gpt2(input_ids=chunk, past_key_values=caches.pop(), use_cache=True),
                                    steps=2)
    assert ours["matmul_flops"] == theirs["matmul_flops"] > nb["step_profile"]["ours"]["matmul_flops"]
    assert sum(ours["python"].values()) == ours["python_calls"] and "torch/nn/modules/module.py" in ours["python"]


@pytest.mark.parametrize("file, label", [("~", "<built-in>"), ("/usr/lib/python3.11/dataclasses.py", "dataclasses.py"),
                                         ("/x/site-packages/transformers/cache_utils.py", "transformers/cache_utils.py"),
                                         ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py",
                                          "torch/nn/modules/module.py"),
                                         ("/tmp/ipykernel_123/456.py", "<cell>"), ("05_decoder.py", "<cell>")])
def test_source_of(nb, file, label):
    assert nb["source_of"](file) == label


def test_configuration_defaults_the_notebook_explains(nb):
    """Section 5's reasons, as facts of the pinned library: the defaults describe GPT-2 small."""
    default, ours = transformers.GPT2Config(), nb["hf_config"]
    assert (default.n_embd, default.n_layer, default.n_head, default.vocab_size) == (768, 12, 12, 50257)
    assert default.n_inner is None and ours.n_inner == nb["cfg"].mlp == 4 * nb["cfg"].width
    assert default.activation_function == "gelu_new" and default.tie_word_embeddings
    assert torch.nn.LayerNorm(64).eps == default.layer_norm_epsilon == ours.layer_norm_epsilon == 1e-5
    assert default.bos_token_id == default.eos_token_id == 50256 >= nb["cfg"].vocab
    assert ours.resid_pdrop == ours.embd_pdrop == ours.attn_pdrop == 0.0
    for block in nb["gpt2_64"].transformer.h:
        assert block.attn.head_dim == 16 and block.attn.scale_attn_weights
        assert not block.attn.scale_attn_by_inverse_layer_idx and block.attn.scaling == 16 ** -0.5
    assert sum(p.numel() for p in nb["gpt2_64"].parameters()) == sum(p.numel() for p in nb["ours64"].parameters())


def test_gelu_curves():
    """The exact GELU of transformers is nn.GELU's kernel; the erf formula agrees within FP64 tolerance; the
    tanh approximation differs by a few 1e-4 at most, most between |x| = 2 and 3, and little near zero."""
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    exact, tanh = transformers.activations.ACT2FN["gelu"], transformers.activations.ACT2FN["gelu_new"]
    assert torch.equal(exact(x), torch.nn.GELU()(x))
    assert (exact(x) - 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))).abs().max() < 1e-10
    gap = (tanh(x) - exact(x)).abs()
    assert 1e-4 < gap.max() < 1e-3 and 2 <= x[gap.argmax()].abs() <= 3
    assert gap[x.abs() <= 0.5].max() < gap.max() / 10


def test_conv1d_computes_x_at_w_plus_b(nb):
    c_proj = nb["gpt2_64"].transformer.h[1].attn.c_proj
    x = torch.randn(5, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    with torch.inference_mode():
        assert (c_proj(x) - (x @ c_proj.weight + c_proj.bias)).abs().max() < 1e-12
        assert (c_proj(x) - nb["ours64"].blocks[1].attn.proj(x)).abs().max() < 1e-12


def test_every_say_and_table_in_both_languages(tmp_path):
    said = []                                     # the stand-ins assert both languages on every call
    run_notebook_code(NOTEBOOK, **bilingual_stand_ins(said), QUICK=True, OUTPUT_DIR=str(tmp_path))
    assert any("table" not in s for s in said) and any("table" in s for s in said)


def test_skip_without_transformers(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.setitem(sys.modules, name, None)
    shown = []
    namespace = run_notebook_code(NOTEBOOK, **bilingual_stand_ins(shown), QUICK=True, OUTPUT_DIR=str(tmp_path))
    assert namespace["HAVE_TRANSFORMERS"] is False
    note = {"en": "transformers is not installed, so the comparison with Hugging Face GPT-2 is skipped.",
            "zh": "没有安装 transformers，因此跳过与 Hugging Face GPT-2 的比较。"}
    assert namespace["SKIP_NOTE"].startswith("ModuleNotFoundError: ")   # the library's error, for the results file
    # section 4's note is the last thing the run shows: no table, no later sentence
    assert shown[shown.index(note):] == [note]
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["peer"] == {"skipped": namespace["SKIP_NOTE"]}
    assert list(results) == ["schema_version", "notebook", "created_at", "quick", "environment", "config", "peer"]
