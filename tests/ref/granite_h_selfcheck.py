"""Self-checks of the Granite 4.0-H oracle (tests/ref/granite_h_ref.py), without shardlm.

Run: /usr/bin/python3 tests/ref/granite_h_selfcheck.py   (not wired into ctest; ~10 s)
One line per check, then "N passed, M failed":
  a. the model vs transformers' GraniteMoeHybridForCausalLM forward written out from its formulas
     (fp64, both check configs): embeddings * embedding_multiplier, each layer's two residual
     updates residual + h * residual_multiplier, eager attention with scaling =
     attention_multiplier (repeat_kv, additive causal mask, no RoPE), BambaMixer.torch_forward's
     in_proj split, conv, softplus / clamp, BambaRMSNormGated over the whole width, the shared MLP's
     chunk(2) (gate first), logits / logits_scaling; and the reference with each multiplier
     dropped, or with RoPE, far from it (so the check configs make each of them matter);
  b. fp32 vs fp64 of the checks' two configs (logits, loss, every gradient);
  c. autograd vs central finite differences in fp64 on a few scalars of every tensor kind;
  d. the chunked SSD vs the sequential recurrence inside the hybrid model (fp64, chunk not
     dividing T);
  e. at mamba_n_groups 2 the gated norm is transformers' whole-width one (not the per-group one of
     mamba_ssm / vLLM, which Granite 4.0-H's one group makes equal);
  f. config.json: save/load round trip, layers_block_type and mamba_d_head "auto" accepted, MoE
     (num_local_experts > 0, and its default 8 when absent), RoPE and a foreign head_dim refused.
"""
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
CONFIGS = (("mamba/attention/mamba", G.config_hybrid), ("attention/mamba tied biases", G.config_tied_bias))


def _lin(x, lin):
    return x @ lin.weight.t() + (lin.bias if lin.bias is not None else 0)


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


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
        hs = _lin(F.silu(gu[0]) * gu[1], lay.shared_mlp.output_linear)
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
        worst = min(far, key=far.get)
        ck(f"[a] {tag}: logits vs transformers' forward written out (fp64, < 1e-12); each multiplier dropped, "
           f"and RoPE, > 1e-3 off", e < 1e-12 and far[worst] > 1e-3,
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
            "embed_tokens", "lm_head"))]
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
        no_moe = dict(raw)
        del no_moe["num_local_experts"]
        for what, edit, exc, word in (("num_local_experts 4 (MoE)", dict(raw, num_local_experts=4),
                                       NotImplementedError, "MoE"),
                                      ("no num_local_experts (transformers' default 8: MoE)", no_moe,
                                       NotImplementedError, "MoE"),
                                      ("position_embedding_type 'rope'", dict(raw, position_embedding_type="rope"),
                                       NotImplementedError, "rope"),
                                      ("head_dim 8 != hidden / heads 16", dict(raw, head_dim=8), ValueError,
                                       "head_dim"),
                                      ("mamba_d_head 8 with 4 heads != expand * hidden 64", dict(raw, mamba_d_head=8),
                                       ValueError, "mamba_d_head")):
            try:
                G.GraniteHConfig(edit)
                ck(f"[f] {what} is refused", False, "accepted")
            except exc as ex:
                ck(f"[f] {what} is refused by name", word in str(ex), str(ex))


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
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
