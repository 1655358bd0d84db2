"""Subtle bugs injected into the architectures notebook's own code must stop it with its own assertions.

Each bug edits the text of one section file (as a careless edit would): the notebook's model, caches,
rotation, quantizer or attention, never its negative controls (wrong on purpose) and never the tests.
Every bug runs without `transformers` (the notebook must catch it on its own, since a reader may lack the
package); the ones marked `hf` are mistakes that the Hugging Face cross-checks of sections 5 and 6 were
written to see, and also run with `transformers`. The harness is `tests/bug_injection.py`.

The decoder, its attention functions, layer caches, rotary embedding and ring buffer live in section files
that the compression notebook includes too (02_attention.py, 02_layer_cache.py, 02_decoder.py, 03_rotary.py,
04_ring_cache.py); the compression notebook's own bug table injects bugs there as well.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests

from .conftest import NOTEBOOK

UPDATE = "        keys, values, key_pos = cache.update(k, v, positions)                    # [B, H_kv, T_keys, D]\n"
ATTEND = "        context = self.attend(q, keys, values, self.mask(positions, key_pos))    # [B, H, T_new, D]\n"

BUGS = {
    # ---- section 4: GQA, the layer cache, attention ------------------------------------------------
    "gqa: repeat_kv tiles (repeat) instead of interleaving": bug(
        "02_attention.py",
        ("return x.repeat_interleave(groups, dim=1)",
         "return x.repeat(1, groups, 1, 1)"),
        hf=True),
    "gqa: keys tiled (repeat) in the real path": bug(
        "02_attention.py",
        ("keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)",
         "keys, values = keys.repeat(1, groups, 1, 1), repeat_kv(values, groups)"),
        hf=True),
    "gqa: K and V tiled (repeat) in the real path": bug(
        "02_attention.py",
        ("keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)",
         "keys, values = keys.repeat(1, groups, 1, 1), values.repeat(1, groups, 1, 1)"),
        hf=True),
    "gqa: the cache stores K/V expanded to H heads": bug(
        "02_decoder.py",
        (UPDATE, "        k, v = repeat_kv(k, self.heads // self.kv_heads), repeat_kv(v, self.heads // self.kv_heads)\n" + UPDATE)),
    "positions: new tokens numbered from 0 (missing offset)": bug(
        "02_decoder.py",
        ("positions = cache[0].seen + torch.arange(ids.shape[1])",
         "positions = torch.arange(ids.shape[1])")),
    "positions: offset = the cache's length (a ring's slots), not tokens seen": bug(
        "02_decoder.py",
        ("positions = cache[0].seen + torch.arange(ids.shape[1])",
         "positions = len(cache[0].positions) + torch.arange(ids.shape[1])")),
    "attention: heads merged without the transpose": bug(
        "02_attention.py",
        ("return x.transpose(1, 2).reshape(batch, length, heads * dim)",
         "return x.reshape(batch, length, heads * dim)")),
    "rmsnorm: eps hard-coded (1e-6), not the configuration's": bug(
        "02_decoder.py",
        ("nn.RMSNorm(c.width, eps=c.eps)",
         "nn.RMSNorm(c.width, eps=1e-6)"),
        only_referee=True),
    "swiglu: gate and up swapped": bug(
        "02_decoder.py",
        ("F.silu(self.gate(x)) * self.up(x)",
         "F.silu(self.up(x)) * self.gate(x)"),
        only_referee=True),
    "full cache: reordered concatenation of K": bug(
        "02_layer_cache.py",
        ("self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)",
         "self.k = k if self.k is None else torch.cat((k, self.k), dim=-2)")),
    "full cache: in-place write into the cached V": bug(
        "02_decoder.py",
        (ATTEND, "        values[:, :, :1].mul_(1.001)\n" + ATTEND)),
    "attention: scores divided by Dh, not sqrt(Dh)": bug(
        "02_attention.py",
        ("/ math.sqrt(q.shape[-1])",
         "/ q.shape[-1]")),
    "payload: bytes per token times one row's tokens (batch forgotten)": bug(
        "02_gqa_criteria.py",
        ("kv_bytes_per_token(config.layers, kv_heads, config.head_dim, 4) * STREAM.numel()",
         "kv_bytes_per_token(config.layers, kv_heads, config.head_dim, 4) * STREAM.shape[1]")),
    # ---- section 5: RoPE ---------------------------------------------------------------------------
    "rope: new chunk rotated at chunk-local positions": bug(
        "02_decoder.py",
        ("return x if self.rotary is None else self.rotary(x, positions)",
         "return x if self.rotary is None else self.rotary(x, positions - positions[0])")),
    "rope: V rotated too": bug(
        "02_decoder.py",
        ("v = split_heads(self.v(x), self.kv_heads)",
         "v = self.rotate(split_heads(self.v(x), self.kv_heads), positions)"),
        hf=True),
    "rope: queries not rotated": bug(
        "02_decoder.py",
        ("q = self.rotate(split_heads(self.q(x), self.heads), positions)",
         "q = split_heads(self.q(x), self.heads)"),
        hf=True),
    "rope: K cached before rotation, rotated at read time by cache index": bug(
        "02_decoder.py",
        ("k = self.rotate(split_heads(self.k(x), self.kv_heads), positions)",
         "k = split_heads(self.k(x), self.kv_heads)"),
        (UPDATE, UPDATE + "        keys = self.rotate(keys, torch.arange(keys.shape[-2]))\n"),
        hf=True),
    "rope: rotate_half sign flip": bug(
        "03_rotary.py",
        ("return torch.cat((-x[..., half:], x[..., :half]), dim=-1)",
         "return torch.cat((x[..., half:], -x[..., :half]), dim=-1)"),
        hf=True),
    "rope: frequencies theta^(-i/D) (missing factor 2)": bug(
        "03_rotary.py",
        ("torch.arange(0, dim, 2, dtype=angle_dtype) / dim",
         "torch.arange(0, dim // 2, dtype=angle_dtype) / dim"),
        hf=True),
    "rope: angle table interleaved, pairs are halves": bug(
        "03_rotary.py",
        ("angles = torch.cat((angles, angles), dim=-1)",
         "angles = angles.repeat_interleave(2, dim=-1)"),
        hf=True),
    # ---- section 6: sliding window and the ring buffer -------------------------------------------------
    "window: band one key too narrow": bug(
        "04_ring_cache.py",
        ("(key_pos[None, :] > query_pos[:, None] - window)",
         "(key_pos[None, :] > query_pos[:, None] - window + 1)"),
        hf=True),
    "window: the windowed layer keeps the causal mask": bug(
        "04_ring_cache.py",
        ("        return band_mask(query_pos, key_pos, self.window)",
         "        return causal(query_pos, key_pos)")),
    "ring: one slot too few": bug(
        "04_ring_cache.py",
        ("return RingKV(self.window - 1)",
         "return RingKV(self.window - 2)")),
    "ring: one slot too many": bug(
        "04_ring_cache.py",
        ("return RingKV(self.window - 1)",
         "return RingKV(self.window)")),
    "ring: slot p % (slots + 1)": bug(
        "04_ring_cache.py",
        ("slot = newest % self.slots",
         "slot = newest % (self.slots + 1)"),
        stops_with="IndexError"),
    "ring: writes the chunk before reading": bug(
        "04_ring_cache.py",
        ("        old_k, old_v, old_pos = self.contents()\n",
         "        self.write(k, v, positions)\n        old_k, old_v, old_pos = self.contents()\n")),
    "ring: a long chunk writes its oldest positions": bug(
        "04_ring_cache.py",
        ("newest = positions[-self.slots:]",
         "newest = positions[:self.slots]")),
    "ring: a long chunk stores its oldest keys under its newest positions": bug(
        "04_ring_cache.py",
        ("self.k[:, :, slot] = k[:, :, -len(newest):]",
         "self.k[:, :, slot] = k[:, :, :len(newest)]")),
    "ring: keys paired with reordered positions": bug(
        "04_ring_cache.py",
        ("key_pos = torch.cat((old_pos, positions))",
         "key_pos = torch.cat((positions, old_pos))")),
    "ring: slots read in slot order, not oldest first": bug(
        "04_ring_cache.py",
        ("        filled = filled[self.positions[filled].argsort()]\n",
         "")),
    "ring: empty slots read as keys": bug(
        "04_ring_cache.py",
        ("filled = (self.positions >= 0).nonzero().flatten()",
         "filled = torch.arange(self.slots)")),
    # ---- section 7: quantized caches -------------------------------------------------------------------
    "quant: K scales per token (wrong axis)": bug(
        "05_quantized_cache.py",
        ("quantize(k_old, self.bits, dim=-2)",
         "quantize(k_old, self.bits, dim=-1)")),
    "quant: V scales per channel (wrong axis)": bug(
        "05_quantized_cache.py",
        ("quantize(v_old, self.bits, dim=-1)",
         "quantize(v_old, self.bits, dim=-2)")),
    "quant: dequantize without the zero point": bug(
        "05_quantized_cache.py",
        ("return codes.to(scale.dtype) * scale + low",
         "return codes.to(scale.dtype) * scale")),
    "quant: full-precision window one position longer": bug(
        "05_quantized_cache.py",
        ("while self.k_recent.shape[-2] >= self.residual + self.group:",
         "while self.k_recent.shape[-2] > self.residual + self.group:")),
    "quant: truncation instead of rounding": bug(
        "05_quantized_cache.py",
        ("codes = ((x - low) / scale).round()",
         "codes = ((x - low) / scale).floor()")),
    "quant: step (max - min) / 2^b": bug(
        "05_quantized_cache.py",
        ("scale = (high - low).clamp_min(1e-12) / (2 ** bits - 1)",
         "scale = (high - low).clamp_min(1e-12) / 2 ** bits")),
    "quant: groups read after the window": bug(
        "05_quantized_cache.py",
        ("keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)",
         "keys = torch.cat([self.k_recent] + [self.read(g) for g in self.k_groups], dim=-2)")),
    "quant: a call reads its own keys after quantizing them": bug(
        "05_quantized_cache.py",
        ("        keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)\n"
         "        values = torch.cat([self.read(g) for g in self.v_groups] + [self.v_recent], dim=-2)\n",
         "        while self.k_recent.shape[-2] >= self.residual + self.group:\n"
         "            k_old, self.k_recent = self.k_recent[:, :, :self.group], self.k_recent[:, :, self.group:]\n"
         "            v_old, self.v_recent = self.v_recent[:, :, :self.group], self.v_recent[:, :, self.group:]\n"
         "            k_codes, k_scale, k_low = quantize(k_old, self.bits, dim=-2)\n"
         "            v_codes, v_scale, v_low = quantize(v_old, self.bits, dim=-1)\n"
         "            self.k_groups.append((pack(k_codes, self.bits), k_scale, k_low))\n"
         "            self.v_groups.append((pack(v_codes, self.bits), v_scale, v_low))\n"
         "        keys = torch.cat([self.read(g) for g in self.k_groups] + [self.k_recent], dim=-2)\n"
         "        values = torch.cat([self.read(g) for g in self.v_groups] + [self.v_recent], dim=-2)\n")),
    # ---- section 8: fused attention --------------------------------------------------------------------
    "sdpa: is_causal=True in the real path": bug(
        "06_fused_attention.py",
        ("attn_mask=causal_lower_right(q.shape[-2], keys.shape[-2])",
         "is_causal=True")),
    "sdpa: boolean mask passed as float (additive)": bug(
        "06_fused_attention.py",
        ("attn_mask=allowed, enable_gqa=True",
         "attn_mask=allowed.to(q.dtype), enable_gqa=True")),
}

# Swapping SwiGLU's gate and up projections, or hard-coding the RMSNorm's eps, gives a model of the same
# family: with random weights nothing inside the notebook can tell, only a referee with Llama's conventions
# (the Llama cross-check of section 5, with transformers): `only_referee`, they run with transformers only.
# Writing position 7 into slot 7 of a 7-slot ring fails torch's bounds check inside `RingKV.write`
# (`stops_with="IndexError"`), in the first call that wraps the ring (the figure of section 6).

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)
