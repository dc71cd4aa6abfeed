"""PyTorch reference of bf16 compute (docs/bf16.md) for Llama (Qwen3, Gemma 2 / 3), Mamba (and Falcon-Mamba),
Mamba-2, Nemotron-H, Granite 4.0-H (dense and MoE) and Granite 3.

Owns: the forwards of llama_ref.LlamaForCausalLM's,
mamba_ref.MambaForCausalLM's, mamba2_ref.Mamba2ForCausalLM's,
nemotron_h_ref.NemotronHForCausalLM's, granite_h_ref.GraniteHForCausalLM's and
granite_ref.GraniteForCausalLM's parameters with the bf16 rounding points
written out as explicit casts, and their dump (logits, loss, parameter
gradients of the mean loss of samples 0..B-1).

Written from the rounding-point table of docs/bf16.md, not from the engine:
  - r(x) = x.bfloat16().float(): an activation stored in bf16. Its autograd
    backward also rounds the gradient flowing through it to bf16 (the grad of
    .float() is cast to bf16), which is exactly "an activation gradient is
    stored in bf16 where the activation is";
  - rw(p): a parameter gathered in bf16 (--param-dtype bf16) or a GEMM
    operand cast to bf16; the rounding is straight-through in backward, so
    parameter gradients stay fp32 (fp32 master weights, fp32 grad buffers);
  - GEMMs, attention, norms and the cross-entropy compute in fp32 on those
    values;
  - the residual stream of the Llama family (residual_bf16, the default,
    as `--residual-dtype auto`): x rounded to bf16 after the embedding (and
    Gemma's scale) and after each residual add, as a bf16 model's
    hidden_states are; straight-through, so its gradient stays fp32 (the
    engine's residual gradient buffer). residual_bf16=False (`--residual-dtype
    fp32`, Megatron's --fp32-residual-connection) and Mamba (its
    residual_in_fp32): x stays fp32;
  - attention's backward uses the stored (bf16) output O in
    D = rowsum(dO * O), as a FlashAttention-style kernel does (custom
    autograd function below); plain autograd would use the unrounded O;
  - a gradient buffer that several ops add into is rounded after each
    addition, in the engine's order (Mamba's du: scan, then the dt rows of
    x_proj, then its B/C rows; _Fan3 below); autograd would sum the three
    in fp32 and round once;
  - Mamba-2 (mamba2_forward): every gradient buffer of its backward
    (models/mamba2.c) is written by one op per column range (dzx: the
    gate's dz, the conv's dx, the scan's ddt; dxbc: the scan's dx, dB, dC),
    so autograd's single rounding of each is the engine's; the gate's
    output g is stored in bf16 but its gradient is the gated norm's
    rmsnorm_bwd input gradient, fp32 (docs/bf16.md's table), so g's
    rounding is straight-through;
  - Nemotron-H (nemotron_h_forward): its layers are those pieces, each
    x + mixer(R(rmsnorm(x))) on an fp32 stream: 'M' Mamba-2's mixer
    (_m2_mixer), '*' the Llama attention without RoPE, '-' up_proj ->
    relu2 (output R) -> down_proj.
  - Granite 4.0-H (granite_h_forward): Nemotron-H's pieces ('-' the SwiGLU
    MLP; config_moe's 'E': moe_mlp with softmax routing, SwiGLU experts and
    the shared MLP as the shared expert) with the multipliers in fp32 where
    the engine's scale_add applies them (scale_add does not round): see
    granite_h_forward.
  - Granite 3 (granite_forward): the Llama layers (forward()'s points, the
    bf16 residual stream) with the multipliers placed as Granite 4.0-H's.
  - the mixtures of experts (moe_mlp: Mixtral's sparse MLP in forward(),
    Nemotron-H's 'E' layers in nemotron_h_forward, Granite 4.0-H's MLP
    sub-layers in granite_h_forward), written from the engine
    (models/llama_moe.c, llama.c's shared expert, kernels/kernels.h's moe_*
    ops, fp32 under bf16 compute): the router's logits rounded (a linear_fwd
    into a bf16 buffer), the routing, the weights and the combine in fp32,
    the experts as the dense MLP's pieces on their rows; ln2's gradient
    rounded after each op that adds into it (_FanMoE).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as L  # noqa: E402
import mamba2_ref as M2  # noqa: E402
import mamba_ref as M  # noqa: E402
import granite_h_ref as GH  # noqa: E402
import granite_ref as G  # noqa: E402
import nemotron_h_ref as NH  # noqa: E402


def r(x):
    """Round to bf16 (nearest even) and back; the backward rounds the gradient."""
    return x.bfloat16().float()


class _RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.bfloat16().float()

    @staticmethod
    def backward(ctx, g):
        return g


def rw(p):
    """A bf16-gathered parameter / bf16 GEMM operand: fp32 gradient."""
    return _RoundSTE.apply(p)


class _Attention(torch.autograd.Function):
    """Causal softmax attention on (B, H, T, hd) q, k, v in fp32, scores
    times scale (None: hd^-0.5) and, with cap > 0, softcapped cap *
    tanh(s / cap) before the mask (Gemma 2). Backward uses the stored output
    in D = rowsum(dO * R(O)) (R: the rounding of the output, identity in the
    fp32 model)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, R, scale=None, cap=0.0):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q @ k.transpose(-1, -2)) * scale
        t = torch.tanh(s / cap) if cap else torch.zeros(0)
        if cap:
            s = t * cap
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        o = p @ v
        ctx.save_for_backward(q, k, v, p, R(o), t)
        ctx.scale, ctx.cap = scale, cap
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o_r, t = ctx.saved_tensors
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        d = (do * o_r).sum(-1, keepdim=True)
        ds = p * (dp - d)
        if ctx.cap:  # through cap * tanh(s / cap)
            ds = ds * (1.0 - t * t)
        dq = (ds @ k) * ctx.scale
        dk = (ds.transpose(-1, -2) @ q) * ctx.scale
        return dq, dk, dv, None, None, None, None


