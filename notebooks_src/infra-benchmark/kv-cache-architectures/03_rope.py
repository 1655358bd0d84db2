# %% [markdown] lang="en"
# ## 5. Rotary position embeddings (RoPE)
#
# Section 3's decoder adds a learned vector per absolute position to the token embedding. RoPE (Su et
# al., 2021) adds nothing. It splits each query and key head into pairs of coordinates and rotates pair
# $i$ by the angle $p\,\theta_i$, where $p$ is the token's absolute position and
# $\theta_i = \Theta^{-2i/D_h}$ with $\Theta = 10{,}000$. Rotations compose and are orthogonal, so for a
# query at position $m$ and a key at position $n$
#
# $$\langle R_m q, R_n k \rangle = \langle q, R_m^{\top} R_n k \rangle = \langle q, R_{n-m}\, k \rangle :$$
#
# the attention score depends on the two positions only through their difference. For the cache this
# means two things. A key is rotated once, at its own absolute position, and cached *after* rotation; its
# position never changes, so the cached value stays valid. And the new chunk must still be rotated at its
# true absolute positions $P, P+1, \dots$, exactly as the learned table had to be indexed there.
#
# Next the code, then its proofs.

# %% [markdown] lang="zh"
# ## 5. 旋转位置编码（RoPE）
#
# 第 3 节的解码器为每个绝对位置学习一个向量，加到 token 嵌入上。Su 等人（2021）提出的 RoPE 什么也不加。它把每个头中查询和键的坐标两两配对，把第 $i$ 对旋转 $p\,\theta_i$ 角，其中 $p$ 是 token 的绝对位置，$\theta_i = \Theta^{-2i/D_h}$，$\Theta = 10{,}000$。旋转可以复合，又是正交变换，所以对位置 $m$ 上的查询和位置 $n$ 上的键有
#
# $$\langle R_m q, R_n k \rangle = \langle q, R_m^{\top} R_n k \rangle = \langle q, R_{n-m}\, k \rangle ,$$
#
# 也就是说，注意力分数只通过两个位置之差依赖于位置。这对缓存意味着两件事。第一，每个键只在它自己的绝对位置上旋转一次，缓存的是**旋转之后**的键；键的位置永远不变，所以缓存的值始终有效。第二，新分块仍然必须按真实的绝对位置 $P, P+1, \dots$ 旋转，正如可学习的位置嵌入表也必须用这些位置去查。
#
# 下面先给出代码，然后是证明。
