"""Plain-PyTorch Llama oracle for the shardlm parity contract.

Owns: the HF Llama model in fp32 (RMSNorm, rotate-half RoPE, GQA, SwiGLU,
optional tied lm_head; Mistral's window; Qwen2's q/k/v biases and per-layer
windows; Qwen3's q/k norms; Llama's attention_bias / mlp_bias; Gemma 2 and
Gemma 3 text: (1 + w) norms, sandwich norms, scaled embeddings, GeGLU,
softcapping, local/global layers), random init + HF-dir save/load, the sequential data
order, the reference training loop (AdamW foreach=False, clip_grad_norm_,
warmup + cosine LR) and the "dump" (logits, loss, gradients of batch 0).
Written from the Hugging Face LlamaForCausalLM semantics, independent of the
engine. Parameter names are exactly the HF checkpoint names.

CLI (for manual use):
  llama_ref.py init  --out DIR [--hidden 64 ... --tied --seed N]
  llama_ref.py dump  --model DIR --data PREFIX --micro-batch B --seq-len T --out F
  llama_ref.py train --model DIR --data PREFIX --steps S ... --metrics F --save DIR
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


# ------------------------------------------------------------------ config

class LlamaConfig:
    """The LlamaForCausalLM config.json fields the engine reads."""

    def __init__(self, d):
        self.hidden_size = int(d["hidden_size"])
        self.intermediate_size = int(d["intermediate_size"])
        self.num_attention_heads = int(d["num_attention_heads"])
        self.num_key_value_heads = int(d.get("num_key_value_heads", d["num_attention_heads"]))
        self.num_hidden_layers = int(d["num_hidden_layers"])
        self.vocab_size = int(d["vocab_size"])
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.max_position_embeddings = int(d.get("max_position_embeddings") or 2048)
        # rope_scaling: None or the config.json dict (transformers' rope_type / type)
        rs = d.get("rope_scaling")
        self.rope_scaling = dict(rs) if rs else None
        hd = d.get("head_dim")
        self.head_dim = int(hd) if hd is not None else self.hidden_size // self.num_attention_heads
        if hd is None and (d.get("model_type") == "qwen3" or "Qwen3ForCausalLM" in (d.get("architectures") or [])):
            self.head_dim = 128  # Qwen3Config's default head_dim, not hidden / heads
        assert self.num_attention_heads % self.num_key_value_heads == 0
        # Mistral (MistralForCausalLM / model_type "mistral"): the same model
        # with sliding-window attention, query i sees key j iff
        # 0 <= i - j < sliding_window (null or absent: no window).
        archs = d.get("architectures") or []
        mt = d.get("model_type")
        self.mistral = mt == "mistral" or "MistralForCausalLM" in archs
        # Mixtral (MixtralForCausalLM): Mistral's attention and a sparse MLP
        # of num_local_experts SwiGLU experts (block_sparse_moe), top
        # num_experts_per_tok by the router's fp32 softmax, renormalised.
        # Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention, the same sparse
        # MLP as mlp (gate, experts.e.gate_proj/up_proj/down_proj of
        # moe_intermediate_size), renormalised only with norm_topk_prob.
        self.mixtral = mt == "mixtral" or "MixtralForCausalLM" in archs
        self.qwen3_moe = mt == "qwen3_moe" or "Qwen3MoeForCausalLM" in archs
        self.num_experts = int(d.get("num_local_experts", 8)) if self.mixtral else \
            int(d.get("num_experts", 128)) if self.qwen3_moe else 0
        self.top_k = int(d.get("num_experts_per_tok", 8 if self.qwen3_moe else 2)) if self.num_experts else 0
        self.norm_topk_prob = bool(d.get("norm_topk_prob", False)) if self.qwen3_moe else True
        self.moe_intermediate = int(d.get("moe_intermediate_size", 768)) if self.qwen3_moe else \
            int(d["intermediate_size"])
        self.router_aux_loss_coef = float(d.get("router_aux_loss_coef", 0.001))
        self.output_router_logits = bool(d.get("output_router_logits", False))
        # Qwen2 (Qwen2ForCausalLM): q/k/v with a bias, o_proj without.
        # Qwen3 (Qwen3ForCausalLM): RMSNorm over head_dim of every q and k
        # head (q_norm, k_norm) before RoPE; attention_bias on all four.
        # Llama: attention_bias on all four, mlp_bias on the MLP.
        self.qwen2 = mt == "qwen2" or "Qwen2ForCausalLM" in archs
        self.qwen3 = mt == "qwen3" or "Qwen3ForCausalLM" in archs or self.qwen3_moe
        ab = bool(d.get("attention_bias", False))
        self.qkv_bias = True if self.qwen2 else ab
        self.o_bias = False if self.qwen2 else ab
        self.mlp_bias = bool(d.get("mlp_bias", False)) if not (self.qwen2 or self.qwen3) else False
        self.qk_norm = self.qwen3
        # Gemma 2 / Gemma 3 text (transformers' modeling_gemma2.py / gemma3.py):
        # RMSNorm x * (1 + w) with zero-initialised w, four norms per layer
        # (input, post-attention, pre- and post-feedforward), embeddings times
        # sqrt(hidden) in the activation dtype, scores times
        # query_pre_attn_scalar^-0.5, tanh-GELU GeGLU, attention-logit and
        # final-logit softcapping (Gemma 2), local (sliding) and global
        # layers; Gemma 3: q/k norms, local layers on rope_local_base_freq
        # with plain RoPE, global ones on rope_theta + rope_scaling.
        self.gemma2 = mt == "gemma2" or "Gemma2ForCausalLM" in archs
        self.gemma3 = mt == "gemma3_text" or "Gemma3ForCausalLM" in archs
        self.gemma = self.gemma2 or self.gemma3
        if self.gemma:
            self.qkv_bias = self.o_bias = bool(d.get("attention_bias", False))
            self.qk_norm = self.gemma3
            self.tie_word_embeddings = bool(d.get("tie_word_embeddings", True))
            if hd is None:  # Gemma2Config's / Gemma3TextConfig's default head_dim
                self.head_dim = 256
            if self.gemma3 and d.get("rope_theta") is None:  # Gemma3TextConfig's default
                self.rope_theta = 1000000.0
        act = d.get("hidden_activation") or d.get("hidden_act") or "silu"
        assert act in ("silu", "gelu_pytorch_tanh"), act
        self.act = act
        self.attn_softcap = float(d.get("attn_logit_softcapping") or 0.0) if self.gemma else 0.0
        self.final_softcap = float(d.get("final_logit_softcapping") or 0.0) if self.gemma else 0.0
        qpas = d.get("query_pre_attn_scalar") if self.gemma else None
        self.attn_scale = float(qpas) ** -0.5 if qpas else 1.0 / math.sqrt(self.head_dim)
        self.rope_local_theta = float(d.get("rope_local_base_freq", 10000.0))
        sw = d.get("sliding_window") if (self.mistral or self.mixtral or self.gemma) else None
        self.sliding_window = int(sw) if sw is not None else 0
        # Qwen2 / Qwen3 (transformers' Qwen2Config / Qwen3Config.__init__):
        # sliding_window kept only with use_sliding_window; layer_types, when
        # absent, "sliding_attention" on the layers i >= max_window_layers
        # (default 28) while a window is kept; the attention of a
        # "sliding_attention" layer gets the window (Qwen2Attention).
        self.layer_windows = [self.sliding_window] * self.num_hidden_layers
        self.layer_local = [False] * self.num_hidden_layers  # Gemma 3: local RoPE
        if self.gemma:
            pat = 2 if self.gemma2 else int(d.get("sliding_window_pattern", 6))
            types = d.get("layer_types") or [
                "sliding_attention" if (i + 1) % pat else "full_attention" for i in range(self.num_hidden_layers)]
            self.layer_windows = [self.sliding_window if t == "sliding_attention" else 0 for t in types]
            self.layer_local = [self.gemma3 and t == "sliding_attention" for t in types]
            self.layer_types, self.raw = types, dict(d)
        if self.qwen2 or self.qwen3:
            use = bool(d.get("use_sliding_window", False))
            w = int(d["sliding_window"]) if use and d.get("sliding_window") is not None else 0
            mwl = int(d.get("max_window_layers", 28))
            types = d.get("layer_types") or [
                "sliding_attention" if w and i >= mwl else "full_attention" for i in range(self.num_hidden_layers)]
            self.layer_windows = [w if t == "sliding_attention" else 0 for t in types]
            self.use_sliding_window, self.max_window_layers = use, mwl
            self.window_value, self.qwen_layer_types = d.get("sliding_window"), d.get("layer_types")

    def to_dict(self):
        if self.gemma:
            d = dict(self.raw)
            d.update(self._to_dict_plain())
            d.pop("hidden_act")
            d.update(architectures=["Gemma2ForCausalLM" if self.gemma2 else "Gemma3ForCausalLM"],
                     model_type="gemma2" if self.gemma2 else "gemma3_text", hidden_activation=self.act)
            return d
        if self.qwen2 or self.qwen3:
            d = self._to_dict_plain()
            name = "qwen2" if self.qwen2 else "qwen3_moe" if self.qwen3_moe else "qwen3"
            arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}[name]
            d.update(architectures=[arch], model_type=name,
                     use_sliding_window=self.use_sliding_window, max_window_layers=self.max_window_layers,
                     sliding_window=self.window_value)
            if self.qwen_layer_types is not None:
                d["layer_types"] = list(self.qwen_layer_types)
            if self.qwen3:
                d["attention_bias"] = self.qkv_bias
            if self.qwen3_moe:
                d.update(num_experts=self.num_experts, num_experts_per_tok=self.top_k, norm_topk_prob=self.norm_topk_prob,
                         moe_intermediate_size=self.moe_intermediate, decoder_sparse_step=1, mlp_only_layers=[],
                         router_aux_loss_coef=self.router_aux_loss_coef, output_router_logits=self.output_router_logits)
            if self.rope_scaling:
                d.update(max_position_embeddings=self.max_position_embeddings, rope_scaling=self.rope_scaling)
            return d
        if self.qkv_bias or self.mlp_bias:
            d = self._to_dict_llama()
            d.update(attention_bias=self.qkv_bias, mlp_bias=self.mlp_bias)
            return d
        if self.mixtral:
            d = self._to_dict_llama()
            d.update(architectures=["MixtralForCausalLM"], model_type="mixtral",
                     sliding_window=self.sliding_window if self.sliding_window > 0 else None,
                     num_local_experts=self.num_experts, num_experts_per_tok=self.top_k,
                     router_aux_loss_coef=self.router_aux_loss_coef, output_router_logits=self.output_router_logits)
            return d
        if self.mistral:
            d = self._to_dict_llama()
            d.update(architectures=["MistralForCausalLM"], model_type="mistral",
                     sliding_window=self.sliding_window if self.sliding_window > 0 else None)
            return d
        return self._to_dict_llama()

    def _to_dict_llama(self):
        d = self._to_dict_plain()
        if self.rope_scaling:  # only then, so the plain configs stay as they were
            d.update(max_position_embeddings=self.max_position_embeddings, rope_scaling=self.rope_scaling)
        return d

    def _to_dict_plain(self):
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "torch_dtype": "float32",
        }


def make_config(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=160, vocab=97,
                tied=False, eps=1e-5, theta=10000.0, head_dim=None, mistral=False,
                sliding_window=None, family=None, **extra):
    """mistral=True gives a MistralForCausalLM config (sliding_window None: no window);
    family "qwen2" / "qwen3" a Qwen2ForCausalLM / Qwen3ForCausalLM one; extra: more
    config.json fields (attention_bias, mlp_bias, use_sliding_window, ...)."""
    d = dict(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
             num_key_value_heads=kv_heads, num_hidden_layers=layers, vocab_size=vocab,
             rms_norm_eps=eps, rope_theta=theta, tie_word_embeddings=tied)
    if head_dim is not None:
        d["head_dim"] = head_dim
    if mistral:
        d.update(model_type="mistral", sliding_window=sliding_window)
    if family:
        d.update(model_type=family, sliding_window=sliding_window)
    d.update(extra)
    return LlamaConfig(d)


# ------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, n, eps, plus_one=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n) if plus_one else torch.ones(n))
        self.eps = eps
        self.plus_one = plus_one  # Gemma: x * (1 + w), computed in float32 and cast back

    def forward(self, x):
        if self.plus_one:  # float32 as HF (float64 stays float64 for the self-tests)
            ct = torch.float64 if x.dtype == torch.float64 else torch.float32
            xf = x.to(ct)
            out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return (out * (1.0 + self.weight.to(ct))).type_as(x)
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def softcap(x, cap):
    """Gemma 2: cap * tanh(x / cap); cap 0: x."""
    return torch.tanh(x / cap) * cap if cap else x


def rope_inv_freq(c, ct=torch.float32):
    """(inv_freq (hd/2,), attention_factor) of config c: transformers'
    modeling_rope_utils.py (_compute_default_rope_parameters,
    _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
    _compute_yarn_parameters), written from that code with dim = head_dim,
    the same torch ops in the same order, in ct (float32 as HF; float64 for
    the self-tests' float64 model)."""
    base, dim = c.rope_theta, c.head_dim
    rs = c.rope_scaling or {}
    rope_type = rs.get("rope_type", rs.get("type", "default"))
    # default
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(ct) / dim))
    attention_factor = 1.0
    if rope_type == "default":
        return inv_freq, attention_factor
    if rope_type == "linear":
        factor = rs["factor"]
        inv_freq /= factor
        return inv_freq, attention_factor
    if rope_type == "llama3":
        factor = rs["factor"]
        low_freq_factor = rs["low_freq_factor"]
        high_freq_factor = rs["high_freq_factor"]
        old_context_len = rs["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        # wavelen < high_freq_wavelen: do nothing; wavelen > low_freq_wavelen: divide by factor
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        # otherwise: interpolate between the two, using a smooth factor
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
        return inv_freq_llama, attention_factor
    if rope_type == "yarn":
        factor = rs["factor"]
        attention_factor = rs.get("attention_factor")
        mscale = rs.get("mscale")
        mscale_all_dim = rs.get("mscale_all_dim")
        if "original_max_position_embeddings" in rs:
            original_max_position_embeddings = rs["original_max_position_embeddings"]
            factor = c.max_position_embeddings / original_max_position_embeddings
        else:
            original_max_position_embeddings = c.max_position_embeddings

        def get_mscale(scale, mscale=1):
            if scale <= 1:
                return 1.0
            return 0.1 * mscale * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
            else:
                attention_factor = get_mscale(factor)
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
            return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

        def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate):
            low = find_correction_dim(low_rot, dim, base, max_position_embeddings)
            high = find_correction_dim(high_rot, dim, base, max_position_embeddings)
            if truncate:
                low = math.floor(low)
                high = math.ceil(high)
            return max(low, 0), min(high, dim - 1)

        def linear_ramp_factor(min, max, dim):
            if min == max:
                max += 0.001  # Prevent singularity
            linear_func = (torch.arange(dim, dtype=ct) - min) / (max - min)
            return torch.clamp(linear_func, 0, 1)

        pos_freqs = base ** (torch.arange(0, dim, 2).to(ct) / dim)
        inv_freq_extrapolation = 1.0 / pos_freqs
        inv_freq_interpolation = 1.0 / (factor * pos_freqs)
        truncate = rs.get("truncate", True)
        low, high = find_correction_range(beta_fast, beta_slow, dim, base, original_max_position_embeddings,
                                          truncate)
        inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2).to(ct)
        inv_freq = (inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
                    + inv_freq_extrapolation * inv_freq_extrapolation_factor)
        return inv_freq, attention_factor
    raise ValueError(f"rope_scaling rope_type {rope_type!r}: not in this reference")


