"""Plain-PyTorch Granite 3.x oracle (HF GraniteForCausalLM, model_type "granite") for the shardlm
parity contract.

Written from transformers' models/granite (modular_granite.py, configuration_granite.py): Llama's
decoder (LlamaAttention with rotary embeddings, rope_theta / rope_scaling as Llama's; GQA; the SwiGLU
LlamaMLP gate / up / down; RMSNorms of eps rms_norm_eps) with the four muP multipliers:
    x = embed_tokens(ids) * embedding_multiplier
    per layer: x = x + self_attn(input_layernorm(x)) * residual_multiplier
               x = x + mlp(post_attention_layernorm(x)) * residual_multiplier
    logits = lm_head(norm(x)) / logits_scaling
where the attention scores are q.k * attention_multiplier (GraniteAttention sets the scaling to the
multiplier: NOT head_dim^-0.5). transformers' defaults (GraniteConfig): every multiplier 1.0 (so a
config.json without attention_multiplier scores q.k unscaled), rms_norm_eps 1e-6, rope_theta 1e4,
num_key_value_heads = num_attention_heads, head_dim = hidden_size / num_attention_heads (LlamaAttention
reads a head_dim field when there is one), attention_bias (q, k, v and o) and mlp_bias false,
lm_head untied.

The pieces are llama_ref's (imported, not copied): its Attention with an explicit score scale (its
Gemma path: scores * attn_scale, softcap 0 = none; no q/k norm, no window), its MLP, RMSNorm, RoPE
tables (rope_cos_sin with the config's rope_scaling: default, linear, llama3, yarn), the data order,
loss, dump and the training loop. Tensor names are exactly Llama's (model.embed_tokens.weight,
model.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}, model.layers.{i}.mlp.{gate,up,down}_proj.
{weight,bias}, model.layers.{i}.input_layernorm.weight, .post_attention_layernorm.weight,
model.norm.weight, lm_head.weight when untied).

The rope may be given as rope_theta + rope_scaling (Granite 3's published configs) or as
transformers 5's rope_parameters ({"rope_type", "rope_theta", ...}); both at once are refused.
config.json is written in the first form.

Negative-control variants (GraniteForCausalLM / load_hf keywords): ignore=(names from MULTIPLIERS)
takes each named multiplier as 1 (an ignored attention_multiplier falls back to Llama's
head_dim^-0.5); plain_rope=True drops rope_scaling (default RoPE on rope_theta).

Run as a script: the oracle's self-checks (see selfcheck), "N passed, M failed".
"""
import math
import os
import sys
import tempfile
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402  (attention, MLP, RMSNorm, RoPE, data, dump, train)

# the multipliers a negative-control variant may drop (taken as 1): ignore=(...)
MULTIPLIERS = ("embedding_multiplier", "residual_multiplier", "logits_scaling", "attention_multiplier")
ARCH, MODEL_TYPE = "GraniteForCausalLM", "granite"