def _ident(x):
    return x


def cos_sin(T, hd, theta, c=None):
    """llama_ref.rope_cos_sin's tables with cos / sin of the fp32 angles
    taken in double and rounded to fp32, as the engine's CPU table
    (kernels/cpu/basic.c rope_table): torch's fp32 cos differs by an ulp at
    some angles, and under bf16 such a difference flips roundings (measured:
    6e-8 in the table of rope_local_base_freq 100 became 7.8e-4 logits L2)."""
    if c is None:
        inv, af = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)), 1.0
    else:
        inv, af = L.rope_inv_freq(c)
    emb = torch.outer(torch.arange(T, dtype=torch.int64).float(), inv)
    emb = torch.cat((emb, emb), dim=-1).double()
    cos, sin = emb.cos().float(), emb.sin().float()
    return (cos * af, sin * af) if af != 1.0 else (cos, sin)


class _FanMoE(torch.autograd.Function):
    """The sparse MLP's readers of its input ln2 (N, C): h -> (h, h, h) for the experts' permuted rows, the router
    and the shared expert. Backward in the engine's order (models/llama_moe.c moe_bwd, then llama.c's shared
    expert): dln = the experts' rows' gradients summed in fp32 (moe_permute_bwd), the router's linear_bwd adds
    its part and rounds (R(dln + dlogits @ Wr)), the shared expert's linear_bwd adds its part and rounds again.
    Autograd would sum the three in fp32 and round once. R: the rounding or the identity; fan_once: that single
    rounding (the negative control)."""

    @staticmethod
    def forward(ctx, h, R, once):
        ctx.R, ctx.once = R, once
        return h.clone(), h.clone(), h.clone()

    @staticmethod
    def backward(ctx, ge, gr, gs):
        R = ctx.R
        return (R(ge + gr + gs) if ctx.once else R(R(ge + gr) + gs)), None, None


def _bf16_step(x, m):
    """x (bf16-valued fp32) moved by m bf16 ulps (m may be negative), through the ordered bit pattern."""
    b = (x.contiguous().view(torch.int32) >> 16).to(torch.int64)
    o = torch.where(b >= 0, b, -32768 - b) + m  # the order of the bf16 values as integers
    b = torch.where(o >= 0, o, -32768 - o)
    return (b << 16).to(torch.int32).view(torch.float32)


def moe_margin(lg, bias, k, score):
    """The routing's margin in bf16 ulps: the smallest m > 0 such that moving one router logit of some token by
    m bf16 ulps (up or down) changes that token's top-k set (lg (N, E) the rounded logits, bias (E) or None;
    score "softmax" or "sigmoid"), capped at 64. The engine's and the reference's logits are the same bf16
    values unless a rounding upstream flips, which moves a logit by one ulp: a margin of a few ulps keeps the
    two choices equal."""
    N, E = lg.shape

    def topk_set(lv):
        p = torch.sigmoid(lv) if score == "sigmoid" else torch.softmax(lv, -1)
        ch = p + bias if bias is not None else p
        sel = torch.sort(ch, dim=-1, descending=True, stable=True).indices[:, :k]
        return torch.zeros(N, E, dtype=torch.bool).scatter_(1, sel, True)

    base = topk_set(lg)
    for m in range(1, 65):
        for e in range(E):
            for sgn in (1, -1):
                lv = lg.clone()
                lv[:, e] = _bf16_step(lg[:, e], sgn * m)
                if not torch.equal(topk_set(lv), base):
                    return m
    return 64


