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
  'E'  MoE (NemotronHMoE, its router DeepseekV3TopkRouter and route_tokens_to_experts): the
       router gate.weight (E, C), logits = x.float() @ W.float().T (no bias); scores =
       sigmoid(logits); choice scores = scores + gate.e_score_correction_bias (a persistent
       buffer, E floats: saved and loaded, never trained here); with n_group > 1 the
       group-limited selection (a group's score the sum of its top-2 choice scores, the best
       topk_group groups kept, the other groups' choice scores set to 0); the top
       num_experts_per_tok choice scores pick the experts; their weights are the gathered
       sigmoid scores (no bias), divided by (their sum + 1e-20) when norm_topk_prob, times
       routed_scaling_factor; out = sum_j w_j expert_j(x) + shared_experts(x), every expert
       down_proj(relu(up_proj x)^2) of moe_intermediate_size without bias
       (mixer.experts.{e}.up_proj / down_proj, as the published checkpoints name them), the
       shared expert of moe_shared_expert_intermediate_size with bias mlp_bias. The gradient
       flows through the gathered scores and the normalisation, not through the selection.
       moe_latent_size (the latent MoE) is refused.
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
        # the MoE fields (transformers' NemotronHConfig defaults; written always, read by 'E' layers)
        self.n_routed_experts = int(d.get("n_routed_experts", 8))
        self.num_experts_per_tok = int(d.get("num_experts_per_tok", 2))
        self.moe_intermediate_size = int(d.get("moe_intermediate_size", 7688))
        self.moe_shared_expert_intermediate_size = int(d.get("moe_shared_expert_intermediate_size", 7688))
        self.routed_scaling_factor = float(d.get("routed_scaling_factor", 1.0))
        self.n_group = int(d.get("n_group", 1))
        self.topk_group = int(d.get("topk_group", 1))
        self.norm_topk_prob = bool(d.get("norm_topk_prob", True))
        self.n_shared_experts = int(d.get("n_shared_experts", 1))  # not used by the model; kept
        if d.get("moe_latent_size") is not None:
            raise NotImplementedError(f"moe_latent_size {d['moe_latent_size']!r}: the latent MoE is not in this "
                                      "reference (null only)")
        if "E" in self.pattern:
            ne, g = self.n_routed_experts, self.n_group
            if not (1 <= self.num_experts_per_tok <= ne):
                raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} not in [1, n_routed_experts {ne}]")
            if g < 1 or ne % g or not (1 <= self.topk_group <= g):
                raise ValueError(f"n_group {g} / topk_group {self.topk_group} / n_routed_experts {ne}: n_group must "
                                 "divide the experts and 1 <= topk_group <= n_group")
            if g > 1 and (ne // g < 2 or self.num_experts_per_tok > self.topk_group * (ne // g)):
                raise ValueError(f"n_group {g}: each group needs >= 2 experts and the kept groups >= "
                                 f"num_experts_per_tok {self.num_experts_per_tok} experts")
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
            "n_routed_experts": self.n_routed_experts, "num_experts_per_tok": self.num_experts_per_tok,
            "moe_intermediate_size": self.moe_intermediate_size,
            "moe_shared_expert_intermediate_size": self.moe_shared_expert_intermediate_size,
            "routed_scaling_factor": self.routed_scaling_factor, "n_group": self.n_group,
            "topk_group": self.topk_group, "norm_topk_prob": self.norm_topk_prob,
            "n_shared_experts": self.n_shared_experts, "moe_latent_size": None,
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


def config_moe(vocab=97, pattern="M*EME"):
    """The MoE checks' config: "M*EME" (two 'E' layers between Mamba-2 and attention), 4 routed
    experts top-2 of width 24, the shared expert of width 40 (!= 24: the two widths are not
    swapped unseen), routed_scaling_factor 2.5, norm_topk_prob, n_group 1."""
    return make_config(pattern, hidden=32, vocab=vocab, heads=4, kv_heads=2, head_dim=16, intermediate=48,
                       mamba_heads=6, mamba_head_dim=8, groups=2, state=8, conv=4, chunk=16,
                       n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                       moe_shared_expert_intermediate_size=40, routed_scaling_factor=2.5, norm_topk_prob=True,
                       n_group=1, topk_group=1)


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

    def __init__(self, c, width=None):
        super().__init__()
        width = c.intermediate_size if width is None else width  # the MoE's shared expert: its own width
        self.up_proj = nn.Linear(c.hidden_size, width, bias=c.mlp_bias)
        self.down_proj = nn.Linear(width, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x):
        return self.down_proj(torch.square(F.relu(self.up_proj(x))))


class Expert(nn.Module):
    """A routed expert (one slice of transformers' NemotronHExperts): down_proj(relu(up_proj x)^2),
    no bias, width moe_intermediate_size."""

    def __init__(self, c):
        super().__init__()
        self.up_proj = nn.Linear(c.hidden_size, c.moe_intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.moe_intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(torch.square(F.relu(self.up_proj(x))))


class TopkRouter(nn.Module):
    """DeepseekV3TopkRouter: weight (E, C), the persistent buffer e_score_correction_bias (E, fp32);
    forward: the router logits x.float() @ W.float().T (an fp64 model stays fp64: the oracle's own
    checks)."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c.n_routed_experts, c.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(c.n_routed_experts))

    def forward(self, h):
        dt = torch.promote_types(h.dtype, torch.float32)
        return F.linear(h.to(dt), self.weight.to(dt))


def route(logits, bias, top_k, n_group, topk_group, norm_topk_prob, scaling, score="sigmoid"):
    """route_tokens_to_experts (NemotronHMoE = DeepseekV3MoE's) on router logits (N, E): returns
    (indices (N, k), weights (N, k), choice scores (N, E) after the group mask). score "softmax":
    the negative control's scores (a softmax over the experts instead of the sigmoid)."""
    scores = logits.sigmoid() if score == "sigmoid" else torch.softmax(logits, dim=-1)
    choice = scores + bias.to(scores.dtype)
    n, ne = choice.shape
    if n_group > 1:  # group-limited: a group's score = the sum of its top-2 choice scores
        group_scores = choice.view(n, n_group, ne // n_group).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(n, n_group, ne // n_group).reshape(n, ne)
        choice = choice.masked_fill(~score_mask.bool(), 0.0)
    idx = torch.topk(choice, k=top_k, dim=-1, sorted=False)[1]
    w = scores.gather(1, idx)
    if norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return idx, w * scaling, choice


class MoE(nn.Module):
    """NemotronHMoE: experts (routed, mixer.experts.{e}), gate (the router), shared_experts; out =
    sum_j w_j expert_j(x) + shared_experts(x). Keeps the last forward's selected experts (N, k) and
    choice scores (N, E, detached). moe_score / moe_scale / moe_bias: negative-control variants
    ("softmax" scores; routed_scaling_factor ignored; e_score_correction_bias ignored)."""

    def __init__(self, c, moe_score="sigmoid", moe_scale=True, moe_bias=True):
        super().__init__()
        self.c, self.score, self.scale, self.use_bias = c, moe_score, moe_scale, moe_bias
        self.experts = nn.ModuleList([Expert(c) for _ in range(c.n_routed_experts)])
        self.gate = TopkRouter(c)
        self.shared_experts = MLP(c, c.moe_shared_expert_intermediate_size)

    def forward(self, x):
        c = self.c
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        bias = self.gate.e_score_correction_bias
        idx, w, choice = route(self.gate(h), bias if self.use_bias else torch.zeros_like(bias), c.num_experts_per_tok,
                               c.n_group, c.topk_group, c.norm_topk_prob,
                               c.routed_scaling_factor if self.scale else 1.0, self.score)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(idx == e)
            if tok.numel():
                out = out.index_add(0, tok, (expert(h[tok]) * w[tok, slot, None]).to(h.dtype))
        self.selected, self.choice = idx.detach(), choice.detach()
        return (out + self.shared_experts(h)).reshape(shape)


class Block(nn.Module):
    def __init__(self, c, kind, norm_groups=None, moe_variant=None):
        super().__init__()
        self.kind = KINDS[kind]
        self.norm = M2.RMSNorm(c.hidden_size, c.layer_norm_epsilon)
        if kind == "M":
            self.mixer = M2.Mamba2Mixer(mamba_view(c), norm_groups)
        elif kind == "*":
            self.mixer = L.Attention(attention_view(c))
        elif kind == "E":
            self.mixer = MoE(c, **(moe_variant or {}))
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
    def __init__(self, c, norm_groups=None, moe_variant=None):
        super().__init__()
        self.embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c, k, norm_groups, moe_variant) for k in c.pattern])
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
    norm), rope_theta (a rotary embedding in the attention layers, which Nemotron-H has not),
    moe_variant: MoE's moe_score "softmax" (the router's scores a softmax, not the sigmoid),
    moe_scale False (routed_scaling_factor ignored), moe_bias False (e_score_correction_bias
    ignored)."""

    def __init__(self, c, norm_groups=None, rope_theta=None, **moe_variant):
        super().__init__()
        self.config = c
        self.rope_theta = rope_theta
        self.backbone = NemotronHModel(c, norm_groups, moe_variant)
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

# The persistent buffers a checkpoint carries besides the parameters (the MoE router's bias):
# saved and loaded by name, never trained or dumped (no gradient).
BUFFERS = (".gate.e_score_correction_bias",)
loss_fn = L.loss_fn
dump = MR.dump
train = MR.train


def state_numpy(m):
    """The tensors of a checkpoint by HF name: every parameter, then the persistent buffers (BUFFERS)."""
    out = {n: p.detach().cpu().float().numpy().copy() for n, p in m.named_parameters()}
    out.update({n: b.detach().cpu().float().numpy().copy() for n, b in m.named_buffers() if n.endswith(BUFFERS)})
    return out


def save_hf(m, model_dir, dtype="F32"):
    """config.json from m.config.to_dict(), the weights (and the router biases) by HF name."""
    common.config_write(model_dir, m.config.to_dict())
    common.st_write(os.path.join(model_dir, "model.safetensors"), state_numpy(m), dtype=dtype,
                    metadata={"format": "pt"})


def init_model(c, seed=0, std=0.1, jitter=0.2, model=None, bias_jitter=0.05):
    """N(0, std) for the embeddings and every matrix (the MoE router and experts included), conv
    uniform(+-1/sqrt(K)); transformers' Mamba init for the rest: dt_bias = softplus^-1(dt), dt
    log-uniform in [time_step_min, time_step_max] floored at time_step_floor, A_log = log(1..nh),
    D = 1, norms 1; jitter > 0 perturbs A_log, D, the norms and the biases (so tests do not see
    symmetric values); the MoE routers' e_score_correction_bias N(0, bias_jitter) (nonzero, so
    that it is seen used; transformers' init is 0).
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
        for name, b in m.named_buffers():  # after the parameters: the dense configs' draws are unchanged
            if name.endswith(".gate.e_score_correction_bias"):  # nonzero, small beside the scores' spread
                b.copy_(bias_jitter * rnd(b.shape))
    return m


def load_hf(model_dir, dtype=torch.float32, **variant):
    """Load an HF Nemotron-H dir (one model.safetensors): every parameter present with its
    shape, no unknown tensor (a stored tied lm_head tolerated); the MoE routers' biases (BUFFERS)
    present with their shape too. variant: norm_groups / rope_theta / moe_score / moe_scale / moe_bias."""
    c = NemotronHConfig(common.config_read(model_dir))
    path = os.path.join(model_dir, "model.safetensors")
    m = NemotronHForCausalLM(c, **variant).to(dtype)
    bufs = {n: b for n, b in m.named_buffers() if n.endswith(BUFFERS)}
    common.load_params(m, path, tuple(bufs) + (("lm_head.weight",) if c.tie_word_embeddings else ()))
    if bufs:
        tensors = common.st_read(path)
        with torch.no_grad():
            for n, b in bufs.items():
                if n not in tensors:
                    raise KeyError(f"{path}: missing tensor {n}")
                if tuple(tensors[n].shape) != tuple(b.shape):
                    raise ValueError(f"{path}: {n} shape {tensors[n].shape}, expected {tuple(b.shape)}")
                b.copy_(torch.from_numpy(tensors[n].astype("float32")).to(b.dtype))
    return m


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