class GraniteConfig:
    """The GraniteForCausalLM config.json fields the engine reads, with transformers' defaults
    (configuration_granite.py)."""

    def __init__(self, d):
        d = dict(d)
        archs = d.get("architectures") or []
        if d.get("model_type", MODEL_TYPE) != MODEL_TYPE or (archs and archs != [ARCH]):
            raise ValueError(f"not a Granite config: model_type {d.get('model_type')!r}, architectures {archs}")
        act = d.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r}: only 'silu' (LlamaMLP's SwiGLU) is in this reference")
        self.vocab_size = int(d.get("vocab_size", 32000))
        self.hidden_size = int(d.get("hidden_size", 4096))
        self.intermediate_size = int(d.get("intermediate_size", 11008))
        self.num_hidden_layers = int(d.get("num_hidden_layers", 32))
        self.num_attention_heads = int(d.get("num_attention_heads", 32))
        kv = d.get("num_key_value_heads")
        self.num_key_value_heads = int(kv if kv is not None else self.num_attention_heads)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_key_value_heads must divide num_attention_heads")
        hd = d.get("head_dim")  # LlamaAttention: getattr(config, "head_dim", hidden // heads)
        self.head_dim = int(hd) if hd is not None else self.hidden_size // self.num_attention_heads
        self.max_position_embeddings = int(d.get("max_position_embeddings", 2048))
        self.initializer_range = float(d.get("initializer_range", 0.02))
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.attention_bias = bool(d.get("attention_bias", False))
        self.mlp_bias = bool(d.get("mlp_bias", False))
        for k in MULTIPLIERS:
            v = float(d.get(k, 1.0))
            if not v > 0:
                raise ValueError(f"{k} {v}: must be positive")
            setattr(self, k, v)
        rp = d.get("rope_parameters")
        if rp is not None:  # transformers 5: one object
            if d.get("rope_scaling") is not None:
                raise ValueError("rope_scaling and rope_parameters both set (transformers 5 reads only the latter)")
            rp = dict(rp)
            self.rope_theta = float(rp.pop("rope_theta", d.get("rope_theta", 10000.0)))
            kind = rp.get("rope_type", rp.get("type", "default"))
            self.rope_scaling = None if kind == "default" else rp
        else:
            self.rope_theta = float(d.get("rope_theta", 10000.0))
            rs = d.get("rope_scaling")
            self.rope_scaling = dict(rs) if rs else None
        self.bos_token_id, self.eos_token_id = d.get("bos_token_id", 1), d.get("eos_token_id", 2)

    def to_dict(self):
        d = {"architectures": [ARCH], "model_type": MODEL_TYPE, "vocab_size": self.vocab_size,
             "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
             "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
             "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim, "hidden_act": "silu",
             "max_position_embeddings": self.max_position_embeddings, "initializer_range": self.initializer_range,
             "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling,
             "tie_word_embeddings": self.tie_word_embeddings, "attention_bias": self.attention_bias,
             "attention_dropout": 0.0, "mlp_bias": self.mlp_bias, "bos_token_id": self.bos_token_id,
             "eos_token_id": self.eos_token_id, "torch_dtype": "float32"}
        d.update({k: getattr(self, k) for k in MULTIPLIERS})
        return d


def make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96, vocab=97, tied=False, eps=1e-5,
                theta=10000.0, embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
                logits_scaling=2.5, **extra):
    """A tiny config, every multiplier != 1 so that each matters; extra: more config.json fields
    (head_dim, attention_bias, mlp_bias, rope_scaling, max_position_embeddings, ...)."""
    d = dict(architectures=[ARCH], model_type=MODEL_TYPE, hidden_size=hidden, intermediate_size=intermediate,
             num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
             rms_norm_eps=eps, rope_theta=theta, tie_word_embeddings=tied,
             embedding_multiplier=embedding_multiplier, residual_multiplier=residual_multiplier,
             attention_multiplier=attention_multiplier, logits_scaling=logits_scaling)
    d.update(extra)
    return GraniteConfig(d)


# llama3 rope_scaling for T = 16: of head_dim 16's 8 frequencies (theta 1e4), the first (wavelength 6.3)
# lies between the high- and low-frequency wavelengths 4 and 16 (interpolated), the other 7 beyond 16
# (divided by factor): the scaling changes every rotation but the constant pair's
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


def config_untied(vocab=97):
    """The checks' first: 2 layers, GQA 4 / 2 heads of 16, untied, no biases, default RoPE, the
    multipliers 3.0 / 0.5 / 0.2 / 2.5 (embedding / residual / attention / logits_scaling)."""
    return make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96, vocab=vocab)


def config_tied(vocab=97):
    """The second: 3 layers, MQA 3 / 1 heads of 16 (hidden 48), tied, attention_bias and mlp_bias,
    rope_theta 1e4 with llama3 rope_scaling (LLAMA3), other multipliers (2.0 / 0.7 / 0.15 / 1.75),
    eps 1e-6."""
    return make_config(hidden=48, layers=3, heads=3, kv_heads=1, intermediate=80, vocab=vocab, tied=True, eps=1e-6,
                       theta=10000.0, embedding_multiplier=2.0, residual_multiplier=0.7, attention_multiplier=0.15,
                       logits_scaling=1.75, attention_bias=True, mlp_bias=True, rope_scaling=dict(LLAMA3),
                       max_position_embeddings=64)


