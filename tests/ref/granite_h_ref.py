"""Plain-PyTorch Granite 4.0-H oracle (HF GraniteMoeHybridForCausalLM, model_type
"granitemoehybrid"): the dense variant (num_local_experts 0: Granite 4.0-H Micro) and the
mixture-of-experts one (num_local_experts > 0: Granite 4.0-H Tiny / Small), for the shardlm parity
contract.

Written from transformers' models/granitemoehybrid (modular_granitemoehybrid.py,
configuration_granitemoehybrid.py), models/granitemoeshared (the attention, the shared MLP) and
models/bamba (BambaMixer.torch_forward, BambaRMSNormGated). A stack of decoder layers, each
    h = mixer(input_layernorm(x));          x = x + h * residual_multiplier
    y = post_attention_layernorm(x)
    h = shared_mlp(y)                       (num_local_experts 0)
    h = block_sparse_moe(y) + shared_mlp(y) (num_local_experts > 0: every layer, mamba or attention)
    x = x + h * residual_multiplier
(GraniteMoeHybridDecoderLayer.forward, its has_experts branch; RMSNorms of eps rms_norm_eps) whose
mixer is chosen per layer by layer_types[i]:
  "mamba"      BambaMixer: d_inner = mamba_expand * hidden_size (= mamba_n_heads * mamba_d_head,
               which the config requires; mamba_d_head "auto" is their quotient), in_proj ->
               [z | xBC | dt] (bias mamba_proj_bias, also on out_proj), causal depthwise conv1d
               (bias mamba_conv_bias) + SiLU over xBC, dt = clamp(softplus(dt + dt_bias),
               time_step_limit) (not a Granite config field: BambaConfig's default (0, inf) unless a
               config.json names one), the chunked SSD with mamba_n_groups groups of mamba_d_state,
               skip D, BambaRMSNormGated: RMS norm of y * SiLU(z) over the WHOLE d_inner (eps
               rms_norm_eps), times norm.weight, out_proj. mamba2_ref's mixer (imported) with one
               norm group. At mamba_n_groups 1 (every published Granite 4.0-H) this is also the
               per-group norm of mamba_ssm / vLLM; above 1 transformers and vLLM disagree, and this
               reference follows transformers.
  "attention"  GraniteMoeHybridAttention: q/k/v/o_proj (bias attention_bias), GQA (kv head j
               serves query heads j*rep .. j*rep+rep-1), head_dim = hidden_size /
               num_attention_heads, causal softmax of q.k * attention_multiplier (the scale IS
               the multiplier, not head_dim^-0.5), no rotary embedding (position_embedding_type
               None / "nope"; "rope" is refused here). llama_ref's Attention with the identity
               rotation and its explicit score scale (the Gemma path, softcap off).
shared_mlp (GraniteMoeHybridMLP): output_linear(silu(g) * u), [g | u] = input_linear(x) chunked
in two (g first), no biases, width shared_intermediate_size. Embeddings are multiplied by
embedding_multiplier, and the logits lm_head(norm(x)) divided by logits_scaling; lm_head tied to
model.embed_tokens unless tie_word_embeddings is false (transformers' default; Granite 4.0-H ties).

block_sparse_moe (GraniteMoeHybridMoE = GraniteMoeSharedMoE = GraniteMoeMoE; its router
GraniteMoeHybridTopKGating, its experts two GraniteMoeHybridParallelExperts): E = num_local_experts
experts of width I = intermediate_size, k = num_experts_per_tok; per token y (of C = hidden_size):
    logits = router.layer(y).float()                 (router.layer.weight (E, C), no bias)
    the k largest logits (logits.topk(k)), their weights softmax over those k logits
    (= softmax over all E renormalised over the k: the engine's order, the same numbers)
    out = sum_j w_j * output_linear[e_j] @ (silu(g) * u),  [g | u] = (input_linear[e_j] @ y).chunk(2)
with input_linear.weight (E, 2I, C) (gate rows first), output_linear.weight (E, C, I), no biases
(GraniteMoeHybridParallelExperts.forward: F.linear(inputs of expert i, weight[i])). transformers
sorts the (token, slot) pairs by expert and index_adds the weighted outputs; here a loop over the
experts does the same sums. The gradient flows through the k softmax weights, not through the
selection. The load-balancing loss (load_balancing_loss_func, added by GraniteMoeHybridForCausalLM
only when output_router_logits) is not in this reference: output_router_logits true with a nonzero
router_aux_loss_coef is refused; router_aux_loss_coef (default 0.001) is carried, unused.
transformers' default num_local_experts is 8, so a dense config.json must name 0.

Tensor names are transformers' (model.embed_tokens.weight, model.layers.{i}.input_layernorm.weight,
model.layers.{i}.mamba.* or .self_attn.{q,k,v,o}_proj.*, model.layers.{i}.post_attention_layernorm.weight,
model.layers.{i}.block_sparse_moe.{input_linear,output_linear,router.layer}.weight (MoE only),
model.layers.{i}.shared_mlp.{input,output}_linear.weight, model.norm.weight, lm_head.weight when untied).

The data order, LR schedule, loss, dump, init and the training loop are the other oracles'
(mamba_ref's / llama_ref's / nemotron_h_ref's: one definition for every architecture).
"""
import os
import sys
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402  (the attention)
import mamba2_ref as M2  # noqa: E402  (the Mamba-2 mixer, its scans, RMSNorm)
import nemotron_h_ref as N  # noqa: E402  (init, dump, train, save_hf, greedy)