def rope_cos_sin(T, hd, theta, dtype=torch.float32, c=None):
    """cos/sin tables (T, hd) for positions 0..T-1, HF rotate-half layout.
    Computed in float32 as HF does (float64 only for a float64 model, which
    the self-tests use). With a config c: its rope_scaling rule
    (rope_inv_freq), cos and sin multiplied by the attention factor as HF's
    rotary embedding does."""
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    if c is None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(ct) / hd))
        attention_factor = 1.0
    else:
        inv_freq, attention_factor = rope_inv_freq(c, ct)
    t = torch.arange(T, dtype=torch.int64).to(ct)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(dtype), sin.to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, hd = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(h, c.num_attention_heads * hd, bias=c.qkv_bias)
        self.k_proj = nn.Linear(h, c.num_key_value_heads * hd, bias=c.qkv_bias)
        self.v_proj = nn.Linear(h, c.num_key_value_heads * hd, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_attention_heads * hd, h, bias=c.o_bias)
        if c.qk_norm:  # Qwen3, Gemma 3: per head, over head_dim, before RoPE
            self.q_norm = RMSNorm(hd, c.rms_norm_eps, c.gemma)
            self.k_norm = RMSNorm(hd, c.rms_norm_eps, c.gemma)
        self.window = c.sliding_window

    def forward(self, x, cos, sin, hide=None):
        """cos/sin (T, hd), or (B, T, hd) for per-token positions; hide (B, T, T)
        bool: extra keys each query must not see (document masking)."""
        c = self.c
        B, T, _ = x.shape
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q = self.q_proj(x).view(B, T, nh, hd)
        k = self.k_proj(x).view(B, T, nkv, hd)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.transpose(1, 2)                                    # (B, nh, T, hd)
        k = k.transpose(1, 2)                                    # (B, nkv, T, hd)
        v = self.v_proj(x).view(B, T, nkv, hd).transpose(1, 2)
        cos, sin = (cos[None, None], sin[None, None]) if cos.dim() == 2 else (cos[:, None], sin[:, None])
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)  # kv head j serves q heads j*rep..j*rep+rep-1
        v = v.repeat_interleave(rep, dim=1)
        if c.gemma:  # query_pre_attn_scalar^-0.5, then the softcap, as HF's eager path
            s = softcap((q @ k.transpose(-1, -2)) * c.attn_scale, c.attn_softcap)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)      # (B, nh, T, T)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        window = c.sliding_window if c.mistral else self.window  # Mistral: the config's, read at each call
        if window > 0:  # Mistral, a Qwen or Gemma sliding layer: also hide keys with i - j >= window
            mask = mask | torch.ones(T, T, dtype=torch.bool).tril(-window)
        if hide is not None:
            mask = mask[None, None] | hide[:, None]
        s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        y = (p @ v).transpose(1, 2).reshape(B, T, nh * hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

        self.act = (lambda v: F.gelu(v, approximate="tanh")) if c.act == "gelu_pytorch_tanh" else F.silu

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """Mixtral's expert (MixtralBlockSparseTop2MLP): w2(silu(w1 x) * w3 x)."""

    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.hidden_size, c.moe_intermediate, bias=False)
        self.w2 = nn.Linear(c.moe_intermediate, c.hidden_size, bias=False)
        self.w3 = nn.Linear(c.hidden_size, c.moe_intermediate, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Qwen3MoeExpert(nn.Module):
    """Qwen3-MoE's expert (Qwen3MoeMLP of moe_intermediate_size): down(silu(gate x) * up x)."""

    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.moe_intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.moe_intermediate, bias=False)
        self.down_proj = nn.Linear(c.moe_intermediate, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    """transformers' MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock: bias-free router, softmax over the
    experts in fp32, top-k, the k weights divided by their sum (when
    norm_topk_prob), each token's output the weighted sum of its k experts'.
    Keeps the last forward's router logits and selected experts."""

    def __init__(self, c):
        super().__init__()
        self.gate = nn.Linear(c.hidden_size, c.num_experts, bias=False)
        ex = Qwen3MoeExpert if c.qwen3_moe else Expert
        self.experts = nn.ModuleList([ex(c) for _ in range(c.num_experts)])
        self.top_k, self.norm = c.top_k, c.norm_topk_prob

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        logits = self.gate(h)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.top_k, dim=-1)
        if self.norm:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w.to(h.dtype)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(sel == e)
            if tok.numel():
                out = out.index_add(0, tok, expert(h[tok]) * w[tok, slot, None])
        self.router_logits, self.selected = logits, sel
        return out.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, c, i=0):
        super().__init__()
        g = c.gemma
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, g)
        self.self_attn = Attention(c)
        self.self_attn.window = c.layer_windows[i]
        self.local = c.layer_local[i]
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, g)
        if g:  # sandwich norms
            self.pre_feedforward_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, True)
            self.post_feedforward_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, True)
        if c.mixtral:
            self.block_sparse_moe = SparseMoeBlock(c)
        elif c.qwen3_moe:
            self.mlp = SparseMoeBlock(c)
        else:
            self.mlp = MLP(c)
        self.gemma = g

    def forward(self, x, cos, sin, hide=None):
        if self.gemma:
            x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, hide))
            return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, hide)
        mlp = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        return x + mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, c.gemma)