# ------------------------------------------------------------------- model

def attention_view(c, scale):
    """The attributes llama_ref's Attention reads: GQA, attention_bias on all four projections, the
    score scale `scale` (its Gemma path: scores * attn_scale, softcap 0 = none; no q/k norm, no window)."""
    return SimpleNamespace(hidden_size=c.hidden_size, head_dim=c.head_dim, num_attention_heads=c.num_attention_heads,
                           num_key_value_heads=c.num_key_value_heads, qkv_bias=c.attention_bias,
                           o_bias=c.attention_bias, qk_norm=False, rms_norm_eps=c.rms_norm_eps, gemma=True,
                           attn_scale=scale, attn_softcap=0.0, sliding_window=0, mistral=False)


def mlp_view(c):
    """The attributes llama_ref's MLP reads: down(silu(gate x) * up x), bias mlp_bias."""
    return SimpleNamespace(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, mlp_bias=c.mlp_bias,
                           act="silu")


class DecoderLayer(nn.Module):
    """GraniteDecoderLayer: LlamaDecoderLayer with both residual updates times residual_multiplier."""

    def __init__(self, c, rm, scale):
        super().__init__()
        self.rm = rm
        self.input_layernorm = L.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = L.Attention(attention_view(c, scale))
        self.post_attention_layernorm = L.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = L.MLP(mlp_view(c))

    def forward(self, x, cos, sin, hide=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, hide) * self.rm
        return x + self.mlp(self.post_attention_layernorm(x)) * self.rm


class GraniteModel(nn.Module):
    def __init__(self, c, rm, scale):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, rm, scale) for _ in range(c.num_hidden_layers)])
        self.norm = L.RMSNorm(c.hidden_size, c.rms_norm_eps)


class GraniteForCausalLM(nn.Module):
    """named_parameters() yields exactly transformers' checkpoint names. Variants for negative
    controls only: ignore (names from MULTIPLIERS taken as 1; an ignored attention_multiplier falls
    back to Llama's head_dim^-0.5), plain_rope (rope_scaling dropped)."""

    def __init__(self, c, ignore=(), plain_rope=False):
        super().__init__()
        bad = sorted(set(ignore) - set(MULTIPLIERS))
        if bad:
            raise ValueError(f"ignore: unknown multipliers {bad}")
        self.config, self.plain_rope = c, plain_rope
        mult = {k: (1.0 if k in ignore else getattr(c, k)) for k in MULTIPLIERS}
        if "attention_multiplier" in ignore:
            mult["attention_multiplier"] = c.head_dim ** -0.5
        self.embedding_multiplier, self.logits_scaling = mult["embedding_multiplier"], mult["logits_scaling"]
        self.model = GraniteModel(c, mult["residual_multiplier"], mult["attention_multiplier"])
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    def forward(self, idx, seg=None):
        """idx (B, T) int64 -> logits (B, T, V); positions 0..T-1 per row. seg (B, T) or None: where
        each token's document starts (packed documents, as llama_ref's: position t - seg[t], query i
        sees key j only when seg[i] <= j <= i)."""
        c = self.config
        T = idx.shape[1]
        cos, sin = L.rope_cos_sin(T, c.head_dim, c.rope_theta, self.model.norm.weight.dtype,
                                  None if self.plain_rope else c)
        hide = None
        if seg is not None:
            pos = torch.arange(T)[None, :] - seg
            cos, sin = cos[pos], sin[pos]
            hide = torch.arange(T)[None, None, :] < seg[:, :, None]
        x = self.model.embed_tokens(idx) * self.embedding_multiplier
        for layer in self.model.layers:
            x = layer(x, cos, sin, hide)
        x = self.model.norm(x)
        return (x @ self.head_weight().t()) / self.logits_scaling


# With RoPE no gradient is analytically zero (a key bias is rotated differently at each position).
ZERO_GRAD = ()
loss_fn = L.loss_fn
dump = L.dump
train = L.train
save_hf = L.save_hf  # config.json from m.config.to_dict(), the weights by HF name, F32