KINDS = ("mamba", "attention")
# the multipliers a negative-control variant may drop (taken as 1): ignore=(...)
MULTIPLIERS = ("embedding_multiplier", "residual_multiplier", "logits_scaling", "attention_multiplier")


class GraniteHConfig:
    """The GraniteMoeHybridForCausalLM config.json fields the engine reads (transformers'
    defaults: configuration_granitemoehybrid.py). The MoE fields (num_experts_per_tok,
    intermediate_size, router_aux_loss_coef, output_router_logits) are read and written only when
    num_local_experts > 0; a dense config writes num_local_experts 0, num_experts_per_tok 0."""

    def __init__(self, d):
        d = dict(d)
        types = d.get("layer_types", d.get("layers_block_type"))  # attribute_map alias
        self.num_hidden_layers = int(d.get("num_hidden_layers", len(types) if types else 32))
        self.layer_types = list(types) if types else ["mamba"] * self.num_hidden_layers
        bad = sorted(set(self.layer_types) - set(KINDS))
        if bad:
            raise ValueError(f"layer_types: unknown kinds {bad} (transformers allows 'mamba' and 'attention')")
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"num_hidden_layers {self.num_hidden_layers} != len(layer_types) "
                             f"{len(self.layer_types)}")
        self.num_local_experts = int(d.get("num_local_experts", 8))  # transformers' default: MoE
        if self.num_local_experts < 0:
            raise ValueError(f"num_local_experts {self.num_local_experts} < 0")
        moe = self.num_local_experts > 0
        self.num_experts_per_tok = int(d.get("num_experts_per_tok", 2)) if moe else 0
        self.intermediate_size = int(d.get("intermediate_size", 11008)) if moe else 0
        self.router_aux_loss_coef = float(d.get("router_aux_loss_coef", 0.001)) if moe else 0.0
        self.output_router_logits = bool(d.get("output_router_logits", False)) if moe else False
        if moe:
            if not 1 <= self.num_experts_per_tok <= self.num_local_experts:
                raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} not in [1, num_local_experts "
                                 f"{self.num_local_experts}]")
            if self.intermediate_size < 1:
                raise ValueError(f"intermediate_size {self.intermediate_size}: the experts' width must be >= 1")
            if self.output_router_logits and self.router_aux_loss_coef != 0:
                raise NotImplementedError(f"output_router_logits true (router_aux_loss_coef "
                                          f"{self.router_aux_loss_coef:g}): the load-balancing loss is not in this "
                                          "reference")
        self.position_embedding_type = d.get("position_embedding_type")
        if self.position_embedding_type == "rope":
            raise NotImplementedError("position_embedding_type 'rope': only the NoPE attention of Granite 4.0-H "
                                      "(None / 'nope') is in this reference")
        act = d.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r}: only 'silu' (the MLPs' and the Mamba conv's) is here")
        self.vocab_size = int(d.get("vocab_size", 32000))
        self.hidden_size = int(d.get("hidden_size", 4096))
        self.shared_intermediate_size = int(d.get("shared_intermediate_size", 1024))
        self.num_attention_heads = int(d.get("num_attention_heads", 32))
        kv = d.get("num_key_value_heads")
        self.num_key_value_heads = int(kv if kv is not None else self.num_attention_heads)
        self.head_dim = self.hidden_size // self.num_attention_heads
        if d.get("head_dim") is not None and int(d["head_dim"]) != self.head_dim:
            raise ValueError(f"head_dim {d['head_dim']} != hidden_size / num_attention_heads {self.head_dim} "
                             "(transformers would take it, vLLM would not: not in this reference)")
        self.attention_bias = bool(d.get("attention_bias", False))
        self.embedding_multiplier = float(d.get("embedding_multiplier", 1.0))
        self.logits_scaling = float(d.get("logits_scaling", 1.0))
        self.residual_multiplier = float(d.get("residual_multiplier", 1.0))
        self.attention_multiplier = float(d.get("attention_multiplier", 1.0))
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.mamba_n_heads = int(d.get("mamba_n_heads", 128))
        self.mamba_n_groups = int(d.get("mamba_n_groups", 1))
        self.mamba_d_state = int(d.get("mamba_d_state", 256))
        self.mamba_d_conv = int(d.get("mamba_d_conv", 4))
        self.mamba_expand = int(d.get("mamba_expand", 2))
        self.mamba_chunk_size = int(d.get("mamba_chunk_size", 256))
        self.mamba_conv_bias = bool(d.get("mamba_conv_bias", True))
        self.mamba_proj_bias = bool(d.get("mamba_proj_bias", False))
        inter = self.mamba_expand * self.hidden_size
        if inter % self.mamba_n_heads:
            raise ValueError("mamba_n_heads must divide mamba_expand * hidden_size")
        dh = d.get("mamba_d_head", "auto")
        self.mamba_d_head = inter // self.mamba_n_heads if dh == "auto" else int(dh)
        if self.mamba_d_head * self.mamba_n_heads != inter:
            raise ValueError(f"mamba_d_head {self.mamba_d_head} * mamba_n_heads {self.mamba_n_heads} != "
                             f"mamba_expand * hidden_size {inter}")
        lim = d.get("time_step_limit")  # BambaConfig's field; no Granite config names it
        self.time_step_limit = (0.0, float("inf")) if lim is None else (float(lim[0]), float(lim[1]))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.initializer_range = float(d.get("initializer_range", 0.02))
        self.max_position_embeddings = int(d.get("max_position_embeddings", 2048))
        self.pad_token_id, self.bos_token_id = d.get("pad_token_id"), d.get("bos_token_id", 1)
        self.eos_token_id = d.get("eos_token_id", 2)
        if "mamba" in self.layer_types:
            assert self.mamba_n_heads % self.mamba_n_groups == 0
        if "attention" in self.layer_types:
            assert self.num_attention_heads % self.num_key_value_heads == 0

    # what nemotron_h_ref.init_model reads (BambaConfig's dt init range)
    conv_kernel = property(lambda self: self.mamba_d_conv)
    time_step_min, time_step_max, time_step_floor = 0.001, 0.1, 1e-4

    @property
    def mamba_intermediate(self):
        return self.mamba_expand * self.hidden_size

    def to_dict(self):
        d = {
            "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "shared_intermediate_size": self.shared_intermediate_size,
            "num_hidden_layers": self.num_hidden_layers, "layer_types": list(self.layer_types),
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "attention_bias": self.attention_bias, "attention_dropout": 0.0,
            "embedding_multiplier": self.embedding_multiplier, "logits_scaling": self.logits_scaling,
            "residual_multiplier": self.residual_multiplier, "attention_multiplier": self.attention_multiplier,
            "rms_norm_eps": self.rms_norm_eps, "num_local_experts": 0, "num_experts_per_tok": 0,
            "position_embedding_type": "nope", "hidden_act": "silu",
            "mamba_n_heads": self.mamba_n_heads, "mamba_d_head": self.mamba_d_head,
            "mamba_n_groups": self.mamba_n_groups, "mamba_d_state": self.mamba_d_state,
            "mamba_d_conv": self.mamba_d_conv, "mamba_expand": self.mamba_expand,
            "mamba_chunk_size": self.mamba_chunk_size, "mamba_conv_bias": self.mamba_conv_bias,
            "mamba_proj_bias": self.mamba_proj_bias, "tie_word_embeddings": self.tie_word_embeddings,
            "initializer_range": self.initializer_range, "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id, "eos_token_id": self.eos_token_id,
            "normalization_function": "rmsnorm", "torch_dtype": "float32",
        }
        if self.pad_token_id is not None:  # transformers' default None (shardlm's saved configs carry none)
            d["pad_token_id"] = self.pad_token_id
        if self.time_step_limit != (0.0, float("inf")):
            d["time_step_limit"] = list(self.time_step_limit)
        if self.num_local_experts:
            d.update(num_local_experts=self.num_local_experts, num_experts_per_tok=self.num_experts_per_tok,
                     intermediate_size=self.intermediate_size, router_aux_loss_coef=self.router_aux_loss_coef,
                     output_router_logits=self.output_router_logits)
        return d


