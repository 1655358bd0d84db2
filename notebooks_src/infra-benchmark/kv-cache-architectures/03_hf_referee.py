# %% [markdown] lang="en"
# <details><summary>The referee's tools (plumbing you can skip).</summary>
#
# `with_hf_precision(net)` returns a copy of our model that computes the RMSNorms
# (`Float32RMSNorm`) and the rotary angles in FP32, as Hugging Face's models do even in FP64; `steps` picks
# which of the two. `hf_fields` holds the configuration fields every referee shares. `copy_weights` loads our
# weights into a Hugging Face model under its names (`names` maps our module names inside a layer to its
# names) and returns the model in FP64. `hf_chunked` is Hugging Face's cached path: one `DynamicCache` built from the model's configuration,
# filled chunk by chunk. `referee_errors` compares a full call, then chunks of 1, 2 and 5: the logits, and every
# tensor the caches hold (Hugging Face's layer caches must hold tensors of the very shapes ours hold).
#
# </details>

# %% [markdown] lang="zh"
# <details><summary>裁判的工具（可以跳过的辅助代码）。</summary>
#
# `with_hf_precision(net)` 返回我们模型的一个副本，它在 FP32 下计算 RMSNorm（`Float32RMSNorm`）和旋转角；Hugging Face 的模型即使在 FP64 下也是这样做的。参数 `steps` 指定复现其中哪几步。`hf_fields` 是所有裁判共用的配置项。`copy_weights` 按 Hugging Face 的参数名把我们的权重加载进它的模型（`names` 给出一层之内我们的模块名到对方模块名的映射），并返回转成 FP64 的模型。`hf_chunked` 是 Hugging Face 的缓存路径：按模型配置构造一个 `DynamicCache`，逐个分块填充。`referee_errors` 先比较完整调用，再比较分块长度为 1、2、5 的情形：比较 logits，以及各缓存保存的每个张量（Hugging Face 每层缓存中的张量，形状必须与我们的完全相同）。
#
# </details>

# %% tags=["hide-input"]
if HAVE_HF:
    from transformers import DynamicCache


class Float32RMSNorm(nn.RMSNorm):
    # [en] Hugging Face's RMSNorm: normalize in FP32, cast back, then scale by the weight.
    # [zh] Hugging Face 的 RMSNorm：在 FP32 下归一化，转换回原精度，再乘以权重。
    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def with_hf_precision(net: nn.Module, steps=("angles", "norms")) -> nn.Module:
    net = copy.deepcopy(net)
    for module in list(net.modules()):
        for name, child in list(module.named_children()):
            if "norms" in steps and type(child) is nn.RMSNorm:
                fp32_norm = Float32RMSNorm(child.normalized_shape, eps=child.eps).to(child.weight.dtype)
                fp32_norm.load_state_dict(child.state_dict())
                setattr(module, name, fp32_norm)
            if "angles" in steps and isinstance(child, Rotary):
                setattr(module, name, Rotary(child.dim, child.max_positions, child.theta, torch.float32).to(child.cos.dtype))
    return net


def hf_fields(c: ArchConfig) -> dict:
    return dict(vocab_size=c.vocab, hidden_size=c.width, intermediate_size=c.mlp, num_hidden_layers=c.layers,
                num_attention_heads=c.heads, num_key_value_heads=c.n_kv, max_position_embeddings=c.max_positions,
                rms_norm_eps=c.eps, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                attn_implementation="sdpa", rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta})


LLAMA_NAMES = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "mlp.gate": "mlp.gate_proj",
               "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj", "attn.q": "self_attn.q_proj", "attn.proj": "self_attn.o_proj"}
KV_NAMES = {"attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj"}


def copy_weights(ours: Decoder, hf, names: dict):
    state = {"model.embed_tokens.weight": ours.wte.weight, "model.norm.weight": ours.ln_f.weight,
             "lm_head.weight": ours.lm_head.weight}
    for i, block in enumerate(ours.blocks):
        for mine, theirs in names.items():
            state[f"model.layers.{i}.{theirs}.weight"] = block.get_submodule(mine).weight
    hf.load_state_dict({name: tensor.detach().clone() for name, tensor in state.items()}, strict=True)
    return hf.double()


@torch.inference_mode()
def hf_chunked(hf, ids, chunk):
    cache, pieces, start = DynamicCache(config=hf.config), [], 0
    for length in chunk_lengths(ids.shape[1], chunk):
        pieces.append(hf(input_ids=ids[:, start:start + length], past_key_values=cache, use_cache=True).logits)
        start += length
    return torch.cat(pieces, dim=1), cache


@torch.inference_mode()
def referee_errors(ours: Decoder, hf, chunks=(1, 2, 5)) -> dict:
    errors = {"full": max_abs_err(ours(STREAM)[0], hf(input_ids=STREAM).logits)}
    for chunk in chunks:
        our_logits, our_cache = run_chunked(ours, STREAM, chunk)
        hf_logits, hf_cache = hf_chunked(hf, STREAM, chunk)
        errors[f"cached_chunk_{chunk}"] = max_abs_err(our_logits, hf_logits)
        pairs = [(mine.contents()[i], theirs) for mine, layer in zip(our_cache, hf_cache.layers)
                 for i, theirs in enumerate((layer.keys, layer.values))]
        assert all(a.shape == b.shape for a, b in pairs)
        errors[f"cache_chunk_{chunk}"] = max(max_abs_err(a, b) for a, b in pairs)
    return errors


def referee_table(errors: dict, labels: dict) -> None:
    def worst(e: dict, prefix: str) -> str:
        values = [v for k, v in e.items() if k.startswith(prefix)]
        return f"{max(values):.1e}" if values else "-"
    say_table([[labels[name], f"{e['full']:.1e}", worst(e, "cached_chunk"), worst(e, "cache_chunk")] for name, e in errors.items()],
              en=["our model (FP64)", "full call: logits", "chunks of 1, 2, 5: logits", "cached tensors"],
              zh=["我们的模型（FP64）", "完整调用：logits", "分块长度 1、2、5：logits", "缓存的张量"])
