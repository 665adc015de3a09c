"""The GPT-2 style model of Triad's benchmarks in PyTorch, shared by the CPU
benchmark (train_step_vs_pytorch.py) and the GPU peer (gpu/torch_peer.py).

Pre-LayerNorm with biases, learned positions, causal multi-head attention,
exact-GELU MLP, final LayerNorm, output projection tied to the token
embedding, mean cross entropy over next-token labels: triad-gen's GPT-2
presets. Module names mirror Triad's parameter names (embed.wte,
layers.0.attn.wq, ...), and the initialization is Triad's. Import it after
the environment that torch reads at start-up is set.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """Causal multi-head self-attention with separate q, k, v projections."""

    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(hidden, hidden)
        self.wk = nn.Linear(hidden, hidden)
        self.wv = nn.Linear(hidden, hidden)
        self.wo = nn.Linear(hidden, hidden)
        self.register_buffer(
            "masked", torch.ones(seq, seq, dtype=torch.bool).triu(1),
            persistent=False)

    def forward(self, x):
        b, t, h = x.shape
        d = h // self.heads

        def split(y):
            return y.view(b, t, self.heads, d).transpose(1, 2)

        q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(self.masked[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, h))


class FusedQkvAttention(nn.Module):
    """As Attention, with q, k and v from one [3h, h] projection."""

    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.wqkv = nn.Linear(hidden, 3 * hidden)
        self.wo = nn.Linear(hidden, hidden)
        self.register_buffer(
            "masked", torch.ones(seq, seq, dtype=torch.bool).triu(1),
            persistent=False)

    def forward(self, x):
        b, t, h = x.shape
        d = h // self.heads
        q, k, v = (y.view(b, t, self.heads, d).transpose(1, 2)
                   for y in self.wqkv(x).split(h, dim=2))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(self.masked[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, h))


class TorchMHA(nn.Module):
    """nn.MultiheadAttention: one fused in-projection, same parameter count."""

    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.mha = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.register_buffer(
            "masked", torch.ones(seq, seq, dtype=torch.bool).triu(1),
            persistent=False)

    def forward(self, x):
        t = x.shape[1]
        return self.mha(x, x, x, attn_mask=self.masked[:t, :t],
                        need_weights=False)[0]


class Mlp(nn.Module):
    """fc1, GELU (exact, or `approximate="tanh"` as GPT-2's), fc2."""

    def __init__(self, hidden, ffn, approximate="none"):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.approximate = approximate

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, c, attention):
        super().__init__()
        self.attn_norm = nn.LayerNorm(c["hidden"], eps=1e-5)
        self.attn = attention(c["hidden"], c["heads"], c["seq"])
        self.mlp_norm = nn.LayerNorm(c["hidden"], eps=1e-5)
        self.mlp = Mlp(c["hidden"], c["ffn"], c.get("gelu", "none"))

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Embed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        self.wpe = nn.Embedding(c["seq"], c["hidden"])


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c["hidden"], eps=1e-5)


class Gpt(nn.Module):
    """Module names mirror Triad's parameter names (embed.wte,
    layers.0.attn.wq, ...)."""

    def __init__(self, c, attention):
        super().__init__()
        self.embed = Embed(c)
        self.layers = nn.ModuleList(Block(c, attention)
                                    for _ in range(c["layers"]))
        self.head = Head(c)
        # Triad's initialization: normal(0.02), the residual-stream outputs
        # GPT-2's 0.02 / sqrt(2 * layers), biases zero, norms one/zero.
        residual_std = 0.02 / math.sqrt(2 * c["layers"])
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "norm" in name:
                nn.init.ones_(p)
            elif name.endswith(("wo.weight", "fc2.weight",
                                "out_proj.weight")):
                nn.init.normal_(p, std=residual_std)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, labels):
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.embed.wte(tokens) + self.embed.wpe(positions)
        for layer in self.layers:
            x = layer(x)
        x = self.head.norm(x)
        logits = F.linear(x, self.embed.wte.weight)  # tied output projection
        return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               labels.reshape(-1))


class SdpaAttention(FusedQkvAttention):
    """The fused projection with F.scaled_dot_product_attention (flash or
    memory-efficient kernels on a GPU)."""

    def forward(self, x):
        b, t, h = x.shape
        d = h // self.heads
        q, k, v = (y.view(b, t, self.heads, d).transpose(1, 2)
                   for y in self.wqkv(x).split(h, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, h))


ATTENTIONS = {"matmul": Attention, "fused-qkv": FusedQkvAttention,
              "mha": TorchMHA, "sdpa": SdpaAttention}


def make_optimizer(model, lr, weight_decay):
    """AdamW as Triad's pipeline sets it up: decay on rank >= 2 only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)


def train_step(model, optimizer, tokens, labels, clip_norm):
    """One step; the loss and the gradient norm as tensors (reading them
    would wait for the device)."""
    loss = model(tokens, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return loss, norm