def make_config(layer_types=("mamba", "attention", "mamba"), hidden=32, vocab=97, heads=4, kv_heads=2,
                shared_intermediate=48, mamba_heads=8, mamba_head_dim=8, groups=1, state=8, conv=4, chunk=8,
                expand=2, tied=False, embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
                logits_scaling=2.5, **extra):
    """A tiny config (multipliers != 1 so each matters); extra: more config.json fields
    (attention_bias, mamba_proj_bias, mamba_conv_bias, rms_norm_eps, ...)."""
    d = dict(layer_types=list(layer_types), num_hidden_layers=len(layer_types), hidden_size=hidden,
             vocab_size=vocab, num_attention_heads=heads, num_key_value_heads=kv_heads,
             shared_intermediate_size=shared_intermediate,
             mamba_n_heads=mamba_heads, mamba_d_head=mamba_head_dim, mamba_n_groups=groups, mamba_d_state=state,
             mamba_d_conv=conv, mamba_chunk_size=chunk, mamba_expand=expand, tie_word_embeddings=tied,
             embedding_multiplier=embedding_multiplier, residual_multiplier=residual_multiplier,
             attention_multiplier=attention_multiplier, logits_scaling=logits_scaling, num_local_experts=0,
             position_embedding_type="nope")
    d.update(extra)
    return GraniteHConfig(d)


