"""Self-checks of the Granite 4.0-H oracle (tests/ref/granite_h_ref.py), without shardlm.

Run: /usr/bin/python3 tests/ref/granite_h_selfcheck.py   (not wired into ctest; ~10 s)
One line per check, then "N passed, M failed":
  a. the model vs transformers' GraniteMoeHybridForCausalLM forward written out from its formulas
     (fp64, the checks' three configs): embeddings * embedding_multiplier, each layer's two residual
     updates residual + h * residual_multiplier, eager attention with scaling =
     attention_multiplier (repeat_kv, additive causal mask, no RoPE), BambaMixer.torch_forward's
     in_proj split, conv, softplus / clamp, BambaRMSNormGated over the whole width, the shared MLP's
     chunk(2) (gate first), in the MoE config block_sparse_moe + shared_mlp (GraniteMoeHybridTopKGating:
     topk of the logits, softmax of the k, (token, slot) pairs sorted by expert; the
     GraniteMoeHybridParallelExperts split by expert_size; index_add of the gated outputs),
     logits / logits_scaling; and the reference with each multiplier dropped, or with RoPE, and
     (MoE) each MoE negative control (no renormalisation, no shared MLP, gate / up swapped), far
     from it (so the check configs make each of them matter);
  b. fp32 vs fp64 of the checks' three configs (logits, loss, every gradient);
  c. autograd vs central finite differences in fp64 on a few scalars of every tensor kind;
  d. the chunked SSD vs the sequential recurrence inside the hybrid model (fp64, chunk not
     dividing T);
  e. at mamba_n_groups 2 the gated norm is transformers' whole-width one (not the per-group one of
     mamba_ssm / vLLM, which Granite 4.0-H's one group makes equal);
  f. config.json: save/load round trip (dense; MoE with its 3-D expert tensors and its fields),
     layers_block_type and mamba_d_head "auto" accepted, no num_local_experts read as transformers'
     default (8 experts top-2 of width 11008); RoPE, a foreign head_dim, num_experts_per_tok outside
     [1, E], output_router_logits true (the load-balancing loss) refused by name;
  g. the MoE layer in fp64 against a token-by-token loop written from GraniteMoeHybridTopKGating
     and GraniteMoeHybridMoE (logits W y, the experts sorted by logit (index breaks ties), the k
     first, exp(l - max) / sum over the k, output_linear[e] (silu(gate half) * up half)): the
     checks' config and one of 8 experts top-3, same selections; the engine's order (softmax over
     all E, top-k, renormalised) gives the same weights; the no-renormalisation variant is the
     softmax over all E gathered; gradients (router, both halves of input_linear, output_linear,
     input) by central differences. The MoE model is also in a, b and c.
"""
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import granite_h_ref as G  # noqa: E402
import mamba2_ref as M2  # noqa: E402
import nemotron_h_selfcheck as NS  # noqa: E402  (Checks, rel, batch, fwd_bwd, scale_rel, fd_worst)

VOCAB = NS.VOCAB
rel, batch, fwd_bwd = NS.rel, NS.batch, NS.fwd_bwd
CONFIGS = (("mamba/attention/mamba", G.config_hybrid), ("attention/mamba tied biases", G.config_tied_bias),
           ("MoE mamba/attention/mamba", G.config_moe))
# the MoE negative controls (GraniteHForCausalLM keywords) and what they are
MOE_CONTROLS = ((dict(moe_renorm=False), "no top-k renormalisation"), (dict(moe_shared=False), "no shared MLP"),
                (dict(moe_swap=True), "gate / up swapped"))