def moe_mlp(h, router_w, experts, act, R, RW, k, score, norm, scale=1.0, bias=None, shared=None, skip=(),
            trace=None, shared_act="relu2"):
    """The sparse MLP (models/llama_moe.c) on the rounded norm output h (B, T, C), with the engine's rounding
    points under bf16 compute (R / RW as the callers'):
      - the router GEMM's output, the logits, stored R (linear_fwd; the logits buffer is bf16); its backward
        rounds dlogits as the GEMM operand (linear_bwd); the scores (softmax or sigmoid), the top-k selection,
        the weights (renormalised when norm, + 1e-20 in sigmoid mode, times scale) and their backward in fp32
        (moe_route_fwd / bwd: fp32 also under bf16 compute), from the rounded logits;
      - the top-k on the scores (+ bias: Nemotron-H's e_score_correction_bias, fp32) of the rounded logits,
        a tie to the lower expert (a stable sort), detached;
      - each expert on its rows (tokens ascending): gate|up = R(x @ W^T) as one GEMM (experts: (w_gu, w_down),
        w_gu the packed gate|up rows, or up alone for relu2), act R (swiglu / relu2: out R, dgu R), down R;
        its permuted input rows r(): the expert's linear_bwd rounds each slot's input gradient dxr;
      - the combine out = sum_j w_j y_j in fp32 (moe_combine_fwd; k = 2: one order), its backward w_j dout in
        fp32 (rounded by the down GEMM as its operand) and dw_j = dout . y_j in fp32;
      - shared ((up_w, up_b, down_w, down_b); llama.c: after the routed experts in forward, its down and
        activation backward before theirs, its up GEMM's after the router's: _FanMoE): Nemotron-H's (shared_act
        "relu2") up R, relu2 R, down R; Granite 4.0-H's shared_mlp (shared_act "swiglu": up_w its input_linear,
        the gate | up rows, one GEMM) gate|up R, swiglu R (its backward's dgu R), down R; added to out in fp32;
      - ln2's gradient: _FanMoE (the router's and the shared expert's linear_bwd each round after adding).
    skip (negative controls only): "fan" ln2's gradient rounded once (plain autograd); "router" the logits
    fp32 (not rounded, nor their gradient); "combine" the combine's output stored R (as if moe_combine were a
    rounding op: its gradient rounded too); "shared_swiglu" the shared expert's swiglu output unrounded (in
    forward a no-op, the down GEMM rounds its operand; in backward that GEMM's input gradient left fp32).
    trace: a list to append (rounded logits, bias, k, score) to."""
    Bsz, T, C = h.shape
    N = Bsz * T
    hx, hr, hs = _FanMoE.apply(h.reshape(N, C), R, "fan" in skip)
    lin = (lambda x, w: RW(x) @ RW(w).t()) if "router" in skip else (lambda x, w: R(RW(x) @ RW(w).t()))
    lg = lin(hr, router_w)
    p = torch.sigmoid(lg) if score == "sigmoid" else torch.softmax(lg, dim=-1)
    ch = (p + bias) if bias is not None else p
    sel = torch.sort(ch.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
    w = p.gather(1, sel)
    if norm:
        w = w / (w.sum(-1, keepdim=True) + (1e-20 if score == "sigmoid" else 0.0))
    if scale != 1.0:
        w = w * torch.tensor(scale, dtype=torch.float32)
    if trace is not None:
        trace.append((lg.detach().clone(), bias, k, score))
    out = torch.zeros(N, C)
    for e, (wgu, wd) in enumerate(experts):
        tok, slot = torch.where(sel == e)
        if not tok.numel():
            continue
        gu = R(RW(R(hx[tok])) @ RW(wgu).t())
        if act == "relu2":
            a = R(torch.square(F.relu(gu)))
        else:
            g, u = gu.chunk(2, dim=-1)
            a = R(F.silu(g) * u)
        y = R(RW(a) @ RW(wd).t())
        out = out.index_add(0, tok, y * w[tok, slot, None])
    if "combine" in skip:
        out = R(out)
    if shared is not None:
        uw, ub, dw, db = shared
        su = RW(hs) @ RW(uw).t()
        su = R(su + RW(ub) if ub is not None else su)
        if shared_act == "relu2":
            sa = R(torch.square(F.relu(su)))
        else:
            sg, sv = su.chunk(2, dim=-1)
            sa = F.silu(sg) * sv if "shared_swiglu" in skip else R(F.silu(sg) * sv)
        sy = RW(sa) @ RW(dw).t()
        out = out + R(sy + RW(db) if db is not None else sy)
    return out.reshape(Bsz, T, C)


def forward(m, idx, bf16=True, residual_bf16=True, skip=(), trace=None):
    """Logits (B, T, V) of llama_ref model m with the bf16 rounding points
    (bf16=False: the same code with every rounding off, the fp32 model).
    Gemma 2 / 3 (c.gemma): norms times 1 + w (w gathered in bf16, the sum in
    fp32), embeddings times sqrt(hidden) in fp32 (then the stream's rounding), the
    post-attention / post-feedforward norms' outputs rounded when stored
    with a straight-through gradient (they are added into the fp32 stream,
    whose gradient reaches their backward unrounded), tanh-GELU GeGLU, the
    scores' scale and softcap in fp32, per-layer windows and Gemma 3's local
    RoPE, the final softcap in fp32 on the rounded logits. Mixtral (c.num_experts): the sparse MLP is
    moe_mlp on the rounded ln2 (softmax scores, renormalised top-k, SwiGLU experts), its fp32 output added to
    the stream, which is then rounded; skip / trace: moe_mlp's."""
    R, RW = (r, rw) if bf16 else (_ident, _ident)
    RS = rw if bf16 and residual_bf16 else _ident  # the residual stream's rounding
    c = m.config

    def rmsnorm(x, w, eps):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (1.0 + RW(w) if c.gemma else RW(w))

    def linear(x, w):  # bf16 operands, fp32 accumulation, output stored in bf16
        return R(RW(x) @ RW(w).t())

    B, T = idx.shape
    nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    tables = {False: cos_sin(T, hd, c.rope_theta, c if c.gemma else None),
              True: cos_sin(T, hd, c.rope_local_theta)}  # True: Gemma 3's local layers
    act = (lambda v: F.gelu(v, approximate="tanh")) if c.gemma else F.silu
    x = F.embedding(idx, RW(m.model.embed_tokens.weight))
    if c.gemma:
        x = x * math.sqrt(c.hidden_size)
    x = RS(x)
    for layer in m.model.layers:
        a = layer.self_attn
        cos, sin = (t[None, None] for t in tables[bool(c.gemma and layer.local)])
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        win = c.sliding_window if c.mistral else a.window  # Mistral's on every layer, else the layer's
        if win > 0:
            mask = mask | torch.ones(T, T, dtype=torch.bool).tril(-win)
        h = R(rmsnorm(x, layer.input_layernorm.weight, c.rms_norm_eps))
        q = linear(h, a.q_proj.weight).view(B, T, nh, hd)
        k = linear(h, a.k_proj.weight).view(B, T, nkv, hd)
        if c.qk_norm:  # Qwen3: per head over head_dim before RoPE, the output stored in bf16
            q = R(rmsnorm(q, a.q_norm.weight, c.rms_norm_eps))
            k = R(rmsnorm(k, a.k_norm.weight, c.rms_norm_eps))
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = linear(h, a.v_proj.weight).view(B, T, nkv, hd).transpose(1, 2)
        q = R(q * cos + L.rotate_half(q) * sin)
        k = R(k * cos + L.rotate_half(k) * sin)
        rep = nh // nkv
        att = _Attention.apply(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), mask, R,
                               c.attn_scale if c.gemma else None, c.attn_softcap)
        att = R(att.transpose(1, 2).reshape(B, T, nh * hd))
        y = linear(att, a.o_proj.weight)
        x = RS(x + (RW(rmsnorm(y, layer.post_attention_layernorm.weight, c.rms_norm_eps)) if c.gemma else y))
        ln2 = layer.pre_feedforward_layernorm if c.gemma else layer.post_attention_layernorm
        h = R(rmsnorm(x, ln2.weight, c.rms_norm_eps))
        if c.num_experts:  # Mixtral's block_sparse_moe (Qwen3-MoE's mlp: the same block, not checked here)
            blk = layer.block_sparse_moe if c.mixtral else layer.mlp
            ex = [(torch.cat([e.w1.weight, e.w3.weight]), e.w2.weight) if c.mixtral else
                  (torch.cat([e.gate_proj.weight, e.up_proj.weight]), e.down_proj.weight) for e in blk.experts]
            y = moe_mlp(h, blk.gate.weight, ex, "swiglu", R, RW, c.top_k, "softmax", c.norm_topk_prob, skip=skip,
                        trace=trace)
            x = RS(x + y)
            continue
        mlp = layer.mlp
        g = linear(h, mlp.gate_proj.weight)
        u = linear(h, mlp.up_proj.weight)
        y = linear(R(act(g) * u), mlp.down_proj.weight)
        x = RS(x + (RW(rmsnorm(y, layer.post_feedforward_layernorm.weight, c.rms_norm_eps)) if c.gemma else y))
    x = R(rmsnorm(x, m.model.norm.weight, c.rms_norm_eps))
    return L.softcap(linear(x, m.head_weight()), c.final_softcap)