def config_hybrid(vocab=97):
    """The checks' first config: mamba / attention / mamba, one group (8 heads of 8), GQA 4/2 heads
    of head_dim 8 (attention_multiplier 0.2 != 8^-0.5), untied, conv bias, no other biases,
    rms_norm_eps 1e-6, chunk 8 (two chunks of the checks' 16 tokens)."""
    return make_config(("mamba", "attention", "mamba"), hidden=32, vocab=vocab, heads=4, kv_heads=2,
                       shared_intermediate=48, mamba_heads=8, mamba_head_dim=8, groups=1, state=8, conv=4, chunk=8)


def config_moe(vocab=97):
    """The MoE checks' config: mamba / attention / mamba as config_hybrid, every layer with
    block_sparse_moe: 4 experts top-2 of width 24 beside the shared MLP of width 40 (!= 24: the
    two are not swapped unseen), router_aux_loss_coef at transformers' 0.001 with
    output_router_logits false (carried, unused), other multipliers than config_hybrid's."""
    return make_config(("mamba", "attention", "mamba"), hidden=32, vocab=vocab, heads=4, kv_heads=2,
                       shared_intermediate=40, mamba_heads=8, mamba_head_dim=8, groups=1, state=8, conv=4, chunk=8,
                       embedding_multiplier=2.5, residual_multiplier=0.6, attention_multiplier=0.25,
                       logits_scaling=2.0, num_local_experts=4, num_experts_per_tok=2, intermediate_size=24,
                       router_aux_loss_coef=0.001, output_router_logits=False)


