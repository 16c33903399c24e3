"""Ulysses attention: sequence-sharded q, k, v become head-sharded for the
attention itself, and the output goes back to sequence shards.

[b, s/P, h, d] --all_to_all(scatter heads, gather sequence)--> [b, s, h/P, d]
Every rank then attends over the whole sequence for h/P heads.
"""
from .autograd import all_to_all
from .state import resolve


def ulysses_attention(q, k, v, attn, group=None, seq_dim=1, head_dim=2,
                      seq_len=None):
    """attn(q, k, v) on the full sequence and this rank's heads; returns the
    output in q's sequence-sharded layout. seq_len: the full length when
    the ranks' shards differ in size (default: local length * P). Heads
    must divide by P for the attention to see whole heads (the rule splits
    unevenly otherwise)."""
    group = resolve(group)
    qh, kh, vh = (all_to_all(t, group, head_dim, seq_dim, seq_len)
                  for t in (q, k, v))
    out = attn(qh, kh, vh)
    return all_to_all(out, group, seq_dim, head_dim, q.shape[head_dim])
