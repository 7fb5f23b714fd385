"""A llama-architecture decoder (RMSNorm, RoPE on adjacent pairs, GQA, SwiGLU, tied embeddings).

RoPE rotates the pairs (x[2i], x[2i+1]) by pos * base^(-2i/head_dim): the layout attnd uses for
`llama` files, so q/k weights are written to GGUF as they are, without a permutation.
Query head h reads key/value head h // (n_head / n_head_kv), as in llama.cpp and attnd.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 2048
    dim: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_head_kv: int = 2
    ffn: int = 640
    ctx: int = 256
    rope_base: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self):
        return self.dim // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n):
    hd = cfg.head_dim
    inv = cfg.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]  # (n, hd/2)
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x: (B, H, T, hd); rotates adjacent pairs."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.dim, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.eps)
        self.wq = nn.Linear(d, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.eps)
        self.w_gate = nn.Linear(d, cfg.ffn, bias=False)
        self.w_up = nn.Linear(d, cfg.ffn, bias=False)
        self.w_down = nn.Linear(cfg.ffn, d, bias=False)
        self.last_attn = None  # (B, H, T, T) when the model is asked to keep maps

    def forward(self, x, cos, sin, mask, keep):
        cfg = self.cfg
        B, T, _ = x.shape
        hd, H, KV = cfg.head_dim, cfg.n_head, cfg.n_head_kv
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, H, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, KV, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, KV, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        g = H // KV
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + mask
        att = att.softmax(-1)
        self.last_attn = att.detach() if keep else None
        o = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        cos, sin = rope_tables(cfg, cfg.ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for blk in self.layers:  # GPT-2 style: residual writers scaled by depth
            nn.init.normal_(blk.wo.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            nn.init.normal_(blk.w_down.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, keep_attn=False):
        """idx (B, T) token ids -> logits (B, T, vocab)."""
        T = idx.shape[1]
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.embed(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for blk in self.layers:
            x = blk(x, cos, sin, mask, keep_attn)
        return self.norm(x) @ self.embed.weight.t()

    def attn_maps(self):
        """(n_layer, B, H, T, T) maps of the last forward run with keep_attn=True."""
        return torch.stack([b.last_attn for b in self.layers])


def n_params(model):
    return sum(p.numel() for p in model.parameters())