class _Fan3(torch.autograd.Function):
    """u -> (u, u, u); backward R(R(R(g1) + g2) + g3) (R: rounding or identity)."""

    @staticmethod
    def forward(ctx, u, R):
        ctx.R = R
        return u.clone(), u.clone(), u.clone()

    @staticmethod
    def backward(ctx, g1, g2, g3):
        R = ctx.R
        return R(R(R(g1) + g2) + g3), None


def mamba_forward(m, idx, bf16=True):
    """Logits (B, T, V) of mamba_ref model m with the bf16 rounding points."""
    R, RW = (r, rw) if bf16 else (_ident, _ident)
    c = m.config
    T = idx.shape[1]
    D, S, Rk, K = c.intermediate_size, c.state_size, c.time_step_rank, c.conv_kernel

    def rmsnorm(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.layer_norm_epsilon)) * RW(w)

    def linear(x, w, b=None):
        y = RW(x) @ RW(w).t()
        return R(y + RW(b) if b is not None else y)

    x = F.embedding(idx, RW(m.backbone.embeddings.weight))  # fp32 residual stream
    for layer in m.backbone.layers:
        mx = layer.mixer
        ln = R(rmsnorm(x, layer.norm.weight))
        xz = linear(ln, mx.in_proj.weight, mx.in_proj.bias)
        xc, z = xz[..., :D], xz[..., D:]
        cb = RW(mx.conv1d.bias) if mx.conv1d.bias is not None else None
        xcp = R(F.conv1d(xc.transpose(1, 2), RW(mx.conv1d.weight), cb, padding=K - 1, groups=D)[..., :T]
                .transpose(1, 2))
        u = R(F.silu(xcp))
        u_scan, u_dt, u_bc = _Fan3.apply(u, R)
        wx = mx.x_proj.weight
        dtr = linear(u_dt, wx[:Rk])
        bc = linear(u_bc, wx[Rk:])
        if c.falcon:  # the weightless dt/B/C norms (fp32 math), their outputs stored in bf16
            dtr = R(M.rms_weightless(dtr, c.mixer_rms_eps))
            bc = torch.cat([R(M.rms_weightless(bc[..., :S], c.mixer_rms_eps)),
                            R(M.rms_weightless(bc[..., S:], c.mixer_rms_eps))], -1)
        dtv = linear(dtr, mx.dt_proj.weight, mx.dt_proj.bias)
        y = R(M.scan_sequential(u_scan, F.softplus(dtv), -torch.exp(RW(mx.A_log)), bc[..., :S], bc[..., S:],
                                RW(mx.D)))
        g = R(y * F.silu(z))
        x = x + linear(g, mx.out_proj.weight, mx.out_proj.bias)
    x = R(rmsnorm(x, m.backbone.norm_f.weight))
    return linear(x, m.head_weight())