def _lin(x, lin):
    return x @ lin.weight.t() + (lin.bias if lin.bias is not None else 0)


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def hf_moe(moe, hs, c):
    """GraniteMoeHybridMoE.forward with GraniteMoeHybridTopKGating.forward and
    GraniteMoeHybridParallelExperts.forward, written out on moe's tensors."""
    bsz, length, C = hs.shape
    x = hs.reshape(-1, C)
    logits = x @ moe.router.layer.weight.t()  # .float(): a no-op here (fp64 kept for the comparison)
    top_logits, top_idx = logits.topk(c.num_experts_per_tok, dim=1)
    top_gates = torch.softmax(top_logits, dim=1)
    gates = torch.zeros(x.shape[0], c.num_local_experts, dtype=x.dtype).scatter(1, top_idx, 1)
    expert_size = gates.long().sum(0).tolist()
    _, order = top_idx.flatten().sort(0)
    batch_index = order.div(c.num_experts_per_tok, rounding_mode="trunc")
    batch_gates = top_gates.flatten()[order]

    def experts(w, inputs):  # ParallelExperts: inputs.split(expert_size), F.linear(part i, weight[i])
        return torch.cat([part @ w[i].t() for i, part in enumerate(inputs.split(expert_size, dim=0))], dim=0)
    gu = experts(moe.input_linear.weight, x[batch_index]).chunk(2, dim=-1)
    out = experts(moe.output_linear.weight, F.silu(gu[0]) * gu[1]) * batch_gates[:, None]
    return torch.zeros(x.shape[0], C, dtype=x.dtype).index_add(0, batch_index, out).view(bsz, length, C)