class LlamaForCausalLM(nn.Module):
    """named_parameters() yields exactly the HF checkpoint names."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def head_weight(self):
        if self.config.tie_word_embeddings:
            return self.model.embed_tokens.weight
        return self.lm_head.weight

    def forward(self, idx, seg=None):
        """idx (B, T) int64 -> logits (B, T, V); positions restart at 0 per row.
        seg (B, T) int64 or None: where each token's document starts in its
        row (packed documents, Llama 3 style): position t - seg[t], and query
        i sees key j only when seg[i] <= j <= i (block-diagonal causal)."""
        c = self.config
        T = idx.shape[1]
        dt = self.model.norm.weight.dtype
        cos, sin = rope_cos_sin(T, c.head_dim, c.rope_theta, dt, c)
        # Gemma 3's local layers: plain RoPE on rope_local_base_freq
        lcos, lsin = rope_cos_sin(T, c.head_dim, c.rope_local_theta, dt) if any(c.layer_local) else (cos, sin)
        hide = None
        if seg is not None:
            pos = torch.arange(T)[None, :] - seg          # (B, T)
            cos, sin, lcos, lsin = cos[pos], sin[pos], lcos[pos], lsin[pos]  # (B, T, hd)
            hide = torch.arange(T)[None, None, :] < seg[:, :, None]  # (B, T, T): j < seg[i]
        x = self.model.embed_tokens(idx)
        if c.gemma and not getattr(c, "no_embed_scale", False):  # sqrt(hidden) rounded to the
            x = x * torch.tensor(c.hidden_size ** 0.5, dtype=x.dtype)  # activation dtype, as HF's normalizer
        for layer in self.model.layers:
            x = layer(x, lcos, lsin, hide) if layer.local else layer(x, cos, sin, hide)
        x = self.model.norm(x)
        return softcap(x @ self.head_weight().t(), c.final_softcap)


def moe_aux_loss(m):
    """transformers' load_balancing_loss_func of the last forward (no attention
    mask) times router_aux_loss_coef, as MixtralForCausalLM / Qwen3MoeForCausalLM
    add it with output_router_logits: the router logits of all layers
    concatenated along the tokens; softmax; top-k; tokens_per_expert = mean
    of the (rows, k, E) one-hot over the rows; router_prob_per_expert = mean
    probability; E * sum(tokens_per_expert * router_prob_per_expert)."""
    c = m.config
    blocks = [getattr(layer, "block_sparse_moe", None) or layer.mlp for layer in m.model.layers]
    logits = torch.cat([b.router_logits for b in blocks], dim=0)
    w = F.softmax(logits, dim=-1)
    _, sel = torch.topk(w, c.top_k, dim=-1)
    mask = F.one_hot(sel, c.num_experts)
    tokens_per_expert = torch.mean(mask.float(), dim=0)
    router_prob_per_expert = torch.mean(w, dim=0)
    return c.router_aux_loss_coef * torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * c.num_experts


def loss_fn(logits, targets):
    """Mean token cross-entropy over every position whose target is not -100
    (PyTorch's ignore_index, HF's label masking)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