def init_model(c, seed=0, std=0.14, norm_jitter=0.1, model=None):
    """llama_ref's init on a Granite model: N(0, std) for every matrix and bias, norms
    1 + N(0, norm_jitter) (std 0.14, not initializer_range: the multipliers shrink the logits, and the
    checks' 10 steps want gradient clipping active). model: a GraniteForCausalLM of c to fill."""
    g = torch.Generator().manual_seed(seed)
    m = GraniteForCausalLM(c) if model is None else model
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2 or name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                p.copy_(1.0 + norm_jitter * torch.randn(p.shape, generator=g))
    return m


def load_hf(model_dir, dtype=torch.float32, **variant):
    """Load an HF Granite dir (one model.safetensors): every parameter present with its shape, no
    unknown tensor (a stored tied lm_head tolerated). variant: ignore / plain_rope."""
    c = GraniteConfig(common.config_read(model_dir))
    return common.load_params(GraniteForCausalLM(c, **variant).to(dtype),
                              os.path.join(model_dir, "model.safetensors"),
                              ("lm_head.weight",) if c.tie_word_embeddings else ())


def greedy(m, prompt, n):
    """Greedy continuation by full recompute (no cache): (n new token ids, the smallest gap between
    the top two logits along the n picks)."""
    ids, gap = list(prompt), float("inf")
    with torch.no_grad():
        for _ in range(n):
            lg = m(torch.tensor([ids], dtype=torch.int64))[0, -1]
            top = torch.topk(lg, 2).values
            gap = min(gap, float(top[0] - top[1]))
            ids.append(int(torch.argmax(lg)))
    return ids[len(prompt):], gap


# -------------------------------------------------------------- self-checks

def naive_logits(m, idx, ignore=(), plain_rope=False):
    """transformers' GraniteForCausalLM forward written out from its formulas in the model's dtype,
    one (row, head, query) at a time, independent of llama_ref's modules: embeddings times
    embedding_multiplier; per layer h = RMSNorm(x) (x * rsqrt(mean(x^2) + eps) * w); q/k/v = W h + b;
    each head's q and k rotated pairwise (i, i + hd/2) by position * inv_freq[i] (default:
    theta^(-2i/hd); linear: / factor; llama3: by wavelength, divided by factor beyond
    original_max / low_freq_factor, kept below original_max / high_freq_factor, interpolated between);
    kv head h // (nh / nkv); scores q.k * attention_multiplier over keys u <= t, softmax; o_proj; the
    residual update times residual_multiplier; the MLP down(silu(gate h) * up h); residual again;
    final norm; lm_head (or embed_tokens when tied) divided by logits_scaling. ignore / plain_rope:
    the variants' meaning (an ignored attention_multiplier is head_dim^-0.5)."""
    c = m.config
    P = {n: p.detach() for n, p in m.named_parameters()}
    dt = P["model.norm.weight"].dtype
    mult = {k: (1.0 if k in ignore else getattr(c, k)) for k in MULTIPLIERS}
    if "attention_multiplier" in ignore:
        mult["attention_multiplier"] = c.head_dim ** -0.5
    hd, nh, nkv, half = c.head_dim, c.num_attention_heads, c.num_key_value_heads, c.head_dim // 2
    inv = [c.rope_theta ** (-2.0 * i / hd) for i in range(half)]
    rs = None if plain_rope else c.rope_scaling
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if kind == "linear":
        inv = [f / rs["factor"] for f in inv]
    elif kind == "llama3":
        fac, lo, hi, orig = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < orig / hi:
                out.append(f)
            elif wl > orig / lo:
                out.append(f / fac)
            else:
                s = (orig / wl - lo) / (hi - lo)
                out.append((1 - s) * f / fac + s * f)
        inv = out
    elif kind != "default":
        raise ValueError(f"naive_logits: rope_type {kind!r} not written out here")

    def lin(h, name):
        y = h @ P[name + ".weight"].t()
        return y + P[name + ".bias"] if name + ".bias" in P else y

    def rms(h, name):
        return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + c.rms_norm_eps) * P[name]

    def rot(v, pos):  # v (hd,)
        out = v.clone()
        for i in range(half):
            a = pos * inv[i]
            out[i] = v[i] * math.cos(a) - v[i + half] * math.sin(a)
            out[i + half] = v[i + half] * math.cos(a) + v[i] * math.sin(a)
        return out

    B, T = idx.shape
    x = P["model.embed_tokens.weight"][idx] * mult["embedding_multiplier"]
    for li in range(c.num_hidden_layers):
        pre = f"model.layers.{li}."
        h = rms(x, pre + "input_layernorm.weight")
        q, k, v = (lin(h, pre + f"self_attn.{n}_proj") for n in "qkv")
        att = torch.zeros(B, T, nh * hd, dtype=dt)
        for b in range(B):
            ks = [[rot(k[b, u, j * hd:(j + 1) * hd], u) for u in range(T)] for j in range(nkv)]
            for hh in range(nh):
                j = hh // (nh // nkv)
                for t in range(T):
                    qt = rot(q[b, t, hh * hd:(hh + 1) * hd], t)
                    s = torch.stack([qt @ ks[j][u] for u in range(t + 1)]) * mult["attention_multiplier"]
                    p = torch.exp(s - s.max())
                    p = p / p.sum()
                    att[b, t, hh * hd:(hh + 1) * hd] = (p[:, None] * v[b, :t + 1, j * hd:(j + 1) * hd]).sum(0)
        x = x + lin(att, pre + "self_attn.o_proj") * mult["residual_multiplier"]
        h = rms(x, pre + "post_attention_layernorm.weight")
        g = lin(h, pre + "mlp.gate_proj")
        y = lin(g * torch.sigmoid(g) * lin(h, pre + "mlp.up_proj"), pre + "mlp.down_proj")
        x = x + y * mult["residual_multiplier"]
    x = rms(x, "model.norm.weight")
    w = P["model.embed_tokens.weight"] if c.tie_word_embeddings else P["lm_head.weight"]
    return (x @ w.t()) / mult["logits_scaling"]


