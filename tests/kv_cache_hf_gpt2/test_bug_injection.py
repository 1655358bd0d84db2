"""Bugs injected into the companion's code must stop it with its own assertions.

Each bug edits the text of a section file, as a careless edit would: the decoder it includes from
infra-benchmark/kv-cache (one of that notebook's own bugs, which the referee must see too; the others are
kv-cache's, and each costs a whole run here), the layout
check, the GELU study, the crop experiment, the race and its profile, and the exercises; never the
negative controls or the traps (wrong on purpose). Every section after the included decoder runs only
with `transformers`, so every bug here is marked `only_referee` and runs with it (skipped where it is not
installed). The harness is `tests/bug_injection.py`.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests

from .companion import NOTEBOOK

BUGS = {
    # ---- the included decoder: the referee of section 4 must see it ---------------------------------------
    "decoder: wrong position": bug(
        "05_decoder.py",
        ("    return past_len + torch.arange(new_len)", "    return torch.arange(new_len)"),
        only_referee=True),
    # ---- section 6: the layout -----------------------------------------------------------------------------
    "layout: c_attn split in the order K, Q, V": bug(
        "06_weight_layout.py",
        ("q, k, v = gpt2_block0.attn.c_attn(x).split(cfg.width, dim=-1)",
         "k, q, v = gpt2_block0.attn.c_attn(x).split(cfg.width, dim=-1)"),
        only_referee=True),
    # ---- section 8: the GELU study -------------------------------------------------------------------------
    "GELU study: the second weight set left unscaled": bug(
        "08_gelu_tolerance.py",
        ("            block.mlp.fc.weight.mul_(0.1)\n            block.mlp.fc.bias.mul_(0.1)",
         "            block.mlp.fc.weight.mul_(1.0)\n            block.mlp.fc.bias.mul_(1.0)"),
        only_referee=True),
    # ---- section 9: DynamicCache and crop ------------------------------------------------------------------
    "crop: one position too few removed": bug(
        "09_dynamic_cache.py",
        ("        hf_cache.crop(-CROP_TOKENS)\n", "        hf_cache.crop(-CROP_TOKENS + 1)\n"),
        only_referee=True),
    "our cache cut at the wrong end": bug(
        "09_dynamic_cache.py",
        ("return [(k[:, :, :length], v[:, :, :length]) for k, v in cache]",
         "return [(k[:, :, -length:], v[:, :, -length:]) for k, v in cache]"),
        only_referee=True),
    # ---- section 10: the race and the profile --------------------------------------------------------------
    "race: GPT-2 fed the previous token": bug(
        "10_timing.py",
        ("out = gpt2(input_ids=continuation[:, t:t + 1], past_key_values=cache, use_cache=True)",
         "out = gpt2(input_ids=continuation[:, max(t - 1, 0):max(t - 1, 0) + 1], past_key_values=cache, use_cache=True)"),
        only_referee=True),
    "profile: every GPT-2 step on one growing cache": bug(
        "10_timing_profile.py",
        ("past_key_values=gpt2_caches.pop(),", "past_key_values=gpt2_caches[0],"),
        only_referee=True),
    # ---- section 12: the exercises -------------------------------------------------------------------------
    "exercise 2: two rejected drafts cropped instead of three": bug(
        "12_takeaways_exercises.py",
        ("        draft_cache.crop(-3)\n", "        draft_cache.crop(-2)\n"),
        only_referee=True),
    "exercise 3: the cache's values forgotten": bug(
        "12_takeaways_exercises.py",
        ("race_cache_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in gpt2_prefix.layers)",
         "race_cache_bytes = sum(layer.keys.nbytes for layer in gpt2_prefix.layers)"),
        only_referee=True),
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)