# ------------------------------------------------------- init, load, save

def init_model(c, seed=0, std=0.02, norm_jitter=0.0):
    """Random init: N(0, std) for every matrix and bias, norms 1 + N(0, norm_jitter)
    (Gemma's x * (1 + w) norms: N(0, norm_jitter))."""
    g = torch.Generator().manual_seed(seed)
    m = LlamaForCausalLM(c)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2 or name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                p.copy_((0.0 if c.gemma else 1.0) + norm_jitter * torch.randn(p.shape, generator=g))
    return m


def state_numpy(m):
    return {n: p.detach().cpu().float().numpy().copy() for n, p in m.named_parameters()}


def save_hf(m, model_dir, dtype="F32"):
    common.config_write(model_dir, m.config.to_dict())
    common.st_write(os.path.join(model_dir, "model.safetensors"), state_numpy(m), dtype=dtype,
                    metadata={"format": "pt"})


def load_hf(model_dir, dtype=torch.float32):
    """Load an HF Llama dir (single model.safetensors); every tensor must be
    present with the right shape, and no unknown tensor may remain."""
    c = LlamaConfig(common.config_read(model_dir))
    path = os.path.join(model_dir, "model.safetensors")
    tensors = common.st_read(path)
    m = LlamaForCausalLM(c).to(dtype)
    seen = set()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name not in tensors:
                raise KeyError(f"{path}: missing tensor {name}")
            a = tensors[name]
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"{path}: {name} shape {a.shape}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype))
            seen.add(name)
    extra = set(tensors) - seen
    if c.tie_word_embeddings:
        extra.discard("lm_head.weight")  # tolerated if a writer stores the tied copy
    # shardlm's --moe-balance bias writes DeepSeek-V3's expert bias, which transformers' Mixtral / Qwen3-MoE ignore
    extra = {n for n in extra if not n.endswith(".gate.e_score_correction_bias")}
    if extra:
        raise KeyError(f"{path}: unexpected tensors {sorted(extra)}")
    return m


