"""Plain-PyTorch Nemotron-H oracle (HF NemotronHForCausalLM) for the shardlm parity contract.

Written from transformers' models/nemotron_h (modular_nemotron_h.py, modeling_nemotron_h.py,
configuration_nemotron_h.py): a stack of blocks, each
    h = x + mixer(RMSNorm(x))      (weight backbone.layers.{i}.norm.weight, eps layer_norm_epsilon)
whose mixer is chosen per layer by hybrid_override_pattern, one character a layer:
  'M'  Mamba-2 (NemotronHMamba2Mixer = Zamba2MambaMixer.torch_forward): d_inner =
       mamba_num_heads * mamba_head_dim (not expand * hidden), in_proj -> [z | xBC | dt],
       causal depthwise conv1d + SiLU over xBC, dt = softplus(dt + dt_bias) clamped to
       time_step_limit, the chunked SSD scan, skip D, Zamba2RMSNormGated: y * SiLU(z), then
       the RMS norm per group of d_inner / n_groups channels, times norm.weight, out_proj.
       This is mamba2_ref's mixer (imported, not copied): the same per-group norm.
  '*'  attention (JambaAttention): q/k/v/o_proj, NO rotary embedding, causal softmax of
       q.k * head_dim^-0.5, GQA (kv head j serves query heads j*rep .. j*rep+rep-1);
       head size `head_dim` (Nemotron-H-8B's published configs: `attention_head_dim`).
       llama_ref's Attention with the identity rotation (cos 1, sin 0).
  '-'  MLP (NemotronMLP): down_proj(relu(up_proj(x))^2), bias mlp_bias.
  'E'  MoE: not in this reference (refused by name).
then norm_f and lm_head (untied unless tie_word_embeddings). residual_in_fp32 is a no-op in
fp32. Tensor names are the published checkpoints' (backbone.embeddings.weight,
backbone.layers.{i}.norm.weight, backbone.layers.{i}.mixer.*, backbone.norm_f.weight,
lm_head.weight); transformers' own class names its base model `model`, and maps.

Where transformers disagrees with itself, this reference takes the kernels' (mamba_ssm's)
reading, which NVIDIA's checkpoints were trained and served with:
  - dt: transformers' torch_forward clamps softplus(dt + dt_bias) below at time_step_min
    only; its CUDA path (mamba_chunk_scan_combined, dt_limit=time_step_limit), mamba_ssm,
    vLLM and llama.cpp clamp to time_step_limit (published: [0, inf], no clamp). Here:
    time_step_limit.
  - attention biases: transformers' current JambaAttention hard-codes bias=False; NVIDIA's
    remote code, vLLM, SGLang and mlx-lm take attention_bias. Here: attention_bias (every
    published config has it false, where the two agree).

The data order, LR schedule, loss, dump and the training loop are mamba_ref's / llama_ref's
(one definition for every architecture).
"""
import math
import os
import sys
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402  (attention, RoPE tables for the negative control)
import mamba2_ref as M2  # noqa: E402  (the Mamba-2 mixer, its scans, RMSNorm)
import mamba_ref as MR  # noqa: E402  (dump, train, save_hf)

KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
# transformers' layers_block_type names (legacy and current) -> pattern characters
_TYPE_CHAR = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
              "moe": "E"}
# transformers' NemotronHConfig.__post_init__: the older names of these fields
_ALIASES = {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
            "mamba_dt_min": "time_step_min", "mamba_dt_max": "time_step_max", "mamba_dt_limit": "time_step_limit",
            "mamba_dt_init_floor": "time_step_floor", "mamba_conv_bias": "use_conv_bias",
            "mamba_chunk_size": "chunk_size"}