def config_tied_bias(vocab=97):
    """The second: attention / mamba, tied, attention and in/out_proj biases, no conv bias, MQA
    (2 heads / 1 kv head of 16), 4 Mamba heads of 16, conv 3, other multipliers, eps 1e-5."""
    return make_config(("attention", "mamba"), hidden=32, vocab=vocab, heads=2, kv_heads=1, shared_intermediate=40,
                       mamba_heads=4, mamba_head_dim=16, groups=1, state=6, conv=3, chunk=8, tied=True,
                       embedding_multiplier=2.0, residual_multiplier=0.7, attention_multiplier=0.15,
                       logits_scaling=1.75, attention_bias=True, mamba_proj_bias=True, mamba_conv_bias=False,
                       rms_norm_eps=1e-5)


# ------------------------------------------------------------------- model

def mamba_view(c):
    """The attributes mamba2_ref's Mamba2Mixer reads, from a Granite config."""
    return SimpleNamespace(hidden_size=c.hidden_size, intermediate_size=c.mamba_intermediate,
                           state_size=c.mamba_d_state, conv_kernel=c.mamba_d_conv, num_heads=c.mamba_n_heads,
                           head_dim=c.mamba_d_head, n_groups=c.mamba_n_groups, chunk_size=c.mamba_chunk_size,
                           use_bias=c.mamba_proj_bias, use_conv_bias=c.mamba_conv_bias,
                           layer_norm_epsilon=c.rms_norm_eps, time_step_limit=c.time_step_limit)


def attention_view(c, scale):
    """The attributes llama_ref's Attention reads: GQA, biases on all four projections, the
    score scale `scale` (its Gemma path: scores * attn_scale, softcap 0 = none; no q/k norm)."""
    return SimpleNamespace(hidden_size=c.hidden_size, head_dim=c.head_dim, num_attention_heads=c.num_attention_heads,
                           num_key_value_heads=c.num_key_value_heads, qkv_bias=c.attention_bias,
                           o_bias=c.attention_bias, qk_norm=False, rms_norm_eps=c.rms_norm_eps, gemma=True,
                           attn_scale=scale, attn_softcap=0.0, sliding_window=0, mistral=False)


class SharedMLP(nn.Module):
    """GraniteMoeHybridMLP: output_linear(silu(g) * u), [g | u] = input_linear(x).chunk(2)."""

    def __init__(self, c):
        super().__init__()
        self.input_linear = nn.Linear(c.hidden_size, 2 * c.shared_intermediate_size, bias=False)
        self.output_linear = nn.Linear(c.shared_intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        g, u = self.input_linear(x).chunk(2, dim=-1)
        return self.output_linear(F.silu(g) * u)


class ExpertWeights(nn.Module):
    """GraniteMoeHybridParallelExperts' storage: weight (E, out, in); expert e is F.linear(., weight[e])."""

    def __init__(self, experts, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, n_out, n_in))


class Router(nn.Module):
    """GraniteMoeHybridTopKGating's parameter: layer = Linear(C, E, bias=False)."""

    def __init__(self, c):
        super().__init__()
        self.layer = nn.Linear(c.hidden_size, c.num_local_experts, bias=False)

    def forward(self, h):
        """The router logits (N, E) in fp32 (layer(h).float(); an fp64 model stays fp64: the
        oracle's own checks)."""
        dt = torch.promote_types(h.dtype, torch.float32)
        return F.linear(h.to(dt), self.layer.weight.to(dt))