def hf_forward(m, idx):
    """GraniteMoeHybridForCausalLM.forward (eager attention, BambaMixer.torch_forward, no cache, no
    padding mask) written out on m's tensors; the scan is the sequential recurrence."""
    c = m.config
    b, T = idx.shape
    hs = m.model.embed_tokens.weight[idx] * c.embedding_multiplier  # inputs_embeds * embedding_multiplier
    for kind, lay in zip(c.layer_types, m.model.layers):
        residual = hs
        hs = _rms(hs, lay.input_layernorm.weight, c.rms_norm_eps)
        if kind == "mamba":
            mx = lay.mamba
            D, GS, nh, p = c.mamba_intermediate, c.mamba_n_groups * c.mamba_d_state, c.mamba_n_heads, c.mamba_d_head
            proj = _lin(hs, mx.in_proj)
            gate, xbc, dt = proj.split([D, D + 2 * GS, nh], dim=-1)
            xbc = F.silu(F.conv1d(xbc.transpose(1, 2), mx.conv1d.weight, mx.conv1d.bias, padding=c.mamba_d_conv - 1,
                                  groups=D + 2 * GS)[..., :T].transpose(1, 2))
            xs, B, C = xbc.split([D, GS, GS], dim=-1)
            dt = torch.clamp(F.softplus(dt + mx.dt_bias), *c.time_step_limit)
            rep = nh // c.mamba_n_groups
            B = B.reshape(b, T, -1, c.mamba_d_state).repeat_interleave(rep, dim=2)
            C = C.reshape(b, T, -1, c.mamba_d_state).repeat_interleave(rep, dim=2)
            y = M2.ssd_sequential(xs.reshape(b, T, nh, p), dt, -torch.exp(mx.A_log), B, C, mx.D).reshape(b, T, D)
            g = y * F.silu(gate)  # BambaRMSNormGated(intermediate_size): one norm over all of d_inner
            hs = _lin(mx.norm.weight * (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps)),
                      mx.out_proj)
        else:
            at, hd, nh, nkv = lay.self_attn, c.head_dim, c.num_attention_heads, c.num_key_value_heads
            q = _lin(hs, at.q_proj).view(b, T, -1, hd).transpose(1, 2)
            k = _lin(hs, at.k_proj).view(b, T, -1, hd).transpose(1, 2)
            v = _lin(hs, at.v_proj).view(b, T, -1, hd).transpose(1, 2)
            k = k[:, :, None].expand(b, nkv, nh // nkv, T, hd).reshape(b, nh, T, hd)  # repeat_kv
            v = v[:, :, None].expand(b, nkv, nh // nkv, T, hd).reshape(b, nh, T, hd)
            mask = torch.full((T, T), float("-inf"), dtype=hs.dtype).triu(1)
            w = torch.softmax(q @ k.transpose(2, 3) * c.attention_multiplier + mask, dim=-1)  # scaling
            hs = _lin((w @ v).transpose(1, 2).reshape(b, T, -1), at.o_proj)
        hs = residual + hs * c.residual_multiplier
        residual = hs
        hs = _rms(hs, lay.post_attention_layernorm.weight, c.rms_norm_eps)
        gu = _lin(hs, lay.shared_mlp.input_linear).chunk(2, dim=-1)
        shared = _lin(F.silu(gu[0]) * gu[1], lay.shared_mlp.output_linear)
        hs = hf_moe(lay.block_sparse_moe, hs, c) + shared if c.num_local_experts > 0 else shared  # has_experts
        hs = residual + hs * c.residual_multiplier
    hs = _rms(hs, m.model.norm.weight, c.rms_norm_eps)
    head = m.model.embed_tokens.weight if c.tie_word_embeddings else m.lm_head.weight
    return (hs @ head.t()) / c.logits_scaling


def check_transformers(ck):
    x, _ = batch(5)
    for tag, cfg in CONFIGS:
        c = cfg(VOCAB)
        m = G.init_model(c, seed=6).double()
        with torch.no_grad():
            want = hf_forward(m, x)
            e = rel(m(x), want)
            far = {}
            for k in G.MULTIPLIERS:
                v = G.GraniteHForCausalLM(c, ignore=(k,)).double()
                v.load_state_dict(m.state_dict())
                far["no " + k] = rel(v(x), want)
            v = G.GraniteHForCausalLM(c, rope_theta=10000.0).double()
            v.load_state_dict(m.state_dict())
            far["RoPE"] = rel(v(x), want)
            for variant, what in (MOE_CONTROLS if c.num_local_experts else ()):
                v = G.GraniteHForCausalLM(c, **variant).double()
                v.load_state_dict(m.state_dict())
                far[what] = rel(v(x), want)
        worst = min(far, key=far.get)
        ck(f"[a] {tag}: logits vs transformers' forward written out (fp64, < 1e-12); each multiplier dropped, "
           f"and RoPE{', and each MoE control' if c.num_local_experts else ''}, > 1e-3 off",
           e < 1e-12 and far[worst] > 1e-3,
           f"{e:.1e}; " + ", ".join(f"{k} {v:.1e}" for k, v in far.items()))


def check_fp64(ck):
    for tag, cfg in CONFIGS:
        c = cfg(VOCAB)
        m32, m64 = G.init_model(c, seed=7), G.init_model(c, seed=7).double()
        x, y = batch(2)
        a, b = fwd_bwd(m32, x, y), fwd_bwd(m64, x, y)
        errs = {"logits": rel(a[0], b[0]), "loss": rel(a[1], b[1])}
        errs.update({"grad." + n: v for n, v in NS.scale_rel(a[2], b[2], b[2]).items()})
        worst = max(errs, key=errs.get)
        zero = [n for n in a[2] if n.endswith(G.ZERO_GRAD)]
        extra = "".join(f"; {n} (analytically 0) max|g| fp32 {float(a[2][n].abs().max()):.1e} fp64 "
                        f"{float(b[2][n].abs().max()):.1e}" for n in zero)
        ck(f"[b] {tag}: fp32 vs fp64, logits, loss, all grads (< 1e-5 rel, half the engine's 2e-5)",
           errs[worst] < 1e-5, f"worst {worst} {errs[worst]:.1e}; logits {errs['logits']:.1e}{extra}")


def check_fd(ck):
    for tag, cfg in CONFIGS:
        m = G.init_model(cfg(VOCAB), seed=5).double()
        x, y = batch(3)
        probes = [n for n, _ in m.named_parameters() if any(s in n for s in (
            "mamba.A_log", "mamba.dt_bias", "mamba.D", "mamba.conv1d.weight", "mamba.in_proj", "mamba.norm.weight",
            "mamba.out_proj.bias", "q_proj.weight", "k_proj.weight", "v_proj.bias", "o_proj", "input_linear",
            "output_linear", "layers.1.input_layernorm", "layers.0.post_attention_layernorm", "model.norm.weight",
            "embed_tokens", "lm_head", "router.layer"))]
        worst, wname, n = NS.fd_worst(m, x, y, probes)
        ck(f"[c] {tag}: autograd vs central differences (fp64, {n} scalars of {len(probes)} tensors, < 1e-6)",
           worst < 1e-6, f"worst {worst:.1e} ({wname})")


def check_scan(ck):
    c = G.make_config(("mamba", "attention", "mamba", "mamba"), hidden=16, vocab=VOCAB, heads=2, kv_heads=1,
                      shared_intermediate=24, mamba_heads=4, mamba_head_dim=8, state=4, chunk=5,
                      time_step_limit=[0.002, 0.06])
    m = G.init_model(c, seed=1).double()
    x, _ = batch(4, 2, 13)
    e = rel(m(x, M2.ssd_chunked).detach(), m(x, M2.ssd_sequential).detach())
    ck("[d] hybrid model: chunked SSD vs the sequential recurrence (fp64, chunk 5, T 13, a clamping "
       "time_step_limit)", e < 1e-12, f"{e:.1e}")


def check_norm_groups(ck):
    c = G.make_config(("mamba",), hidden=32, vocab=VOCAB, mamba_heads=8, mamba_head_dim=8, groups=2)
    m = G.init_model(c, seed=2).double()
    x, _ = batch(6)
    per_group = G.GraniteHForCausalLM(c).double()
    per_group.load_state_dict(m.state_dict())
    per_group.model.layers[0].mamba.norm.groups = 2
    with torch.no_grad():
        want = hf_forward(m, x)
        e, e_grp = rel(m(x), want), rel(per_group(x), want)
    ck("[e] mamba_n_groups 2: the gated norm is transformers' whole-width one (fp64), the per-group one far",
       e < 1e-12 and e_grp > 1e-3, f"{e:.1e}; per-group {e_grp:.1e}")


def check_config(ck):
    with tempfile.TemporaryDirectory() as d:
        c = G.config_tied_bias(VOCAB)
        m = G.init_model(c, seed=4)
        G.save_hf(m, d)
        back = G.load_hf(d)
        same = all(torch.equal(p, q) for p, q in zip(m.parameters(), back.parameters()))
        ck("[f] save_hf / load_hf round trip (tensors, config)", same and back.config.to_dict() == c.to_dict(), "")
        raw = common.config_read(d)
        ck("[f] config.json: GraniteMoeHybridForCausalLM, layer_types, num_local_experts 0, 'nope', no "
           "time_step_limit at its default", raw["architectures"] == ["GraniteMoeHybridForCausalLM"]
           and raw["model_type"] == "granitemoehybrid" and raw["layer_types"] == ["attention", "mamba"]
           and raw["num_local_experts"] == 0 and raw["position_embedding_type"] == "nope"
           and "time_step_limit" not in raw, "")
        alias = dict(raw, mamba_d_head="auto", layers_block_type=raw["layer_types"])
        del alias["layer_types"]
        ck("[f] layers_block_type for layer_types and mamba_d_head 'auto' read the same",
           G.GraniteHConfig(alias).to_dict() == c.to_dict(), "")
        no_moe = {k: v for k, v in raw.items() if k not in ("num_local_experts", "num_experts_per_tok")}
        dflt = G.GraniteHConfig(no_moe)
        got = (dflt.num_local_experts, dflt.num_experts_per_tok, dflt.intermediate_size, dflt.router_aux_loss_coef,
               dflt.output_router_logits)
        ck("[f] no num_local_experts / num_experts_per_tok: transformers' defaults, 8 experts top-2 of width 11008, "
           "router_aux_loss_coef 0.001, output_router_logits false", got == (8, 2, 11008, 0.001, False), str(got))
    with tempfile.TemporaryDirectory() as d:
        c = G.config_moe(VOCAB)
        m = G.init_model(c, seed=4)
        G.save_hf(m, d)
        back = G.load_hf(d)
        st = common.st_read(os.path.join(d, "model.safetensors"))
        E, C, I = c.num_local_experts, c.hidden_size, c.intermediate_size
        want_shapes = {"input_linear": (E, 2 * I, C), "output_linear": (E, C, I), "router.layer": (E, C)}
        shapes = {k: sorted({tuple(st[n].shape) for n in st if f"block_sparse_moe.{k}.weight" in n})
                  for k in want_shapes}
        nmoe = sum(".block_sparse_moe." in n for n in st)
        same = all(torch.equal(p, q) for p, q in zip(m.parameters(), back.parameters()))
        ck("[f] MoE: save_hf / load_hf round trip (tensors, config); block_sparse_moe.{input_linear,output_linear,"
           "router.layer}.weight in every layer with transformers' shapes (E, 2I, C), (E, C, I), (E, C)",
           same and back.config.to_dict() == c.to_dict() and nmoe == 3 * c.num_hidden_layers
           and all(v == [want_shapes[k]] for k, v in shapes.items()), f"{nmoe} MoE tensors, shapes {shapes}")
        raw_moe = common.config_read(d)
        want = dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=24, shared_intermediate_size=40,
                    router_aux_loss_coef=0.001, output_router_logits=False)
        bad = {k: raw_moe.get(k, "absent") for k, v in want.items() if raw_moe.get(k, "absent") != v}
        ck("[f] MoE config.json: the MoE fields written", not bad, str(bad) if bad else ", ".join(want))
        zero_coef = G.GraniteHConfig(dict(raw_moe, output_router_logits=True, router_aux_loss_coef=0.0))
        ck("[f] MoE: output_router_logits true with router_aux_loss_coef 0 (no loss added) accepted",
           zero_coef.output_router_logits, "")
        try:
            G.GraniteHForCausalLM(G.config_hybrid(VOCAB), moe_renorm=False)
            ck("[f] a MoE variant of a dense model is refused", False, "accepted")
        except ValueError as ex:
            ck("[f] a MoE variant of a dense model is refused by name", "moe_renorm" in str(ex), str(ex))
    for what, edit, exc, word in (("position_embedding_type 'rope'", dict(raw, position_embedding_type="rope"),
                                   NotImplementedError, "rope"),
                                  ("head_dim 8 != hidden / heads 16", dict(raw, head_dim=8), ValueError,
                                   "head_dim"),
                                  ("mamba_d_head 8 with 4 heads != expand * hidden 64", dict(raw, mamba_d_head=8),
                                   ValueError, "mamba_d_head"),
                                  ("MoE num_experts_per_tok 0", dict(raw_moe, num_experts_per_tok=0), ValueError,
                                   "num_experts_per_tok"),
                                  ("MoE num_experts_per_tok 5 > num_local_experts 4",
                                   dict(raw_moe, num_experts_per_tok=5), ValueError, "num_experts_per_tok"),
                                  ("MoE output_router_logits true (the load-balancing loss, coefficient 0.001)",
                                   dict(raw_moe, output_router_logits=True), NotImplementedError,
                                   "output_router_logits")):
        try:
            G.GraniteHConfig(edit)
            ck(f"[f] {what} is refused", False, "accepted")
        except exc as ex:
            ck(f"[f] {what} is refused by name", word in str(ex), str(ex))


def moe_loop(moe, x, renorm=True):
    """GraniteMoeHybridMoE token by token, written out from GraniteMoeHybridTopKGating (fp64 in, fp64
    out): per token v: logits l_e = W_e . v; the experts sorted by logit (the lower index first on
    a tie), the k first; weights exp(l_j - max) / sum over the k of exp(l_i - max) (renorm False:
    over all E: the negative control); sum_j w_j output_linear[e_j] (silu(g) * u), g the first I
    rows of input_linear[e_j] v, u the other I. Returns (out, each token's experts sorted, each
    token's weights by the engine's order: softmax over all E, the k gathered, renormalised)."""
    c = moe.c
    W, Win, Wout = moe.router.layer.weight.detach(), moe.input_linear.weight.detach(), moe.output_linear.weight.detach()
    E, k, I = c.num_local_experts, c.num_experts_per_tok, c.intermediate_size
    out, picks, engine_w = [], [], []
    for v in x.reshape(-1, x.shape[-1]):
        lg = [float(W[e] @ v) for e in range(E)]
        sel = sorted(range(E), key=lambda e: (-lg[e], e))[:k]
        top = max(lg)
        ex = [math.exp(lg[e] - top) for e in range(E)]
        tot = sum(ex[e] for e in sel) if renorm else sum(ex)
        y = torch.zeros(c.hidden_size, dtype=torch.float64)
        for e in sel:
            h = Win[e] @ v
            y = y + (ex[e] / tot) * (Wout[e] @ (F.silu(h[:I]) * h[I:]))
        out.append(y)
        picks.append(sorted(sel))
        p = [ex[e] / sum(ex) for e in range(E)]  # the engine: softmax over all, top-k, renormalise
        engine_w.append({e: p[e] / sum(p[j] for j in sel) for e in sel})
    return torch.stack(out).reshape(x.shape), picks, engine_w


def moe_configs():
    """(tag, config): the checks' (4 experts top-2 of 24) and one of 8 experts top-3 of width 12."""
    return (("4 experts top-2", G.config_moe(VOCAB)),
            ("8 experts top-3", G.make_config(("attention",), hidden=16, vocab=VOCAB, heads=2, kv_heads=1,
                                              mamba_heads=4, shared_intermediate=20, num_local_experts=8,
                                              num_experts_per_tok=3, intermediate_size=12)))


def check_moe(ck):
    for tag, c in moe_configs():
        m = G.init_model(c, seed=6).double()
        moe = m.model.layers[0].block_sparse_moe
        x = torch.randn(3, 9, c.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
        with torch.no_grad():
            y = moe(x)
            ref, picks, engine_w = moe_loop(moe, x)
            logits = moe.choice
            w = torch.softmax(logits.topk(c.num_experts_per_tok, dim=-1).values, dim=-1)  # the reference's weights
            ew = max(abs(float(w[t, j]) - engine_w[t][int(moe.selected[t, j])]) for t in range(w.shape[0])
                     for j in range(c.num_experts_per_tok))
            nr_model = G.MoE(c, renorm=False).double()
            nr_model.load_state_dict(moe.state_dict())
            e_nr = rel(nr_model(x), moe_loop(moe, x, renorm=False)[0])
        same = [sorted(r) for r in moe.selected.tolist()] == picks
        used = sorted({e for p in picks for e in p})
        e = rel(y, ref)
        ck(f"[g] {tag}: MoE layer vs the token-by-token loop (fp64, 27 tokens; < 1e-13), same experts, every "
           "expert used", e < 1e-13 and same and used == list(range(c.num_local_experts)),
           f"{e:.1e}; selections equal: {same}; experts used {used}")
        ck(f"[g] {tag}: softmax of the k logits = the engine's softmax over all E renormalised over the k (fp64, "
           "< 1e-15); the no-renormalisation variant = the loop's softmax over all E (< 1e-13)",
           ew < 1e-15 and e_nr < 1e-13, f"{ew:.1e}; variant {e_nr:.1e}")
        # gradients: loss = sum(out * R) by central differences (fp64)
        r = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        xp = x.clone().requires_grad_(True)

        def loss():
            return (moe(xp) * r).sum()
        moe.zero_grad(set_to_none=True)
        loss().backward()
        params = dict(moe.named_parameters())
        params["input"] = xp
        I, C = c.intermediate_size, c.hidden_size
        worst, wname, n = 0.0, "", 0
        gsel = torch.Generator().manual_seed(12)
        for name, half in (("router.layer.weight", None), ("input_linear.weight", 0), ("input_linear.weight", 1),
                           ("output_linear.weight", None), ("input", None)):
            p = params[name]
            flat_g = p.grad.reshape(-1)
            idx = torch.arange(flat_g.numel())
            if half is not None:  # the gate (0) / up (1) half of every expert: rows [half I, (half + 1) I)
                idx = idx.reshape(c.num_local_experts, 2 * I * C)[:, half * I * C:(half + 1) * I * C].reshape(-1)
            for kk in (int(idx[int(flat_g[idx].abs().argmax())]),
                       int(idx[int(torch.randint(0, idx.numel(), (1,), generator=gsel))])):
                ag = float(flat_g[kk])
                fd = common.central_diff(p, kk, loss)
                err = abs(fd - ag) / max(abs(ag), 1e-4)
                n += 1
                if err >= worst:
                    worst, wname = err, f"{name}[{kk}] autograd {ag:.9e} fd {fd:.9e}"
        ck(f"[g] {tag}: gradients (router, input_linear's gate and up halves, output_linear, input) vs central "
           f"differences (fp64, {n} scalars, < 1e-7)", worst < 1e-7, f"worst {worst:.1e} ({wname})")


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    ck = NS.Checks()
    check_transformers(ck)
    check_fp64(ck)
    check_fd(ck)
    check_scan(ck)
    check_norm_groups(ck)
    check_config(ck)
    check_moe(ck)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
