"""Plain-PyTorch Mamba-2 oracle (HF Mamba2ForCausalLM) for the shardlm parity contract.

Written from transformers' modeling_mamba2.py, Mamba2Mixer.torch_forward (the
eager path, no cache): RMSNorm -> in_proj -> [z | xBC | dt] -> causal
depthwise conv1d over xBC + SiLU -> [x | B | C] -> dt = clamp(softplus(dt +
dt_bias), time_step_limit) -> the SSD scan with A = -exp(A_log) per head,
B and C shared by the heads of a group, skip D -> gated RMSNorm of
y * SiLU(z) -> out_proj -> residual; final norm_f; lm_head untied by default.

The scan is transformers' chunked SSD algorithm (segment sums within a
chunk, a recurrence over chunk states), not the engine's sequential
recurrence, so the two are independent computations of the same output; a
sequential form is kept for the self-check. One deliberate difference from
transformers: the gated RMSNorm is taken per group of d_inner / n_groups
channels, as the original Mamba-2 (mamba_ssm RMSNormGated, group_size),
llama.cpp and vLLM do; transformers takes it over the whole d_inner
(transformers PR #40861, open). At n_groups = 1 they are the same, which the
self-check asserts.

The data order, LR schedule, loss and the training loop are mamba_ref's /
llama_ref's (one definition for every architecture).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402
import mamba_ref as MR  # noqa: E402  (dump, train, the optimizer's decay rule)


class Mamba2Config:
    """The Mamba2ForCausalLM config.json fields the engine reads."""

    def __init__(self, d):
        self.hidden_size = int(d.get("hidden_size", 4096))
        self.num_hidden_layers = int(d.get("num_hidden_layers", 64))
        self.vocab_size = int(d.get("vocab_size", 32768))
        self.state_size = int(d.get("state_size", 128))
        self.expand = int(d.get("expand", 2))
        self.conv_kernel = int(d.get("conv_kernel", 4))
        self.num_heads = int(d.get("num_heads", 128))
        self.head_dim = int(d.get("head_dim", 64))
        self.n_groups = int(d.get("n_groups", 8))
        self.chunk_size = int(d.get("chunk_size", 256))
        self.layer_norm_epsilon = float(d.get("layer_norm_epsilon", 1e-5))
        self.use_bias = bool(d.get("use_bias", False))
        self.use_conv_bias = bool(d.get("use_conv_bias", True))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        lim = d.get("time_step_limit", [0.0, float("inf")])
        self.time_step_limit = (float(lim[0]), float(lim[1]))
        self.intermediate_size = self.expand * self.hidden_size
        assert self.num_heads * self.head_dim == self.intermediate_size

    def to_dict(self):
        return {
            "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_hidden_layers,
            "vocab_size": self.vocab_size, "state_size": self.state_size, "expand": self.expand,
            "conv_kernel": self.conv_kernel, "num_heads": self.num_heads, "head_dim": self.head_dim,
            "n_groups": self.n_groups, "chunk_size": self.chunk_size,
            "layer_norm_epsilon": self.layer_norm_epsilon, "use_bias": self.use_bias,
            "use_conv_bias": self.use_conv_bias, "tie_word_embeddings": self.tie_word_embeddings,
            "time_step_limit": list(self.time_step_limit), "hidden_act": "silu",
            "residual_in_fp32": True, "rms_norm": True, "torch_dtype": "float32",
        }


def make_config(hidden=32, layers=2, state=8, expand=2, conv=4, heads=8, groups=2, vocab=97,
                chunk=16, tied=False, limit=(0.0, float("inf"))):
    return Mamba2Config(dict(hidden_size=hidden, num_hidden_layers=layers, state_size=state,
                             expand=expand, conv_kernel=conv, num_heads=heads,
                             head_dim=expand * hidden // heads, n_groups=groups, vocab_size=vocab,
                             chunk_size=chunk, tie_word_embeddings=tied, time_step_limit=list(limit)))


# ------------------------------------------------------------------- scan

def segment_sum(a):
    """a (..., l) -> (..., l, l): out[i, j] = sum a[j+1..i] for j <= i, -inf above."""
    l = a.size(-1)
    x = a[..., None].expand(*a.size(), l)
    x = x.masked_fill(~torch.tril(torch.ones(l, l, dtype=torch.bool), diagonal=-1), 0)
    s = torch.cumsum(x, dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(l, l, dtype=torch.bool), diagonal=0), -torch.inf)


def ssd_chunked(x, dt, A, Bm, Cm, Dp, chunk):
    """transformers' torch_forward SSD: x (b, T, h, p), dt (b, T, h) after softplus and
    clamp, A (h), Bm, Cm (b, T, h, n) already repeated per head, Dp (h) -> y (b, T, h, p)."""
    b, T, h, p = x.shape
    pad = (chunk - T % chunk) % chunk
    Dres = Dp[:, None] * x
    xd = x * dt[..., None]
    Ad = A.to(x.dtype) * dt

    def chunks(t):
        t = F.pad(t, (0, 0, 0, 0, 0, pad) if t.dim() == 4 else (0, 0, 0, pad))
        return t.reshape(t.shape[0], -1, chunk, *t.shape[2:])

    xd, Ad, Bc, Cc = (chunks(t) for t in (xd, Ad, Bm, Cm))
    Ad = Ad.permute(0, 3, 1, 2)  # (b, h, c, l)
    Acum = torch.cumsum(Ad, dim=-1)
    Lm = torch.exp(segment_sum(Ad))  # (b, h, c, l, l)
    G = (Cc[:, :, :, None, :, :] * Bc[:, :, None, :, :, :]).sum(-1)  # (b, c, l, s, h)
    M = (G[..., None] * Lm.permute(0, 2, 3, 4, 1)[..., None]).sum(-1)
    Ydiag = (M[..., None] * xd[:, :, None]).sum(3)
    decay_states = torch.exp(Acum[:, :, :, -1:] - Acum)
    Bdec = Bc * decay_states.permute(0, -2, -1, 1)[..., None]
    states = (Bdec[..., None, :] * xd[..., None]).sum(2)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segment_sum(F.pad(Acum[:, :, :, -1], (1, 0)))).transpose(1, 3)
    states = (decay_chunk[..., None, None] * states[:, :, None, ...]).sum(1)[:, :-1]
    Yoff = (Cc[..., None, :] * states[:, :, None, ...]).sum(-1) * torch.exp(Acum).permute(0, 2, 3, 1)[..., None]
    y = (Ydiag + Yoff).reshape(b, -1, h, p)[:, :T]
    return y + Dres


def ssd_sequential(x, dt, A, Bm, Cm, Dp, chunk=None):
    """The same recurrence one step at a time (the self-check's second form)."""
    b, T, h, p = x.shape
    s = torch.zeros(b, h, p, Bm.shape[-1], dtype=x.dtype)
    ys = []
    for t in range(T):
        a = torch.exp(dt[:, t] * A)  # (b, h)
        s = s * a[..., None, None] + (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, :, None, :]
        ys.append((s * Cm[:, t, :, None, :]).sum(-1) + Dp[:, None] * x[:, t])
    return torch.stack(ys, 1)


# ------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class GatedRMSNorm(nn.Module):
    """norm(y * silu(z)) per group of n / groups channels (see the module doc)."""

    def __init__(self, n, groups, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.groups, self.eps = groups, eps

    def forward(self, y, z):
        g = y * F.silu(z)
        sh = g.shape
        g = g.reshape(*sh[:-1], self.groups, sh[-1] // self.groups)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * g.reshape(sh)


class Mamba2Mixer(nn.Module):
    def __init__(self, c, norm_groups=None):
        super().__init__()
        self.c = c
        H, D, S, K, nh, G = (c.hidden_size, c.intermediate_size, c.state_size, c.conv_kernel, c.num_heads,
                             c.n_groups)
        self.conv_dim = D + 2 * G * S
        self.in_proj = nn.Linear(H, D + self.conv_dim + nh, bias=c.use_bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, K, groups=self.conv_dim, padding=K - 1,
                                bias=c.use_conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(nh))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, nh + 1, dtype=torch.float32)))
        self.norm = GatedRMSNorm(D, G if norm_groups is None else norm_groups, c.layer_norm_epsilon)
        self.D = nn.Parameter(torch.ones(nh))
        self.out_proj = nn.Linear(D, H, bias=c.use_bias)

    def forward(self, x, scan=ssd_chunked):
        c = self.c
        b, T, _ = x.shape
        D, GS, nh, p = c.intermediate_size, c.n_groups * c.state_size, c.num_heads, c.head_dim
        zx = self.in_proj(x)
        z, xbc, dt = zx[..., :D], zx[..., D:D + self.conv_dim], zx[..., D + self.conv_dim:]
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :T].transpose(1, 2))
        xs, Bm, Cm = xbc[..., :D], xbc[..., D:D + GS], xbc[..., D + GS:]
        dt = torch.clamp(F.softplus(dt + self.dt_bias), c.time_step_limit[0], c.time_step_limit[1])
        rep = nh // c.n_groups
        Bm = Bm.reshape(b, T, c.n_groups, -1).repeat_interleave(rep, dim=2)
        Cm = Cm.reshape(b, T, c.n_groups, -1).repeat_interleave(rep, dim=2)
        y = scan(xs.reshape(b, T, nh, p), dt, -torch.exp(self.A_log), Bm, Cm, self.D, c.chunk_size)
        return self.out_proj(self.norm(y.reshape(b, T, D), z))