# the MoE's negative-control variants (GraniteHForCausalLM keywords) and their defaults (the model)
MOE_VARIANTS = {"moe_renorm": True, "moe_shared": True, "moe_swap": False}


class MoE(nn.Module):
    """GraniteMoeHybridMoE: input_linear, output_linear (ExpertWeights), router (see the module
    docstring). Keeps the last forward's selected experts (N, k) and router logits (N, E) detached:
    `selected`, `choice` (the numbers whose order picks the experts). Variants for negative controls
    only: renorm False (the weights the softmax over all E experts gathered at the k, not
    renormalised: Mixtral without the renormalisation, Qwen3-MoE's norm_topk_prob false), swap
    True (the gate / up halves of input_linear swapped: silu on the second half)."""

    def __init__(self, c, renorm=True, swap=False):
        super().__init__()
        self.c, self.renorm, self.swap = c, renorm, swap
        E, C, I = c.num_local_experts, c.hidden_size, c.intermediate_size
        self.input_linear = ExpertWeights(E, C, 2 * I)
        self.output_linear = ExpertWeights(E, I, C)
        self.router = Router(c)

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        logits = self.router(h)
        top, idx = logits.topk(self.c.num_experts_per_tok, dim=-1)
        if self.renorm:
            w = torch.softmax(top, dim=-1)
        else:
            w = torch.softmax(logits, dim=-1).gather(1, idx)
        w = w.to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(self.c.num_local_experts):
            tok, slot = torch.where(idx == e)
            if tok.numel():
                g, u = F.linear(h[tok], self.input_linear.weight[e]).chunk(2, dim=-1)
                if self.swap:
                    g, u = u, g
                y = F.linear(F.silu(g) * u, self.output_linear.weight[e])
                out = out.index_add(0, tok, y * w[tok, slot, None])
        self.selected, self.choice = idx.detach(), logits.detach()
        return out.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, c, kind, rm, attn_scale, moe_renorm=True, moe_shared=True, moe_swap=False):
        super().__init__()
        self.kind, self.rm, self.moe_shared = kind, rm, moe_shared
        self.input_layernorm = M2.RMSNorm(c.hidden_size, c.rms_norm_eps)
        if kind == "mamba":
            self.mamba = M2.Mamba2Mixer(mamba_view(c), norm_groups=1)  # BambaRMSNormGated: whole width
        else:
            self.self_attn = L.Attention(attention_view(c, attn_scale))
        self.post_attention_layernorm = M2.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.block_sparse_moe = MoE(c, moe_renorm, moe_swap) if c.num_local_experts else None
        self.shared_mlp = SharedMLP(c)

    def forward(self, x, cos, sin, scan=M2.ssd_chunked):
        h = self.input_layernorm(x)
        h = self.mamba(h, scan) if self.kind == "mamba" else self.self_attn(h, cos, sin)
        x = x + h * self.rm
        y = self.post_attention_layernorm(x)
        if self.block_sparse_moe is None:
            return x + self.shared_mlp(y) * self.rm
        # the negative control without the shared MLP keeps it in the graph times 0, so that its
        # gradients are zeros, not None (dump reads every parameter's gradient)
        shared = self.shared_mlp(y) * (1.0 if self.moe_shared else 0.0)
        return x + (self.block_sparse_moe(y) + shared) * self.rm


class GraniteHModel(nn.Module):
    def __init__(self, c, rm, attn_scale, moe_variant):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, k, rm, attn_scale, **moe_variant) for k in c.layer_types])
        self.norm = M2.RMSNorm(c.hidden_size, c.rms_norm_eps)