class NemotronHConfig:
    """The NemotronHForCausalLM config.json fields the engine reads (transformers' defaults)."""

    def __init__(self, d):
        d = dict(d)
        for old, new in _ALIASES.items():
            if old in d and new not in d:
                d[new] = d[old]
        pat = d.get("hybrid_override_pattern")
        if pat is None and d.get("layers_block_type") is not None:
            pat = "".join(_TYPE_CHAR[t] for t in d["layers_block_type"])
        if pat is None:
            pat = "M*-"  # not transformers' default (it has an MoE layer): every config here names one
        self.pattern = str(pat)
        bad = sorted(set(self.pattern) - set(KINDS))
        if bad:
            raise ValueError(f"hybrid_override_pattern {self.pattern!r}: unknown layer kinds {bad}")
        if "E" in self.pattern:
            raise NotImplementedError("hybrid_override_pattern: 'E' (MoE) layers are not in this reference")
        self.num_hidden_layers = int(d.get("num_hidden_layers", len(self.pattern)))
        if self.num_hidden_layers != len(self.pattern):
            raise ValueError(f"num_hidden_layers {self.num_hidden_layers} != len(hybrid_override_pattern) "
                             f"{len(self.pattern)}")
        self.vocab_size = int(d.get("vocab_size", 131072))
        self.hidden_size = int(d.get("hidden_size", 4096))
        self.intermediate_size = int(d.get("intermediate_size", 21504))
        self.num_attention_heads = int(d.get("num_attention_heads", 32))
        kv = d.get("num_key_value_heads", 8)
        self.num_key_value_heads = int(kv if kv is not None else self.num_attention_heads)
        hd = d.get("head_dim", d.get("attention_head_dim"))
        self.head_dim = int(hd) if hd is not None else 128  # NemotronHConfig's default
        self.mamba_num_heads = int(d.get("mamba_num_heads", 128))
        self.mamba_head_dim = int(d.get("mamba_head_dim", 64))
        self.n_groups = int(d.get("n_groups", 8))
        self.ssm_state_size = int(d.get("ssm_state_size", 128))
        self.conv_kernel = int(d.get("conv_kernel", 4))
        self.expand = int(d.get("expand", 2))  # unused by the model (d_inner is heads * head_dim); kept
        self.chunk_size = int(d.get("chunk_size", 128))
        self.use_conv_bias = bool(d.get("use_conv_bias", True))
        self.use_bias = bool(d.get("use_bias", False))
        self.mlp_bias = bool(d.get("mlp_bias", False))
        self.attention_bias = bool(d.get("attention_bias", False))
        self.layer_norm_epsilon = float(d.get("layer_norm_epsilon", 1e-5))
        lim = d.get("time_step_limit", [0.0, float("inf")])
        self.time_step_limit = (float(lim[0]), float(lim[1]))
        self.time_step_min = float(d.get("time_step_min", 0.001))
        self.time_step_max = float(d.get("time_step_max", 0.1))
        self.time_step_floor = float(d.get("time_step_floor", 1e-4))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.residual_in_fp32 = bool(d.get("residual_in_fp32", False))
        self.rescale_prenorm_residual = bool(d.get("rescale_prenorm_residual", True))
        self.initializer_range = float(d.get("initializer_range", 0.02))
        self.max_position_embeddings = int(d.get("max_position_embeddings", 4096))
        self.pad_token_id, self.bos_token_id = d.get("pad_token_id", 0), d.get("bos_token_id", 1)
        self.eos_token_id = d.get("eos_token_id", 2)
        for key, want in (("mlp_hidden_act", "relu2"), ("mamba_hidden_act", "silu")):
            if d.get(key, want) != want:
                raise ValueError(f"{key} {d[key]!r}: only {want!r} is in this reference")
        if "M" in self.pattern:
            assert self.mamba_num_heads % self.n_groups == 0
            assert (self.mamba_num_heads * self.mamba_head_dim) % self.n_groups == 0
        if "*" in self.pattern:
            assert self.num_attention_heads % self.num_key_value_heads == 0

    @property
    def mamba_intermediate(self):
        return self.mamba_num_heads * self.mamba_head_dim

    def to_dict(self):
        return {
            "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "hybrid_override_pattern": self.pattern, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "mamba_num_heads": self.mamba_num_heads, "mamba_head_dim": self.mamba_head_dim,
            "n_groups": self.n_groups, "ssm_state_size": self.ssm_state_size, "conv_kernel": self.conv_kernel,
            "expand": self.expand, "use_conv_bias": self.use_conv_bias, "use_bias": self.use_bias,
            "mlp_bias": self.mlp_bias, "attention_bias": self.attention_bias,
            "layer_norm_epsilon": self.layer_norm_epsilon, "time_step_limit": list(self.time_step_limit),
            "time_step_min": self.time_step_min, "time_step_max": self.time_step_max,
            "time_step_floor": self.time_step_floor, "chunk_size": self.chunk_size,
            "tie_word_embeddings": self.tie_word_embeddings, "residual_in_fp32": self.residual_in_fp32,
            "rescale_prenorm_residual": self.rescale_prenorm_residual, "initializer_range": self.initializer_range,
            "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings, "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id, "eos_token_id": self.eos_token_id, "torch_dtype": "float32",
        }