class Mamba2Block(nn.Module):
    def __init__(self, c, norm_groups=None):
        super().__init__()
        self.norm = RMSNorm(c.hidden_size, c.layer_norm_epsilon)
        self.mixer = Mamba2Mixer(c, norm_groups)

    def forward(self, x, scan=ssd_chunked):
        return x + self.mixer(self.norm(x), scan)


class Mamba2Model(nn.Module):
    def __init__(self, c, norm_groups=None):
        super().__init__()
        self.embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Mamba2Block(c, norm_groups) for _ in range(c.num_hidden_layers)])
        self.norm_f = RMSNorm(c.hidden_size, c.layer_norm_epsilon)


class Mamba2ForCausalLM(nn.Module):
    """named_parameters() yields exactly the HF checkpoint names."""

    def __init__(self, c, norm_groups=None):
        super().__init__()
        self.config = c
        self.backbone = Mamba2Model(c, norm_groups)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, idx, scan=ssd_chunked):
        x = self.backbone.embeddings(idx)
        for layer in self.backbone.layers:
            x = layer(x, scan)
        x = self.backbone.norm_f(x)
        w = self.backbone.embeddings.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return x @ w.t()


loss_fn = L.loss_fn
dump = MR.dump
train = MR.train


def init_model(c, seed=0, std=0.1, jitter=0.2):
    """N(0, std) for the embeddings and projections, conv uniform(+-1/sqrt(K)),
    dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1], A_log =
    log(1..nh), D = 1, norms 1; jitter > 0 perturbs A_log, D, the norms and
    the biases (so tests do not see symmetric values)."""
    g = torch.Generator().manual_seed(seed)
    m = Mamba2ForCausalLM(c)

    def rnd(shape):
        return torch.randn(shape, generator=g)

    with torch.no_grad():
        for name, p in m.named_parameters():
            if "conv1d" in name:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(c.conv_kernel))
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.rand(p.shape, generator=g) * (math.log(0.1) - math.log(1e-3))
                               + math.log(1e-3)).clamp(min=1e-4)
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.arange(1, p.shape[0] + 1, dtype=torch.float32)) + jitter * rnd(p.shape))
            elif name.endswith(".D") or "norm" in name:
                p.copy_(1.0 + jitter * rnd(p.shape))
            elif p.dim() >= 2:
                p.copy_(rnd(p.shape) * std)
            else:
                p.copy_(jitter * 0.5 * rnd(p.shape))
    return m


