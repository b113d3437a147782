"""A GPT-2 written in ordinary PyTorch, named as the GPT-2 checkpoints name
their tensors (transformer.h.N.attn.c_attn, ...; lm_head tied to wte), with
the fused qkv projection split in three. Used by gpt2_walkthrough.py and by
the Python package's tests; GPT2Config() is GPT-2 small."""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPT2Config:
    vocab: int = 50257
    context: int = 1024
    layers: int = 12
    hidden: int = 768
    heads: int = 12


class Attention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_attn = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.c_proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.heads = cfg.heads
        mask = torch.tril(torch.ones(cfg.context, cfg.context))
        self.register_buffer("bias", mask.view(1, 1, cfg.context, cfg.context))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
        self.c_proj = nn.Linear(4 * cfg.hidden, cfg.hidden)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """forward(idx, targets) -> (loss, logits)."""

    def __init__(self, cfg: GPT2Config = GPT2Config(), seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab, cfg.hidden),
            wpe=nn.Embedding(cfg.context, cfg.hidden),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.layers)]),
            ln_f=nn.LayerNorm(cfg.hidden)))
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)),
                               targets.view(-1))
        return loss, logits


def megatron(model, mesh, dp: bool = False):
    """Megatron-LM's tensor parallelism on GPT-2's names, as annotations
    (axis "tp"; with dp=True the batch is split over "dp" too): c_attn and
    c_fc by output features, the two c_proj by input features. wte (the
    tied lm_head) stays replicated: 50257 does not divide."""
    from partita import P
    if dp:
        model.shard("idx", P("dp", None), mesh)
        model.shard("targets", P("dp", None), mesh)
    model.shard("transformer.h.*.attn.c_attn.weight", P("tp", None), mesh)
    model.shard("transformer.h.*.attn.c_attn.bias", P("tp"), mesh)
    model.shard("transformer.h.*.attn.c_proj.weight", P(None, "tp"), mesh)
    model.shard("transformer.h.*.mlp.c_fc.weight", P("tp", None), mesh)
    model.shard("transformer.h.*.mlp.c_fc.bias", P("tp"), mesh)
    model.shard("transformer.h.*.mlp.c_proj.weight", P(None, "tp"), mesh)
    return model
