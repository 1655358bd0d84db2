"""Subtle bugs injected into the architectures notebook's own code must stop it with its own assertions.

Each bug edits the text of one section file (as a careless edit would): the notebook's model, caches,
rotation, quantizer or attention, never its negative controls (wrong on purpose) and never the tests.
Every bug runs without `transformers` (the notebook must catch it on its own, since a reader may lack the
package); the ones marked `hf` are mistakes that the Hugging Face cross-checks of sections 5 and 6 were
written to see, and also run with `transformers`. The harness is `tests/bug_injection.py`.
"""

from __future__ import annotations

from bug_injection import bug, bug_tests

from .conftest import NOTEBOOK

BUGS = {
    # ---- section 4: GQA, the layer cache, attention ------------------------------------------------
    "gqa: repeat_kv tiles (repeat) instead of interleaving": bug(
        "02_gqa.py",
        ("return x.repeat_interleave(groups, dim=1)",
         "return x.repeat(1, groups, 1, 1)"),
        hf=True),
    "gqa: keys tiled (repeat) in the real path": bug(
        "02_gqa.py",
        ("context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)",
         "context = step.attend(q, keys.repeat(1, groups, 1, 1), step.expand(values, groups), allowed)"),
        hf=True),
    "gqa: K and V tiled (repeat) in the real path": bug(
        "02_gqa.py",
        ("context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)",
         "context = step.attend(q, keys.repeat(1, groups, 1, 1), values.repeat(1, groups, 1, 1), allowed)"),
        hf=True),
    "gqa: the cache stores K/V expanded to H heads": bug(
        "02_gqa.py",
        ("        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]\n"
         "        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]\n"
         "        groups = self.heads // self.kv_heads\n"
         "        context = step.attend(q, step.expand(keys, groups), step.expand(values, groups), allowed)\n",
         "        groups = self.heads // self.kv_heads\n"
         "        k, v = step.expand(k, groups), step.expand(v, groups)\n"
         "        keys, values, key_pos = layer_cache.update(k, v, step.positions)\n"
         "        allowed = step.mask_fn(step.positions, key_pos)\n"
         "        context = step.attend(q, keys, values, allowed)\n")),
    "positions: new tokens numbered from 0 (missing offset)": bug(
        "02_gqa.py",
        ("positions = self.positions_fn(cache[0].seen, new_len)",
         "positions = self.positions_fn(0, new_len)")),
    "positions: offset = keys stored, not tokens seen": bug(
        "02_gqa.py",
        ("positions = self.positions_fn(cache[0].seen, new_len)",
         "positions = self.positions_fn(cache[0].stored(), new_len)")),
    "attention: heads merged without the transpose": bug(
        "02_gqa.py",
        ("context.transpose(1, 2).reshape(batch, new_len, self.heads * self.head_dim)",
         "context.reshape(batch, new_len, self.heads * self.head_dim)")),
    "rmsnorm: eps dropped": bug(
        "02_gqa.py",
        ("torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)",
         "torch.rsqrt(h.pow(2).mean(-1, keepdim=True))"),
        hf=True),
    "swiglu: gate and up swapped": bug(
        "02_gqa.py",
        ("F.silu(self.gate(x)) * self.up(x)",
         "F.silu(self.up(x)) * self.gate(x)"),
        hf=True, only_referee=True),
    "full cache: reordered concatenation of K": bug(
        "02_gqa.py",
        ("self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)",
         "self.k = k if self.k is None else torch.cat((k, self.k), dim=-2)")),
    "full cache: in-place write into the cached V": bug(
        "02_gqa.py",
        ("        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]\n",
         "        values[:, :, :1].mul_(1.001)\n"
         "        allowed = step.mask_fn(step.positions, key_pos)                       # [T_new, T_keys]\n")),
    "attention: scores divided by Dh, not sqrt(Dh)": bug(
        "02_gqa.py",
        ("scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
         "scores = q @ k.transpose(-2, -1) / q.shape[-1]")),
    "payload formula: K or V, not K and V": bug(
        "02_gqa.py",
        ("return 2 * batch * length * layers * kv_heads * head_dim * bytes_per_element",
         "return batch * length * layers * kv_heads * head_dim * bytes_per_element")),
    # ---- section 5: RoPE ---------------------------------------------------------------------------
    "rope: new chunk rotated at chunk-local positions": bug(
        "02_gqa.py",
        ("return x if self.rotary is None else self.rotary(x, self.positions)",
         "return x if self.rotary is None else self.rotary(x, self.positions - self.positions[0])")),
    "rope: V rotated too": bug(
        "02_gqa.py",
        ("q, k = step.rotate(q), step.rotate(k)",
         "q, k, v = step.rotate(q), step.rotate(k), step.rotate(v)"),
        hf=True),
    "rope: K cached before rotation, rotated at read time by cache index": bug(
        "02_gqa.py",
        ("        q, k = step.rotate(q), step.rotate(k)\n"
         "        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]\n",
         "        q = step.rotate(q)\n"
         "        keys, values, key_pos = layer_cache.update(k, v, step.positions)      # [B, H_kv, T_keys, Dh]\n"
         "        if step.rotary is not None:\n"
         "            keys = step.rotary(keys, torch.arange(keys.shape[-2]))\n"),
        hf=True),
    "rope: rotate_half sign flip": bug(
        "03_rope.py",
        ("return torch.cat((-x[..., half:], x[..., :half]), dim=-1)",
         "return torch.cat((x[..., half:], -x[..., :half]), dim=-1)"),
        hf=True),
    "rope: frequencies theta^(-i/D) (missing factor 2)": bug(
        "03_rope.py",
        ("torch.arange(0, head_dim, 2, dtype=angle_dtype) / head_dim",
         "torch.arange(0, head_dim // 2, dtype=angle_dtype) / head_dim"),
        hf=True),
    "rope: angle table interleaved, pairs are halves": bug(
        "03_rope.py",
        ("angles = torch.cat((angles, angles), dim=-1)",
         "angles = angles.repeat_interleave(2, dim=-1)"),
        hf=True),
    # ---- section 6: sliding window and the ring buffer -------------------------------------------------
    "window: band one key too narrow": bug(
        "04_sliding_window.py",
        ("(key_pos[None, :] > query_pos[:, None] - window)",
         "(key_pos[None, :] > query_pos[:, None] - window + 1)"),
        hf=True),
    "ring: one slot too few": bug(
        "04_sliding_window.py",
        ("new_cache = (lambda: RingKV(window - 1)) if ring else FullKV",
         "new_cache = (lambda: RingKV(window - 2)) if ring else FullKV")),
    "ring: one slot too many": bug(
        "04_sliding_window.py",
        ("new_cache = (lambda: RingKV(window - 1)) if ring else FullKV",
         "new_cache = (lambda: RingKV(window)) if ring else FullKV")),
    "ring: slot p % (slots + 1)": bug(
        "04_sliding_window.py",
        ("slot = newest % self.slots",
         "slot = newest % (self.slots + 1)"),
        stops_with="IndexError"),
    "ring: writes the chunk before reading": bug(
        "04_sliding_window.py",
        ("        old_k, old_v, old_pos = self.contents()\n"
         "        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)\n"
         "        key_pos = torch.cat((old_pos, positions))\n",
         "        newest = positions[-self.slots:]\n"
         "        self.k[:, :, newest % self.slots] = k[:, :, -len(newest):]\n"
         "        self.v[:, :, newest % self.slots] = v[:, :, -len(newest):]\n"
         "        self.positions[newest % self.slots] = newest\n"
         "        old_k, old_v, old_pos = self.contents()\n"
         "        keys, values = torch.cat((old_k, k), dim=-2), torch.cat((old_v, v), dim=-2)\n"
         "        key_pos = torch.cat((old_pos, positions))\n")),
    "ring: a long chunk writes its oldest positions": bug(
        "04_sliding_window.py",
        ("newest = positions[-self.slots:]",
         "newest = positions[:self.slots]")),
    "ring: a long chunk stores its oldest keys under its newest positions": bug(
        "04_sliding_window.py",
        ("self.k[:, :, slot] = k[:, :, -len(newest):]",
         "self.k[:, :, slot] = k[:, :, :len(newest)]")),
    "ring: keys paired with reordered positions": bug(
        "04_sliding_window.py",
        ("key_pos = torch.cat((old_pos, positions))",
         "key_pos = torch.cat((positions, old_pos))")),
    "ring: slots read in slot order, not oldest first": bug(
        "04_sliding_window.py",
        ("        filled = filled[self.positions[filled].argsort()]\n",
         "")),
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
        ("attn_mask=causal_lower_right(q.shape[-2], k.shape[-2])",
         "is_causal=True")),
    "sdpa: boolean mask passed as float (additive)": bug(
        "06_fused_attention.py",
        ("return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)",
         "return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed.to(q.dtype))")),
}

# Swapping SwiGLU's gate and up projections gives a model of the same family: with random weights nothing
# inside the notebook can tell, only a referee with Llama's weight convention (the Llama cross-check of
# section 5, with transformers). Kept as a strict xfail without transformers (`only_referee`): the limit,
# on record.
# Writing position 7 into slot 7 of a 7-slot ring fails torch's bounds check inside `RingKV.update`
# (`stops_with="IndexError"`), before the slot layout asserted after the demo update can be read.

runners, test_unmutated_notebook_runs, test_injected_bug_stops_the_notebook = bug_tests(NOTEBOOK, BUGS)