class GraniteHForCausalLM(nn.Module):
    """named_parameters() yields exactly transformers' checkpoint names.

    Variants for negative controls only: ignore (names from MULTIPLIERS taken as 1; an ignored
    attention_multiplier falls back to llama's head_dim^-0.5), rope_theta (a rotary embedding in
    the attention layers, which Granite 4.0-H has not), and the MoE's (MOE_VARIANTS): moe_renorm
    False (the k weights from the softmax over all experts, not renormalised), moe_shared False
    (the shared MLP left out of the MoE layers), moe_swap True (input_linear's gate / up halves
    swapped)."""

    def __init__(self, c, ignore=(), rope_theta=None, **moe_variant):
        super().__init__()
        bad = sorted(set(ignore) - set(MULTIPLIERS))
        if bad:
            raise ValueError(f"ignore: unknown multipliers {bad}")
        bad = sorted(set(moe_variant) - set(MOE_VARIANTS))
        if bad:
            raise ValueError(f"unknown variants {bad} (MoE: {sorted(MOE_VARIANTS)})")
        if moe_variant and not c.num_local_experts:
            raise ValueError(f"{sorted(moe_variant)}: a MoE variant of a dense model (num_local_experts 0)")
        self.config = c
        self.rope_theta = rope_theta
        mult = {k: (1.0 if k in ignore else getattr(c, k)) for k in MULTIPLIERS}
        if "attention_multiplier" in ignore:
            mult["attention_multiplier"] = c.head_dim ** -0.5
        self.embedding_multiplier, self.logits_scaling = mult["embedding_multiplier"], mult["logits_scaling"]
        self.model = GraniteHModel(c, mult["residual_multiplier"], mult["attention_multiplier"],
                                   dict(MOE_VARIANTS, **moe_variant))
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def forward(self, idx, scan=M2.ssd_chunked):
        c = self.config
        cos, sin = N.rotation(idx.shape[1], c.head_dim, self.rope_theta, self.model.norm.weight.dtype)
        x = self.model.embed_tokens(idx) * self.embedding_multiplier
        for layer in self.model.layers:
            x = layer(x, cos, sin, scan)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if c.tie_word_embeddings else self.lm_head.weight
        return (x @ w.t()) / self.logits_scaling


# Gradients that are analytically zero: without RoPE a key bias adds q.b to every score of a query,
# which the softmax takes away (nemotron_h_ref's note).
ZERO_GRAD = N.ZERO_GRAD

loss_fn = N.loss_fn
dump = N.dump
train = N.train
save_hf = N.save_hf  # config.json from m.config.to_dict(), the weights by HF name (3-D expert tensors as they are)
greedy = N.greedy


def init_model(c, seed=0, std=0.2, jitter=0.2):
    """nemotron_h_ref's init on a Granite model: N(0, std) for the embeddings and every matrix, the
    MoE's router and 3-D expert tensors included (transformers' _init_weights: normal_ on
    GraniteMoeHybridParallelExperts too; std 0.2, not initializer_range:
    the multipliers shrink the logits, and the checks' 10 steps want gradient clipping active), conv
    uniform(+-1/sqrt(K)), dt_bias = softplus^-1(dt) with dt log-uniform in BambaConfig's [0.001,
    0.1], A_log = log(1..nh), D = 1, norms 1, jitter on A_log, D, the norms and the biases."""
    return N.init_model(c, seed, std, jitter, model=GraniteHForCausalLM(c))


def load_hf(model_dir, dtype=torch.float32, **variant):
    """Load an HF Granite 4.0-H dir (one model.safetensors): every parameter present with its
    shape (the 3-D expert tensors included), no unknown tensor (a stored tied lm_head tolerated).
    variant: ignore / rope_theta / moe_renorm / moe_shared / moe_swap."""
    c = GraniteHConfig(common.config_read(model_dir))
    return common.load_params(GraniteHForCausalLM(c, **variant).to(dtype),
                              os.path.join(model_dir, "model.safetensors"),
                              ("lm_head.weight",) if c.tie_word_embeddings else ())


if __name__ == "__main__":
    import granite_h_selfcheck
    sys.exit(granite_h_selfcheck.main())