save_hf = MR.save_hf  # config.json from m.config.to_dict(), the weights by HF name


def load_hf(model_dir, dtype=torch.float32):
    c = Mamba2Config(common.config_read(model_dir))
    return common.load_params(Mamba2ForCausalLM(c).to(dtype), os.path.join(model_dir, "model.safetensors"),
                              ("lm_head.weight",) if c.tie_word_embeddings else ())


def selftest():
    """The chunked SSD equals the sequential recurrence (fp64, chunk not dividing T); the
    per-group gated norm equals transformers' whole-width norm at n_groups 1 and differs at 2."""
    torch.manual_seed(0)
    c = make_config(hidden=16, heads=4, groups=2, state=4, chunk=5)
    m = init_model(c, seed=1).double()
    idx = torch.randint(0, c.vocab_size, (2, 13))
    a, b = m(idx, ssd_chunked), m(idx, ssd_sequential)
    err = float((a - b).abs().max() / b.abs().max())
    ok = err < 1e-12
    print(f"selftest: chunked SSD vs sequential (fp64): {err:.1e} {'ok' if ok else 'FAIL'}")
    y, z = torch.randn(3, 32, dtype=torch.float64), torch.randn(3, 32, dtype=torch.float64)
    whole = GatedRMSNorm(32, 1, 1e-5).double()
    two = GatedRMSNorm(32, 2, 1e-5).double()
    g = y * F.silu(z)
    hf = whole.weight * (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-5))  # transformers' formula
    e1, e2 = float((whole(y, z) - hf).abs().max()), float((two(y, z) - hf).abs().max())
    ok2 = e1 < 1e-14 and e2 > 1e-3
    print(f"selftest: gated norm n_groups 1 vs transformers {e1:.1e}, n_groups 2 differs by {e2:.1e} "
          f"{'ok' if ok2 else 'FAIL'}")
    return ok and ok2


if __name__ == "__main__":
    sys.exit(0 if selftest() else 1)