def make_config(pattern="M*M-", hidden=32, vocab=97, heads=4, kv_heads=2, head_dim=16, intermediate=48,
                mamba_heads=6, mamba_head_dim=8, groups=2, state=8, conv=4, chunk=16, tied=False,
                limit=(0.0, float("inf")), **extra):
    """A tiny config; extra: more config.json fields (use_bias, mlp_bias, attention_bias, ...)."""
    d = dict(hybrid_override_pattern=pattern, num_hidden_layers=len(pattern), hidden_size=hidden,
             vocab_size=vocab, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
             intermediate_size=intermediate, mamba_num_heads=mamba_heads, mamba_head_dim=mamba_head_dim,
             n_groups=groups, ssm_state_size=state, conv_kernel=conv, chunk_size=chunk,
             tie_word_embeddings=tied, time_step_limit=list(limit))
    d.update(extra)
    return NemotronHConfig(d)


def config_hybrid(vocab=97):
    """The checks' first config: "M*M-", two groups (3 heads each), d_inner 48 != expand * hidden,
    GQA attention 4 heads / 2 kv heads of head_dim 16 (!= hidden / heads), untied, conv bias."""
    return make_config("M*M-", hidden=32, vocab=vocab, heads=4, kv_heads=2, head_dim=16, intermediate=48,
                       mamba_heads=6, mamba_head_dim=8, groups=2, state=8, conv=4, chunk=16)


def config_tied_bias(vocab=97):
    """The second: "M-*", one group, tied, in/out_proj, MLP and attention biases, no conv bias,
    MQA (2 heads / 1 kv head), a time_step_limit that clamps at both ends."""
    return make_config("M-*", hidden=32, vocab=vocab, heads=2, kv_heads=1, head_dim=16, intermediate=40,
                       mamba_heads=4, mamba_head_dim=8, groups=1, state=6, conv=3, chunk=8, tied=True,
                       limit=(0.002, 0.06), use_bias=True, mlp_bias=True, attention_bias=True, use_conv_bias=False)


# ------------------------------------------------------------------- model

def mamba_view(c):
    """The attributes mamba2_ref's Mamba2Mixer reads, from a Nemotron-H config."""
    return SimpleNamespace(hidden_size=c.hidden_size, intermediate_size=c.mamba_intermediate,
                           state_size=c.ssm_state_size, conv_kernel=c.conv_kernel, num_heads=c.mamba_num_heads,
                           head_dim=c.mamba_head_dim, n_groups=c.n_groups, chunk_size=c.chunk_size,
                           use_bias=c.use_bias, use_conv_bias=c.use_conv_bias,
                           layer_norm_epsilon=c.layer_norm_epsilon, time_step_limit=c.time_step_limit)


def attention_view(c):
    """The attributes llama_ref's Attention reads: plain GQA, biases on all four projections."""
    return SimpleNamespace(hidden_size=c.hidden_size, head_dim=c.head_dim, num_attention_heads=c.num_attention_heads,
                           num_key_value_heads=c.num_key_value_heads, qkv_bias=c.attention_bias,
                           o_bias=c.attention_bias, qk_norm=False, rms_norm_eps=c.layer_norm_epsilon, gemma=False,
                           sliding_window=0, mistral=False)


class MLP(nn.Module):
    """NemotronMLP: down_proj(relu2(up_proj(x))), relu2 = ReLUSquaredActivation."""

    def __init__(self, c):
        super().__init__()
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x):
        return self.down_proj(torch.square(F.relu(self.up_proj(x))))


class Block(nn.Module):
    def __init__(self, c, kind, norm_groups=None):
        super().__init__()
        self.kind = KINDS[kind]
        self.norm = M2.RMSNorm(c.hidden_size, c.layer_norm_epsilon)
        if kind == "M":
            self.mixer = M2.Mamba2Mixer(mamba_view(c), norm_groups)
        elif kind == "*":
            self.mixer = L.Attention(attention_view(c))
        else:
            self.mixer = MLP(c)

    def forward(self, x, cos, sin, scan=M2.ssd_chunked):
        h = self.norm(x)
        if self.kind == "mamba":
            h = self.mixer(h, scan)
        elif self.kind == "attention":
            h = self.mixer(h, cos, sin)
        else:
            h = self.mixer(h)
        return x + h


class NemotronHModel(nn.Module):
    def __init__(self, c, norm_groups=None):
        super().__init__()
        self.embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c, k, norm_groups) for k in c.pattern])
        self.norm_f = M2.RMSNorm(c.hidden_size, c.layer_norm_epsilon)


