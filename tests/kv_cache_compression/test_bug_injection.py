"""Subtle bugs injected into the compression notebook's own code must stop it with its own assertions.

Each bug edits the text of one of the notebook's section files, as a careless edit would: the model, its
caches, the MLA forms, the masks, the streaming rule, the eviction policies, the formulas, and a check itself
(a check made vacuous must be stopped by its negative control); never the negative controls (wrong on purpose)
and never the tests. The harness is `tests/bug_injection.py`. The decoder,
its attention functions, layer caches, rotary embedding and ring buffer are section files of the architectures
notebook that this notebook includes (02_attention.py, 02_layer_cache.py, 02_decoder.py, 03_rotary.py,
04_ring_cache.py): a bug there must stop this notebook too.

Every bug runs without `transformers`: the notebook must catch it on its own, since a reader may lack the
package. The exception, marked `only_referee`: mistakes that make a self-consistent model (the cached path and
the full path agree, and so do the absorbed and naive forms), which only the Hugging Face referees are there
to see. They run with `transformers` only (skipped where it is not installed). Without it, some still stop
the notebook, but by accident (they shift the eviction sweep's margins), so they are not counted on there.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests

from .conftest import NOTEBOOK

BUGS = {
    # ---- section 2: the decoder, its caches, the check ------------------------------------------------------
    "decoder: every call numbered from 0": bug(
        "02_decoder.py",
        ("positions = cache[0].seen + torch.arange(ids.shape[1])",
         "positions = torch.arange(ids.shape[1])")),
    "full cache: reordered concatenation of K": bug(
        "02_layer_cache.py",
        ("self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)",
         "self.k = k if self.k is None else torch.cat((k, self.k), dim=-2)")),
    "full cache: in-place write into the cached V": bug(
        "02_layer_cache.py",
        ("        self.positions = torch.cat((self.positions, positions), dim=-1)\n",
         "        self.positions = torch.cat((self.positions, positions), dim=-1)\n        self.v[..., :1, :].mul_(1.001)\n")),
    "ring: writes the chunk before reading": bug(
        "04_ring_cache.py",
        ("        old_k, old_v, old_pos = self.contents()\n"
         "        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)\n"
         "        key_pos = torch.cat((old_pos, positions))\n"
         "        self.write(k, v, positions)\n",
         "        self.write(k, v, positions)\n"
         "        old_k, old_v, old_pos = self.contents()\n"
         "        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)\n"
         "        key_pos = torch.cat((old_pos, positions))\n")),
    "ring: a long chunk writes its oldest positions": bug(
        "04_ring_cache.py",
        ("newest = positions[-self.slots:]",
         "newest = positions[:self.slots]")),
    "ring: slots read in slot order, not oldest first": bug(
        "04_ring_cache.py",
        ("        filled = filled[self.positions[filled].argsort()]\n",
         "")),
    "attention: softmax over the queries": bug(
        "02_attention.py",
        ("return scores.masked_fill(~allowed, float(\"-inf\")).softmax(dim=-1) @ values",
         "return scores.masked_fill(~allowed, float(\"-inf\")).softmax(dim=-2).nan_to_num() @ values")),
    "attention: K/V heads tiled instead of interleaved": bug(
        "02_attention.py",
        ("keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)",
         "keys, values = keys.repeat(1, groups, 1, 1), values.repeat(1, groups, 1, 1)")),
    "rope: rotate_half sign flip": bug(
        "03_rotary.py",
        ("return torch.cat((-x[..., half:], x[..., :half]), dim=-1)",
         "return torch.cat((x[..., half:], -x[..., :half]), dim=-1)"),
        only_referee=True),
    "swiglu: gate and up swapped": bug(
        "02_decoder.py",
        ("return self.down(F.silu(self.gate(x)) * self.up(x))",
         "return self.down(F.silu(self.up(x)) * self.gate(x))"),
        only_referee=True),
    # ---- section 3: MLA --------------------------------------------------------------------------------------
    "mla: RoPE key rotated at chunk-local positions": bug(
        "03_mla.py",
        ("return self.kv_norm(c)[:, None], self.rotary(k_r[:, None], positions)",
         "return self.kv_norm(c)[:, None], self.rotary(k_r[:, None], positions - positions[0])")),
    "mla: query's RoPE part not rotated": bug(
        "03_mla.py",
        ("return q_c, self.rotary(q_r, positions)",
         "return q_c, q_r"),
        only_referee=True),
    "mla: latent cached without its RMSNorm": bug(
        "03_mla.py",
        ("return self.kv_norm(c)[:, None], self.rotary(k_r[:, None], positions)",
         "return c[:, None], self.rotary(k_r[:, None], positions)"),
        only_referee=True),
    "mla: scores scaled by 1/sqrt(d_C) only": bug(
        "03_mla.py",
        ("self.scale = (c.nope_dim + c.rope_dim) ** -0.5",
         "self.scale = c.nope_dim ** -0.5")),
    "absorbed: W_UK and W_UV swapped": bug(
        "03_mla.py",
        ("        w_uk, w_uv = self.up_weights()  ",
         "        w_uv, w_uk = self.up_weights()  ")),
    "absorbed: RoPE term dropped from the scores": bug(
        "03_mla.py",
        ("scores = (q_latent @ latents.transpose(-2, -1) + q_r @ rope_keys.transpose(-2, -1)) * self.scale",
         "scores = (q_latent @ latents.transpose(-2, -1)) * self.scale")),
    "absorbed: W_UV not applied (latent context truncated)": bug(
        "03_mla.py",
        ("context = (weights @ latents) @ w_uv.transpose(-2, -1)",
         "context = (weights @ latents)[..., :self.value_dim]")),
    "absorbed vs naive: the logits compared with themselves": bug(
        "03_mla.py",
        ("logits_passed = close(absorbed_logits, naive_logits)",
         "logits_passed = close(absorbed_logits, absorbed_logits)")),
    "mla memory formula: RoPE key forgotten": bug(
        "03_mla_cost.py",
        ("return c.latent + c.rope_dim                                        # r + d_R",
         "return c.latent                                                     # r + d_R")),
    "mla compute formula: W_UV forgotten": bug("03_mla_cost.py", ("keys * H * r + H * r * dv,", "keys * H * r,")),
    # ---- section 4: local, global and shared layers ------------------------------------------------------------
    "window: band one key too wide (>=)": bug(
        "04_ring_cache.py",
        ("(key_pos[None, :] > query_pos[:, None] - window)",
         "(key_pos[None, :] >= query_pos[:, None] - window)")),
    "window: ring one slot too few": bug(
        "04_ring_cache.py",
        ("return RingKV(self.window - 1)",
         "return RingKV(self.window - 2)")),
    "memory formula: local layers hold W positions": bug(
        "04_local_global_checks.py",
        ("return [min(tokens, window - 1) if kind == \"local\" else tokens for kind in pattern]",
         "return [min(tokens, window) if kind == \"local\" else tokens for kind in pattern]")),
    "shared: the upper layer ignores the mask": bug(
        "04_shared_layers.py",
        ("self.attend(q, keys, values, self.mask(positions, key_pos))",
         "self.attend(q, keys, values, torch.ones(len(positions), len(key_pos), dtype=torch.bool))")),
    "shared: the upper layer keeps its K/V projections and writes into the shared cache": bug(
        "04_shared_layers.py",
        ("        del self.k, self.v\n", ""),
        ("    def forward(self, x, positions, cache):\n"
         "        q = self.rotate(split_heads(self.q(x), self.heads), positions)\n"
         "        keys, values, key_pos = cache.contents()\n"
         "        return self.proj(merge_heads(self.attend(q, keys, values, self.mask(positions, key_pos))))\n", "")),
    "shared: every layer keeps its own cache": bug(
        "04_shared_layers.py",
        ("return Attention(six_cfg) if i % 2 == 0 else SharedKVAttention(six_cfg)",
         "return Attention(six_cfg)")),
    # ---- section 5: attention sinks ---------------------------------------------------------------------------
    "sinks: query rotated at its text position": bug(
        "05_sinks.py",
        ("q = self.rotary(q, allowed.sum(dim=-1) - 1)                                # [B, H, T_new, Dh]",
         "q = self.rotary(q, positions)                                              # [B, H, T_new, Dh]")),
    "sinks: cache positions off by one": bug(
        "05_sinks.py",
        ("return (allowed.long().cumsum(dim=-1) - 1).clamp_min(0)",
         "return allowed.long().cumsum(dim=-1).clamp_min(0)")),
    "sinks: one sink too many kept": bug(
        "05_sinks.py",
        ("is_sink = positions < self.sinks",
         "is_sink = positions <= self.sinks")),
    "sinks: the mask forgets the sinks": bug(
        "05_sinks.py",
        ("return causal(query_pos, key_pos) & ((key_pos[None, :] < sinks) | (key_pos[None, :] > query_pos[:, None] - window))",
         "return causal(query_pos, key_pos) & (key_pos[None, :] > query_pos[:, None] - window)")),
    # ---- section 6: eviction -------------------------------------------------------------------------------------
    "h2o: keeps the least attended keys": bug(
        "06_eviction.py",
        ("return keep_top(weights.sum(dim=-2), budget, newest=budget // 2)",
         "return keep_top(-weights.sum(dim=-2), budget, newest=budget // 2)")),
    "snapkv: observes the first prompt queries": bug(
        "06_eviction.py",
        ("votes = weights[:, :, -window:].sum(dim=-2)",
         "votes = weights[:, :, :window].sum(dim=-2)")),
    "snapkv: keeps the keys the window attends to least": bug(
        "06_eviction.py",
        ("return keep_top(F.max_pool1d(votes, kernel, stride=1, padding=kernel // 2), budget, newest=window)",
         "return keep_top(F.max_pool1d(-votes, kernel, stride=1, padding=kernel // 2), budget, newest=window)")),
    "budget cache: values kept from the first positions, not the chosen ones": bug(
        "06_eviction.py",
        ("self.k.gather(2, index), self.v.gather(2, index), keep",
         "self.k.gather(2, index), self.v[:, :, :self.budget], keep")),
}

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)


def test_every_section_of_the_notebook_has_a_bug():
    files = {found.file for found in BUGS.values()}
    assert {"02_attention.py", "02_decoder.py", "02_layer_cache.py", "03_rotary.py", "03_mla.py", "03_mla_cost.py",
            "04_ring_cache.py", "04_local_global_checks.py", "04_shared_layers.py", "05_sinks.py", "06_eviction.py"} <= files