# --------------------------------------------------------------- data order

def sample_tokens(stream, j, T):
    """Sample j: stream[j*T .. j*T+T] (T+1 tokens), indices wrapping mod len."""
    L = len(stream)
    return stream[(j * T + np.arange(T + 1, dtype=np.int64)) % L]


def batch(stream, first, count, T):
    """Samples first..first+count-1 -> (inputs (count,T), targets (count,T))."""
    rows = np.stack([sample_tokens(stream, first + i, T) for i in range(count)])
    rows = torch.from_numpy(rows.astype(np.int64))
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


# -------------------------------------------------------------------- dump

def dump(m, stream, B, T, aux=None):
    """Logits (B*T, V), loss and grads of the mean loss of samples 0..B-1
    (plus aux(m), e.g. moe_aux_loss, when given)."""
    m.zero_grad(set_to_none=True)
    x, y = batch(stream, 0, B, T)
    logits = m(x)
    loss = loss_fn(logits, y)
    if aux:
        loss = loss + aux(m)
    loss.backward()
    out = {"logits": logits.detach().reshape(B * T, -1).numpy().copy(),
           "loss": np.array([loss.item()], dtype=np.float32)}
    for n, p in m.named_parameters():
        out["grad." + n] = p.grad.detach().numpy().copy()
    return out