def rotation(T, head_dim, rope_theta, dtype):
    """(cos, sin) of T positions for llama_ref's Attention: the identity rotation (q * 1 +
    rotate_half(q) * 0 == q: no RoPE) when rope_theta is None, else RoPE of that theta."""
    if rope_theta is None:
        return torch.ones(T, head_dim, dtype=dtype), torch.zeros(T, head_dim, dtype=dtype)
    return L.rope_cos_sin(T, head_dim, rope_theta, dtype)


class NemotronHForCausalLM(nn.Module):
    """named_parameters() yields exactly the published checkpoint names.

    Variants for negative controls only: norm_groups 1 (transformers' Mamba2's whole-width gated
    norm), rope_theta (a rotary embedding in the attention layers, which Nemotron-H has not)."""

    def __init__(self, c, norm_groups=None, rope_theta=None):
        super().__init__()
        self.config = c
        self.rope_theta = rope_theta
        self.backbone = NemotronHModel(c, norm_groups)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, idx, scan=M2.ssd_chunked):
        c = self.config
        cos, sin = rotation(idx.shape[1], c.head_dim, self.rope_theta, self.backbone.norm_f.weight.dtype)
        x = self.backbone.embeddings(idx)
        for layer in self.backbone.layers:
            x = layer(x, cos, sin, scan)
        x = self.backbone.norm_f(x)
        w = self.backbone.embeddings.weight if c.tie_word_embeddings else self.lm_head.weight
        return x @ w.t()


# Gradients that are analytically zero: without RoPE, a key bias b adds q.b to every score of a
# query, which the softmax takes away; what is left is rounding (~1e-10 in fp32, 1e-18 in fp64),
# so comparisons take these against the model's largest gradient, not their own size.
ZERO_GRAD = ("k_proj.bias",)

loss_fn = L.loss_fn
dump = MR.dump
train = MR.train
save_hf = MR.save_hf  # config.json from m.config.to_dict(), the weights by HF name


def init_model(c, seed=0, std=0.1, jitter=0.2, model=None):
    """N(0, std) for the embeddings and every matrix, conv uniform(+-1/sqrt(K)); transformers'
    Mamba init for the rest: dt_bias = softplus^-1(dt), dt log-uniform in [time_step_min,
    time_step_max] floored at time_step_floor, A_log = log(1..nh), D = 1, norms 1; jitter > 0
    perturbs A_log, D, the norms and the biases (so tests do not see symmetric values).
    model: another family's module to fill the same way (granite_h_ref: c then needs
    conv_kernel and time_step_min / max / floor); default a NemotronHForCausalLM of c."""
    g = torch.Generator().manual_seed(seed)
    m = NemotronHForCausalLM(c) if model is None else model

    def rnd(shape):
        return torch.randn(shape, generator=g)

    lo, hi = math.log(c.time_step_min), math.log(c.time_step_max)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "conv1d" in name:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(c.conv_kernel))
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.rand(p.shape, generator=g) * (hi - lo) + lo).clamp(min=c.time_step_floor)
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.arange(1, p.shape[0] + 1, dtype=torch.float32)) + jitter * rnd(p.shape))
            elif name.endswith(".D") or name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                p.copy_(1.0 + jitter * rnd(p.shape))
            elif p.dim() >= 2:
                p.copy_(rnd(p.shape) * std)
            else:  # the biases (use_bias, mlp_bias, attention_bias, conv1d's is above)
                p.copy_(jitter * 0.5 * rnd(p.shape))
    return m


def load_hf(model_dir, dtype=torch.float32, **variant):
    """Load an HF Nemotron-H dir (one model.safetensors): every parameter present with its
    shape, no unknown tensor (a stored tied lm_head tolerated). variant: norm_groups / rope_theta."""
    c = NemotronHConfig(common.config_read(model_dir))
    return common.load_params(NemotronHForCausalLM(c, **variant).to(dtype),
                              os.path.join(model_dir, "model.safetensors"),
                              ("lm_head.weight",) if c.tie_word_embeddings else ())


def greedy(m, prompt, n):
    """Greedy continuation by full recompute (no cache): n new token ids."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(torch.argmax(m(torch.tensor([ids], dtype=torch.int64))[0, -1])))
    return ids[len(prompt):]


if __name__ == "__main__":
    import nemotron_h_selfcheck
    sys.exit(nemotron_h_selfcheck.main())