def selfcheck():
    """The oracle's own checks (no shardlm), one line each, then "N passed, M failed"; returns the
    number failed:
      a. the model (fp64) vs naive_logits (fp64) for both check configs, and for each variant
         (every multiplier ignored in turn; the tied config without rope_scaling) vs the naive forward
         of the same variant; each variant far (> 1e-3 rel) from the model: each multiplier, and
         the llama3 scaling, matters in these configs;
      b. fp32 vs fp64 dumps (logits, loss, every gradient) within 1e-4 rel;
      c. autograd vs central finite differences (fp64) on a few scalars of every tensor;
      d. config.json: save / load round trip (same to_dict, same logits); transformers' defaults
         (no multipliers: all 1.0, the attention scale 1.0 not head_dim^-0.5; no num_key_value_heads:
         MHA; no head_dim: hidden / heads); rope_parameters (transformers 5) equals rope_theta +
         rope_scaling; both at once, a foreign model_type and hidden_act gelu refused."""
    torch.set_num_threads(2)
    res = [0, 0]

    def check(name, ok, detail=""):
        res[0 if ok else 1] += 1
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, 97, (2, 7), generator=g)
    for tag, mk in (("untied", config_untied), ("tied", config_tied)):
        c = mk(97)
        m32 = init_model(c, seed=5)
        m64 = GraniteForCausalLM(c).double()
        m64.load_state_dict(m32.state_dict())
        with torch.no_grad():
            base = m64(idx)
            e = rel(base, naive_logits(m64, idx))
            check(f"[{tag}] a. model vs transformers' forward written out (fp64)", e < 1e-12, f"rel {e:.1e}")
            variants = [dict(ignore=(k,)) for k in MULTIPLIERS] + ([dict(plain_rope=True)] if c.rope_scaling else [])
            for var in variants:
                mv = GraniteForCausalLM(c, **var).double()
                mv.load_state_dict(m32.state_dict())
                out = mv(idx)
                e1, e2 = rel(out, naive_logits(m64, idx, **var)), rel(out, base)
                check(f"[{tag}] a. variant {var}: = its written-out forward, far from the model", e1 < 1e-12 and
                      e2 > 1e-3, f"rel {e1:.1e}; vs the model {e2:.2e}")
        # b. fp32 vs fp64
        stream = np.random.RandomState(7).randint(0, 97, 400)
        d32, d64 = dump(m32, stream, 3, 16), dump(m64, stream, 3, 16)
        worst = max(d32, key=lambda k: np.abs(d32[k] - d64[k]).max() / max(np.abs(d64[k]).max(), 1e-30))
        e = float(np.abs(d32[worst] - d64[worst]).max() / max(np.abs(d64[worst]).max(), 1e-30))
        check(f"[{tag}] b. fp32 vs fp64 dump: logits, loss, every gradient (1e-4 rel)", e < 1e-4,
              f"worst {worst} rel {e:.1e}")
        # c. finite differences
        x, y = L.batch(stream, 0, 2, 8)
        m64.zero_grad(set_to_none=True)
        loss_fn(m64(x), y).backward()
        worst_fd, where = 0.0, ""
        for n, p in m64.named_parameters():
            flat = p.data.view(-1)
            for i in (0, flat.numel() // 2, flat.numel() - 1):
                old = float(flat[i])
                hstep = 1e-6 * max(1.0, abs(old))
                with torch.no_grad():
                    flat[i] = old + hstep
                    lp = float(loss_fn(m64(x), y))
                    flat[i] = old - hstep
                    lm = float(loss_fn(m64(x), y))
                    flat[i] = old
                fd, ad = (lp - lm) / (2 * hstep), float(p.grad.view(-1)[i])
                err = abs(fd - ad) / max(abs(ad), 1e-3)
                if err > worst_fd:
                    worst_fd, where = err, f"{n}[{i}] fd {fd:.6e} autograd {ad:.6e}"
        check(f"[{tag}] c. autograd vs central differences (fp64, 3 scalars of every tensor)", worst_fd < 1e-5,
              f"worst {worst_fd:.1e} ({where})")
        # d. round trip
        with tempfile.TemporaryDirectory() as td:
            save_hf(m32, td)
            back = load_hf(td)
            same = back.config.to_dict() == c.to_dict() and all(
                torch.equal(a, b) for a, b in zip(back.state_dict().values(), m32.state_dict().values()))
            check(f"[{tag}] d. save_hf / load_hf round trip (config, tensors)", same)
    # d. defaults and forms
    c = GraniteConfig({"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 40, "num_hidden_layers": 1,
                       "vocab_size": 11})
    ok = (all(getattr(c, k) == 1.0 for k in MULTIPLIERS) and c.num_key_value_heads == 4 and c.head_dim == 8
          and c.rms_norm_eps == 1e-6 and c.rope_theta == 10000.0 and not c.tie_word_embeddings
          and not c.attention_bias and not c.mlp_bias and c.rope_scaling is None)
    m = init_model(c, seed=1)
    ok = ok and m.model.layers[0].self_attn.c.attn_scale == 1.0
    check("d. transformers' defaults: multipliers 1.0 (attention scale 1.0), MHA, head_dim = hidden / heads, "
          "eps 1e-6, theta 1e4, untied, no biases", ok)
    base = config_tied().to_dict()
    rp = dict(base)
    rp["rope_parameters"] = dict(rp.pop("rope_scaling"), rope_theta=rp.pop("rope_theta"))
    check("d. rope_parameters (transformers 5) = rope_theta + rope_scaling", GraniteConfig(rp).to_dict() == base)
    bad = []
    for what, d in (("both rope forms", dict(rp, rope_scaling=LLAMA3)),
                    ("model_type llama", dict(base, model_type="llama")),
                    ("hidden_act gelu", dict(base, hidden_act="gelu"))):
        try:
            GraniteConfig(d)
            bad.append(what)
        except ValueError:
            pass
    check("d. refused: both rope forms, a foreign model_type, hidden_act gelu", not bad,
          f"accepted {bad}" if bad else "")
    print(f"{res[0]} passed, {res[1]} failed")
    return res[1]


if __name__ == "__main__":
    sys.exit(1 if selfcheck() else 0)
