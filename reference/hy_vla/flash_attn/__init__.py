"""A CPU stand-in for the two flash-attn entry points HY-VLA's vision code imports, written with
PyTorch's scaled_dot_product_attention (flash-attn builds only for CUDA). Layout as flash-attn's:
q, k, v [batch, tokens, heads, head_dim]; the varlen form packs sequences along the tokens axis
with cumulative lengths. Only non-causal attention is reached by HY-VLA's inference path."""

import torch
import torch.nn.functional as F

__version__ = "2.7.4.post1"


def _sdpa(q, k, v, softmax_scale, causal):
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         scale=softmax_scale, is_causal=causal)
    return out.transpose(1, 2)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **unused):
    return _sdpa(q, k, v, softmax_scale, causal)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                           dropout_p=0.0, softmax_scale=None, causal=False, **unused):
    if not torch.equal(cu_seqlens_q, cu_seqlens_k):
        raise NotImplementedError("the stand-in attends each sequence to itself only")
    bounds = cu_seqlens_q.tolist()
    parts = [_sdpa(q[None, a:b], k[None, a:b], v[None, a:b], softmax_scale, causal)[0]
             for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.cat(parts, dim=0)