def _m2_mixer(mx, ln, R, RW):
    """The output (B, T, H) of a Mamba-2 mixer mx (mamba2_ref.Mamba2Mixer; its config mx.c) on the rounded
    block-norm output ln, with mamba2_forward's rounding points (below)."""
    c = mx.c
    B, T = ln.shape[:2]
    D, S, K, nh, G, P = (c.intermediate_size, c.state_size, c.conv_kernel, c.num_heads, c.n_groups,
                         c.head_dim)
    Cd, GS, eps = D + 2 * G * S, G * S, c.layer_norm_epsilon

    def linear(x, w, b=None):
        y = RW(x) @ RW(w).t()
        return R(y + RW(b) if b is not None else y)

    zx = linear(ln, mx.in_proj.weight, mx.in_proj.bias)
    z, xbc, dtr = zx[..., :D], zx[..., D:D + Cd], zx[..., D + Cd:]
    cb = RW(mx.conv1d.bias) if mx.conv1d.bias is not None else None
    xc = R(F.conv1d(xbc.transpose(1, 2), RW(mx.conv1d.weight), cb, padding=K - 1, groups=Cd)[..., :T]
           .transpose(1, 2))
    xbc = R(F.silu(xc))
    xs, Bm, Cm = xbc[..., :D], xbc[..., D:D + GS], xbc[..., D + GS:]
    dt = torch.clamp(F.softplus(dtr + RW(mx.dt_bias)), c.time_step_limit[0], c.time_step_limit[1])
    rep = nh // G
    Bm = Bm.reshape(B, T, G, S).repeat_interleave(rep, dim=2)
    Cm = Cm.reshape(B, T, G, S).repeat_interleave(rep, dim=2)
    y = R(M2.ssd_sequential(xs.reshape(B, T, nh, P), dt, -torch.exp(RW(mx.A_log)), Bm, Cm, RW(mx.D))
          .reshape(B, T, D))
    g = RW(y * F.silu(z))  # stored in bf16, its gradient fp32 (mamba2_forward)
    w = mx.norm.weight.reshape(G, D // G)
    gg = g.reshape(B, T, G, D // G)
    gn = R(((gg * torch.rsqrt(gg.pow(2).mean(-1, keepdim=True) + eps)) * RW(w)).reshape(B, T, D))
    return linear(gn, mx.out_proj.weight, mx.out_proj.bias)


def mamba2_forward(m, idx, bf16=True):
    """Logits (B, T, V) of mamba2_ref model m with the bf16 rounding points of
    models/mamba2.c's ops (kernels/bf16.c): the block norm's, in_proj's, the
    conv's, SiLU's, the scan's y, the gate's and the gated norm's outputs
    stored in bf16 (R); every parameter as gathered in bf16 (RW); the
    residual stream fp32 (no bf16_stream cap: residual_in_fp32). The scan is
    mamba2_ref's sequential recurrence in fp32 on the rounded x, B, C and
    the rounded dt columns of in_proj's output (the engine's ssd_fwd/bwd
    compute in fp32 and round only y and the input gradients dx, ddt, dB,
    dC; ddt_bias, dA_log, dD fp32). Gradients: each R's backward rounds the
    gradient of the tensor it stores, which for in_proj's output is the one
    buffer dzx holding the gate's dz, the conv's dx and the scan's ddt in
    disjoint columns, and for SiLU's output dxbc (the scan's dx | dB | dC,
    dB and dC summed over a group's heads in fp32 before the rounding).
    The gate's output g: rounded when stored (gate_fwd) but its gradient dg
    is rmsnorm_bwd's input gradient, which the engine keeps in fp32 and
    gate_bwd multiplies unrounded: straight-through (RW). The mixer is
    _m2_mixer (shared with nemotron_h_forward)."""
    R, RW = (r, rw) if bf16 else (_ident, _ident)
    c = m.config
    eps = c.layer_norm_epsilon

    def rmsnorm(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * RW(w)

    def linear(x, w):
        return R(RW(x) @ RW(w).t())

    x = F.embedding(idx, RW(m.backbone.embeddings.weight))  # fp32 residual stream
    for layer in m.backbone.layers:
        x = x + _m2_mixer(layer.mixer, R(rmsnorm(x, layer.norm.weight)), R, RW)
    x = R(rmsnorm(x, m.backbone.norm_f.weight))
    w = m.backbone.embeddings.weight if c.tie_word_embeddings else m.lm_head.weight
    return linear(x, w)


def nemotron_h_forward(m, idx, bf16=True, skip=(), trace=None):
    """Logits (B, T, V) of nemotron_h_ref model m with the bf16 rounding points of the engine's two block
    kinds (models/decoder.c selects one per layer): every layer is x + mixer(R(rmsnorm(x))) on an fp32
    residual stream (a hybrid with a Mamba-2 layer: the mamba2 kind has no bf16_stream cap, so the
    skeleton's stream and llama.c's xmid stay fp32 and unrounded);
      'M'  _m2_mixer, mamba2_forward's layer;
      '*'  the Llama attention sub-layer with no RoPE (models/llama.c block_forward, LP_ATTN alone:
           ln1 R, q / k / v = the qkv GEMM's output R (biases: attention_bias), attention on it
           (out R, the custom backward's D from the stored O), o_proj R, xmid = x + y in fp32, copied
           to the block output);
      '-'  the Llama MLP sub-layer (LP_MLP alone: ln2 = R(rmsnorm(x)) of the block input itself,
           up_proj R, relu2_fwd R (kernels/bf16.c ACT_WRAPPERS: out R, its backward's dx R), down_proj
           R, added to x in fp32);
      'E'  the MoE (the Llama MLP sub-layer with the sparse MLP, LP_MLP alone): moe_mlp on ln2 with the
           sigmoid scores, e_score_correction_bias in the selection, routed_scaling_factor, relu2 experts and
           the shared expert, the sum added to x in fp32;
    then norm_f R and the head's logits R. skip: names of rounding points left out, for the negative
    control only ("relu2": relu2's output and its gradient unrounded; moe_mlp's); trace: moe_mlp's."""
    R, RW = (r, rw) if bf16 else (_ident, _ident)
    c = m.config
    B, T = idx.shape
    nh, nkv, hd, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.layer_norm_epsilon
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)

    def rmsnorm(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * RW(w)

    def linear(x, w, b=None):
        y = RW(x) @ RW(w).t()
        return R(y + RW(b) if b is not None else y)

    x = F.embedding(idx, RW(m.backbone.embeddings.weight))  # fp32 residual stream
    for layer in m.backbone.layers:
        h = R(rmsnorm(x, layer.norm.weight))
        mx = layer.mixer
        if layer.kind == "mamba":
            y = _m2_mixer(mx, h, R, RW)
        elif layer.kind == "attention":
            q = linear(h, mx.q_proj.weight, mx.q_proj.bias).view(B, T, nh, hd).transpose(1, 2)
            k = linear(h, mx.k_proj.weight, mx.k_proj.bias).view(B, T, nkv, hd).transpose(1, 2)
            v = linear(h, mx.v_proj.weight, mx.v_proj.bias).view(B, T, nkv, hd).transpose(1, 2)
            rep = nh // nkv
            att = _Attention.apply(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), mask, R)
            att = R(att.transpose(1, 2).reshape(B, T, nh * hd))
            y = linear(att, mx.o_proj.weight, mx.o_proj.bias)
        elif layer.kind == "moe":
            assert c.n_group == 1 or c.topk_group == c.n_group, "the group-limited top-k is not mirrored"
            sh = mx.shared_experts
            y = moe_mlp(h, mx.gate.weight, [(e.up_proj.weight, e.down_proj.weight) for e in mx.experts], "relu2",
                        R, RW, c.num_experts_per_tok, "sigmoid", c.norm_topk_prob, c.routed_scaling_factor,
                        mx.gate.e_score_correction_bias, (sh.up_proj.weight, sh.up_proj.bias, sh.down_proj.weight,
                                                          sh.down_proj.bias), skip, trace)
        else:
            u = linear(h, mx.up_proj.weight, mx.up_proj.bias)
            a = torch.square(F.relu(u))
            y = linear(a if "relu2" in skip else R(a), mx.down_proj.weight, mx.down_proj.bias)
        x = x + y
    x = R(rmsnorm(x, m.backbone.norm_f.weight))
    w = m.backbone.embeddings.weight if c.tie_word_embeddings else m.lm_head.weight
    return linear(x, w)


def granite_h_forward(m, idx, bf16=True, skip=(), trace=None):
    """Logits (B, T, V) of granite_h_ref model m with the bf16 rounding points of the engine: each HF layer
    is two decoder layers on an fp32 residual stream (the mamba2 kind has no bf16_stream cap), a mixer
    sub-layer ('M' _m2_mixer, or '*' nemotron_h_forward's attention without RoPE, its scores times
    attention_multiplier in fp32) then '-' the shared SwiGLU MLP (ln2 R, input_linear [g | u] R,
    swiglu_fwd R (its backward's dgu R), output_linear R) or, with block_sparse_moe (config_moe: every MLP
    sub-layer 'E', the Llama kind's sparse MLP, models/llama_moe.c), moe_mlp on ln2: the router's logits R,
    the softmax over all E renormalised over the top k in fp32 (transformers' softmax over the k largest
    logits: the same numbers), SwiGLU experts (input_linear[e]'s gate | up rows, output_linear[e]) and the
    shared MLP as its shared expert (swiglu), their fp32 sum the sub-layer's output. The multipliers are the
    engine's scale_add, which does not round (docs/bf16.md's table):
      residual_multiplier: a sub-layer's rounded output (the row-parallel sum of its last GEMM; the MoE's
        fp32 sum) times rm in fp32, added to the stream in fp32; its backward scales dres in fp32 and the
        GEMM rounds that operand (the output's R here rounds rm * dres: the same value; the MoE's combine
        and shared expert take rm * dres unrounded, sl_llama_rmult_grad);
      embedding_multiplier: the embedding rows times it in fp32 (its gradient likewise);
      logits_scaling: norm_f's output is stored R (rmsnorm_fwd), then times 1 / logits_scaling in fp32
        (sl_lm_head_lscale), which the head GEMM rounds as its operand; in backward the head's dx is
        rounded (lmhead_ce_bwd) before the 1 / logits_scaling scale and rmsnorm_bwd takes the product in
        fp32: so norm_f's output rounds straight-through (RW) and the scaled rows are r(), whose backward
        rounds dx before the scale.
    skip, the negative controls only: "scale_add" rounds each multiplier's output as if scale_add were a
    bf16-wrapped op (r() after the residual and embedding scales; on the head the scaled gradient rounded
    after the scale, R(rmsnorm) * lscale then the GEMM's operand rounding); moe_mlp's. trace: moe_mlp's."""
    R, RW = (r, rw) if bf16 else (_ident, _ident)
    RS = R if "scale_add" in skip else _ident
    c = m.config
    B, T = idx.shape
    nh, nkv, hd, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    f32 = lambda v: torch.tensor(float(v), dtype=torch.float32)  # the engine's (float) multipliers
    rm, ls = f32(m.model.layers[0].rm), f32(1.0) / f32(m.logits_scaling)

    def rmsnorm(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * RW(w)

    def linear(x, w, b=None):
        y = RW(x) @ RW(w).t()
        return R(y + RW(b) if b is not None else y)

    x = RS(F.embedding(idx, RW(m.model.embed_tokens.weight)) * f32(m.embedding_multiplier))  # fp32 stream
    for layer in m.model.layers:
        h = R(rmsnorm(x, layer.input_layernorm.weight))
        if layer.kind == "mamba":
            y = _m2_mixer(layer.mamba, h, R, RW)
        else:
            a = layer.self_attn
            q = linear(h, a.q_proj.weight, a.q_proj.bias).view(B, T, nh, hd).transpose(1, 2)
            k = linear(h, a.k_proj.weight, a.k_proj.bias).view(B, T, nkv, hd).transpose(1, 2)
            v = linear(h, a.v_proj.weight, a.v_proj.bias).view(B, T, nkv, hd).transpose(1, 2)
            rep = nh // nkv
            att = _Attention.apply(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), mask, R,
                                   a.c.attn_scale)
            att = R(att.transpose(1, 2).reshape(B, T, nh * hd))
            y = linear(att, a.o_proj.weight, a.o_proj.bias)
        x = x + RS(y * rm)
        h = R(rmsnorm(x, layer.post_attention_layernorm.weight))
        mlp, moe = layer.shared_mlp, layer.block_sparse_moe
        if moe is not None:  # the MoE (config_moe): the sparse MLP with the shared MLP as its shared expert
            y = moe_mlp(h, moe.router.layer.weight,
                        [(moe.input_linear.weight[e], moe.output_linear.weight[e]) for e in range(c.num_local_experts)],
                        "swiglu", R, RW, c.num_experts_per_tok, "softmax", True,
                        shared=(mlp.input_linear.weight, None, mlp.output_linear.weight, None), skip=skip, trace=trace,
                        shared_act="swiglu")
        else:
            gu = linear(h, mlp.input_linear.weight)
            g, u = gu.chunk(2, dim=-1)
            y = linear(R(F.silu(g) * u), mlp.output_linear.weight)
        x = x + RS(y * rm)
    w = m.model.embed_tokens.weight if c.tie_word_embeddings else m.lm_head.weight
    if "scale_add" in skip:
        xh = R(rmsnorm(x, m.model.norm.weight)) * ls
    else:
        xh = (r if bf16 else _ident)(RW(rmsnorm(x, m.model.norm.weight)) * ls)
    return linear(xh, w)


def granite_forward(m, idx, bf16=True, residual_bf16=True, skip=()):
    """Logits (B, T, V) of granite_ref model m (Granite 3.x: Llama's layers with the four muP multipliers,
    RoPE) with the bf16 rounding points of the engine's Llama kind (forward()'s: ln1 R, q / k / v R, RoPE R,
    attention R (its scores times attention_multiplier in fp32, the engine's p->scale), o_proj R, ln2 R,
    gate / up R, swiglu R, down R, the residual stream rounded straight-through (RS) after the embedding and
    after each residual add) and the multipliers placed as granite_h_forward places them, in fp32 where the
    engine's scale_add applies them: the embedding rows times embedding_multiplier, then the stream's
    rounding; a sub-layer's rounded output times residual_multiplier (llama.c block_forward: scale_add on
    o_proj's / down_proj's output before the residual add), added to the stream, then rounded (xmid, the
    block output); norm's output R times 1 / logits_scaling, which the head GEMM rounds as its operand, its
    gradient rounded (lmhead_ce_bwd) before the scale. biases: attention_bias / mlp_bias as the GEMMs' fp32
    bias. skip: "scale_add" (the negative control) rounds after each multiplier as granite_h_forward's."""
    R, RW = (r, rw) if bf16 else (_ident, _ident)
    RS = rw if bf16 and residual_bf16 else _ident
    RM = R if "scale_add" in skip else _ident
    c = m.config
    B, T = idx.shape
    nh, nkv, hd, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps
    assert c.rope_scaling is None, "rope_scaling: not mirrored here (cos_sin's default inverse frequencies)"
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    cos, sin = (t[None, None] for t in cos_sin(T, hd, c.rope_theta))
    f32 = lambda v: torch.tensor(float(v), dtype=torch.float32)  # the engine's (float) multipliers
    rm, ls = f32(m.model.layers[0].rm), f32(1.0) / f32(m.logits_scaling)

    def rmsnorm(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * RW(w)

    def linear(x, lin):
        y = RW(x) @ RW(lin.weight).t()
        return R(y + RW(lin.bias) if lin.bias is not None else y)

    x = RS(RM(F.embedding(idx, RW(m.model.embed_tokens.weight)) * f32(m.embedding_multiplier)))
    for layer in m.model.layers:
        a = layer.self_attn
        h = R(rmsnorm(x, layer.input_layernorm.weight))
        q = linear(h, a.q_proj).view(B, T, nh, hd).transpose(1, 2)
        k = linear(h, a.k_proj).view(B, T, nkv, hd).transpose(1, 2)
        v = linear(h, a.v_proj).view(B, T, nkv, hd).transpose(1, 2)
        q = R(q * cos + L.rotate_half(q) * sin)
        k = R(k * cos + L.rotate_half(k) * sin)
        rep = nh // nkv
        att = _Attention.apply(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), mask, R,
                               a.c.attn_scale)
        att = R(att.transpose(1, 2).reshape(B, T, nh * hd))
        x = RS(x + RM(linear(att, a.o_proj) * rm))
        h = R(rmsnorm(x, layer.post_attention_layernorm.weight))
        mlp = layer.mlp
        y = linear(R(F.silu(linear(h, mlp.gate_proj)) * linear(h, mlp.up_proj)), mlp.down_proj)
        x = RS(x + RM(y * rm))
    if "scale_add" in skip:
        xh = R(rmsnorm(x, m.model.norm.weight)) * ls
    else:
        xh = (r if bf16 else _ident)(RW(rmsnorm(x, m.model.norm.weight)) * ls)
    return R(RW(xh) @ RW(m.head_weight()).t())


def dump(m, stream, B, T, bf16=True, residual_bf16=True, skip=(), trace=None):
    """Like llama_ref.dump, through forward() / mamba_forward() / mamba2_forward() /
    nemotron_h_forward() / granite_h_forward() / granite_forward() above (skip, trace: theirs)."""
    m.zero_grad(set_to_none=True)
    x, y = L.batch(stream, 0, B, T)
    if isinstance(m, M.MambaForCausalLM):
        logits = mamba_forward(m, x, bf16)
    elif isinstance(m, M2.Mamba2ForCausalLM):
        logits = mamba2_forward(m, x, bf16)
    elif isinstance(m, NH.NemotronHForCausalLM):
        logits = nemotron_h_forward(m, x, bf16, skip, trace)
    elif isinstance(m, GH.GraniteHForCausalLM):
        logits = granite_h_forward(m, x, bf16, skip, trace)
    elif isinstance(m, G.GraniteForCausalLM):
        logits = granite_forward(m, x, bf16, residual_bf16, skip)
    else:
        logits = forward(m, x, bf16, residual_bf16, skip, trace)
    loss = L.loss_fn(logits, y)
    loss.backward()
    out = {"logits": logits.detach().reshape(B * T, -1).numpy().copy(),
           "loss": np.array([loss.item()], dtype=np.float32)}
    for n, p in m.named_parameters():
        out["grad." + n] = p.grad.detach().numpy().copy()
    return out