# ------------------------------------------------------------------- train

def lr_at(s, lr, min_lr, warmup, steps):
    """LR of 0-based step s: linear warmup, then cosine to min_lr at the last step."""
    if s < warmup:
        return lr * (s + 1) / warmup
    p = (s - warmup) / max(1, steps - 1 - warmup)
    p = min(1.0, max(0.0, p))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def make_optimizer(m, lr, wd, b1, b2, eps):
    decay = [p for _, p in m.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in m.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(b1, b2), eps=eps, foreach=False)


def train(m, stream, steps, B, T, accum, lr, min_lr, warmup, wd, b1, b2, eps, clip,
          whole_batch=True, log=None, aux=None):
    """Reference training loop. Returns a list of per-step metrics dicts
    {"step", "loss", "lr", "grad_norm"}; m holds the final weights.

    whole_batch: run the G = B*accum samples of a step as one batch (the
    definition of the loss); otherwise accumulate per micro-batch with loss/accum.
    """
    opt = make_optimizer(m, lr, wd, b1, b2, eps)
    G = B * accum
    params = [p for _, p in m.named_parameters()]
    rows = []
    for s in range(steps):
        cur = lr_at(s, lr, min_lr, warmup, steps)
        for grp in opt.param_groups:
            grp["lr"] = cur
        opt.zero_grad(set_to_none=True)
        if whole_batch:
            x, y = batch(stream, s * G, G, T)
            loss = loss_fn(m(x), y)
            if aux:
                loss = loss + aux(m)
            loss.backward()
            loss_v = loss.item()
        else:
            loss_v = 0.0
            for k in range(accum):
                x, y = batch(stream, s * G + k * B, B, T)
                loss = loss_fn(m(x), y)
                if aux:  # per micro-batch, as each forward of transformers computes it
                    loss = loss + aux(m)
                loss = loss / accum
                loss.backward()
                loss_v += loss.item()
        if clip > 0:
            gn = float(torch.nn.utils.clip_grad_norm_(params, clip))
        else:
            gn = float(torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2))
        opt.step()
        row = {"step": s + 1, "loss": loss_v, "lr": cur, "grad_norm": gn}
        rows.append(row)
        if log:
            log(row)
    return rows


