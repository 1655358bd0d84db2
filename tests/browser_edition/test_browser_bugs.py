"""Subtle cache bugs, injected into the browser edition's own code, stop it by its own assertions.

Each bug edits the text of a section file, as a careless edit would: the toy layer, the offset mask, the
single head of section 6 and the exercises' window mask; never the negative controls (the upper-left
triangle and the restarted positions are wrong on purpose). The harness is `tests/bug_injection.py`: it
forks and execs the notebook's cells in this process, which works for a NumPy-only notebook as for the
others (nothing here needs transformers).
"""

from __future__ import annotations

from bug_injection import bug, bug_tests, stopped

NOTEBOOK = "infra-benchmark/kv-cache-browser"
BUGS = {
    "positions restart at zero": bug(
        "02_six_token_example.py",
        ("        pos_start = past_len\n", "        pos_start = 0\n")),
    "positions one short of the cache length": bug(
        "02_six_token_example.py",
        ("        pos_start = past_len\n", "        pos_start = max(past_len - 1, 0)\n")),
    "mask without the offset": bug(
        "02_six_token_example.py",
        ("    query_pos = past_len + np.arange(new_len)", "    query_pos = np.arange(new_len)")),
    "mask one key too far": bug(
        "02_six_token_example.py",
        ("    return key_pos[None, :] <= query_pos[:, None]", "    return key_pos[None, :] <= query_pos[:, None] + 1")),
    "new keys before the cached ones": bug(
        "02_six_token_example.py",
        ("k = np.concatenate([cache[0], k_new], axis=2)", "k = np.concatenate([k_new, cache[0]], axis=2)")),
    "in-place write into the cache": bug(
        "02_six_token_example.py",
        ("        v = np.concatenate([cache[1], v_new], axis=2)\n",
         "        v = np.concatenate([cache[1], v_new], axis=2)\n        cache[1][..., :1, :] *= 1.001\n")),
    "softmax over the queries": bug(
        "02_six_token_example.py",
        ("    return weights / weights.sum(axis=-1, keepdims=True)",
         "    return weights / weights.sum(axis=-2, keepdims=True)")),
    "single head: cache projected with the query weights": bug(
        "06_single_head_attention.py",
        ('"earlier call", Wk1, Wv1)', '"earlier call", Wq1, Wv1)')),
    "single head: chunk starts one row early": bug(
        "06_single_head_attention.py",
        ("chunk = layer_input[HISTORY:]", "chunk = layer_input[max(HISTORY - 1, 0):HISTORY - 1 + CHUNK]")),
    "single head: lower-right mask without the offset": bug(
        "06_single_head_attention.py",
        ("cached_out = single_head_attention(q_new, k_cat, v_cat, allowed_keys(HISTORY, CHUNK))",
         "cached_out = single_head_attention(q_new, k_cat, v_cat, upper_left_mask(HISTORY, CHUNK))")),
    "window counted from the local index": bug(
        "07_takeaways_exercises.py",
        ("    query_pos = past_len + np.arange(new_len)\n    key_pos = np.arange(past_len + new_len)\n"
         "    return allowed_keys(past_len, new_len) & (key_pos[None, :] > query_pos[:, None] - window)",
         "    query_pos = np.arange(new_len)\n    key_pos = np.arange(past_len + new_len)\n"
         "    return allowed_keys(past_len, new_len) & (key_pos[None, :] > query_pos[:, None] - window)")),
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)


def test_a_harmless_edit_runs_to_the_end(runners):
    """The harness can report a survivor: an edit that changes nothing the notebook computes is no stop."""
    harmless = bug("02_six_token_example.py", ("    positions = pos_start + np.arange(new_len)",
                                               "    positions = (pos_start + np.arange(new_len))"))
    report = runners(False).run(harmless)
    assert report == {"outcome": "ran to the end"} and not stopped(report, harmless)
