# %% [markdown] lang="en"
# **Requests.** A `Request` carries its prompt, the number of tokens to generate and the loop iteration
# it arrives at; it collects the tokens it generates and the logits that chose them, and records the
# iterations in which it was admitted and in which it finished. `blocks_needed` is the most blocks a
# request can ever hold: its prompt plus its output minus one (the last generated token is never fed
# back, so its K/V is never stored), rounded up to whole blocks.

# %% [markdown] lang="zh"
# **请求**：`Request` 带着它的提示、要生成的 token 数，以及它在循环的第几次迭代到达；它收集自己生成的 token 和选出每个 token 的 logits，并记下它在第几次迭代被接纳、第几次迭代完成。`blocks_needed` 是一个请求最多会持有的物理块数：提示长度加输出长度再减一（最后生成的 token 不会再送回模型，所以它的 K/V 从不存储），再向上取整到整数个物理块。

# %%
@dataclass
class Request:
    rid: int
    prompt: torch.Tensor
    # [en] Tokens to generate, and the loop iteration the request arrives at.
    # [zh] 要生成的 token 数，以及请求到达时循环的迭代序号。
    max_new: int
    arrival: int = 0
    # [en] Generated tokens, the logits that chose them, and the iterations of admission and finish.
    # [zh] 生成的 token、选出它们的 logits，以及接纳和完成时的迭代序号。
    tokens: list = field(default_factory=list)
    logits: list = field(default_factory=list)
    admitted: int = -1
    finished: int = -1


def blocks_needed(request, block_size) -> int:
    # [en] The last generated token is never fed back, so its K/V is never stored.
    # [zh] 最后生成的 token 不会再送回模型，所以它的 K/V 从不存储。
    return math.ceil((len(request.prompt) + request.max_new - 1) / block_size)