# --------------------------------------------------------------------- CLI

def _main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init")
    a.add_argument("--out", required=True)
    for k, v in (("hidden", 64), ("layers", 2), ("heads", 4), ("kv-heads", 2),
                 ("intermediate", 160), ("vocab", 97), ("seed", 0)):
        a.add_argument("--" + k, type=int, default=v)
    a.add_argument("--tied", action="store_true")
    a.add_argument("--std", type=float, default=0.02)
    d = sub.add_parser("dump")
    t = sub.add_parser("train")
    for p in (d, t):
        p.add_argument("--model", required=True)
        p.add_argument("--data", required=True)
        p.add_argument("--micro-batch", type=int, required=True)
        p.add_argument("--seq-len", type=int, required=True)
    d.add_argument("--out", required=True)
    for k, v in (("steps", 10), ("grad-accum", 1), ("warmup", 0)):
        t.add_argument("--" + k, type=int, default=v)
    for k, v in (("lr", 1e-3), ("min-lr", 0.0), ("weight-decay", 0.0), ("beta1", 0.9),
                 ("beta2", 0.95), ("eps", 1e-8), ("clip", 1.0)):
        t.add_argument("--" + k, type=float, default=v)
    t.add_argument("--metrics")
    t.add_argument("--save")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "2"))))
    if args.cmd == "init":
        c = make_config(args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate,
                        args.vocab, tied=args.tied)
        save_hf(init_model(c, args.seed, args.std), args.out)
        return 0
    m = load_hf(args.model)
    stream = common.token_stream(args.data)
    if args.cmd == "dump":
        common.st_write(args.out, dump(m, stream, args.micro_batch, args.seq_len))
        return 0
    mf = open(args.metrics, "w") if args.metrics else None

    def log(row):
        print(json.dumps(row))
        if mf:
            mf.write(json.dumps(row) + "\n")
    train(m, stream, args.steps, args.micro_batch, args.seq_len, args.grad_accum, args.lr,
          args.min_lr, args.warmup, args.weight_decay, args.beta1, args.beta2, args.eps,
          args.clip, log=log)
    if mf:
        mf.close()
    if args.save:
        save_hf(m, args.save)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
