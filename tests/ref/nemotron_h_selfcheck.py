"""Self-checks of the Nemotron-H oracle (tests/ref/nemotron_h_ref.py), without shardlm.

Run: /usr/bin/python3 tests/ref/nemotron_h_selfcheck.py   (not wired into ctest; ~30 s)
One line per check, then "N passed, M failed":
  a. an all-'M' pattern equals mamba2_ref's Mamba2ForCausalLM on the same tensors (the
     names are the same; n_groups 1 and 2): logits and every gradient, fp32;
  b. fp32 vs fp64 of the checks' two configs (logits, loss, every gradient);
  c. autograd vs central finite differences in fp64 on a few scalars of every layer kind;
  d. the chunked SSD vs the sequential recurrence inside the hybrid model (fp64, chunk not
     dividing T);
  e. an attention layer vs transformers' eager_attention_forward written out (repeat_kv,
     additive causal mask, no RoPE), and the RoPE variant far from it;
  f. the gated norm vs Zamba2RMSNormGated's formula (group_size = d_inner / n_groups), and
     transformers' whole-width Mamba2 norm far from it at n_groups 2;
  g. config.json: save/load round trip, attention_head_dim and layers_block_type accepted,
     an 'E' model's round trip (the router biases included, the MoE fields written),
     moe_latent_size refused by name;
  h. the 'E' (MoE) layer in fp64 against a token-by-token loop written from
     route_tokens_to_experts (sigmoid, + e_score_correction_bias, sort, the k best, the
     gathered sigmoid scores normalised and scaled, the experts' sum plus the shared
     expert): the checks' config (n_group 1) and a group-limited one (8 experts in 2
     groups, topk_group 1, no renormalisation, mlp_bias); its gradients (router, routed
     and shared experts, input) by central differences; the bias changes the choice of
     some tokens (the config uses it). The MoE model is also in b and c.
"""
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402
import mamba2_ref as M2  # noqa: E402
import nemotron_h_ref as N  # noqa: E402

B, T, VOCAB = 3, 16, 97


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        self.passed += bool(ok)
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def batch(seed=0, b=B, t=T):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (b, t + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def fwd_bwd(m, x, y, **kw):
    m.zero_grad(set_to_none=True)
    logits = m(x, **kw)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.detach().clone() for n, p in m.named_parameters()}


def check_vs_mamba2(ck):
    x, y = batch(1)
    for groups in (1, 2):
        c = N.make_config("MMM", hidden=32, vocab=VOCAB, mamba_heads=8, mamba_head_dim=8, groups=groups, state=8,
                          conv=4, chunk=8)
        nm = N.init_model(c, seed=3)
        c2 = M2.make_config(hidden=32, layers=3, state=8, expand=2, conv=4, heads=8, groups=groups, vocab=VOCAB,
                            chunk=8)
        mm = M2.Mamba2ForCausalLM(c2)
        nn_, mn = [n for n, _ in nm.named_parameters()], [n for n, _ in mm.named_parameters()]
        ck(f"[a] n_groups {groups}: the all-'M' model's tensor names are Mamba2ForCausalLM's", nn_ == mn,
           f"{len(nn_)} tensors" if nn_ == mn else f"{sorted(set(nn_) ^ set(mn))}")
        mm.load_state_dict(nm.state_dict())
        la, lo_a, ga = fwd_bwd(nm, x, y)
        lb, lo_b, gb = fwd_bwd(mm, x, y)
        errs = {"logits": rel(la, lb), "loss": rel(lo_a, lo_b)}
        errs.update({"grad." + n: rel(ga[n], gb[n]) for n in ga})
        worst = max(errs, key=errs.get)
        ck(f"[a] n_groups {groups}: logits, loss, all grads vs mamba2_ref (1e-6 rel)", errs[worst] <= 1e-6,
           f"worst {worst} {errs[worst]:.1e}")


def scale_rel(a, b, grads):
    """rel() for every tensor but those whose gradient is analytically zero (N.ZERO_GRAD), whose
    difference is taken against the largest gradient of the model instead."""
    top = max(float(np.abs(np.asarray(g, np.float64)).max()) for g in grads.values())
    return {n: (float(np.abs(np.asarray(a[n], np.float64) - np.asarray(b[n], np.float64)).max()) / top
                if n.endswith(N.ZERO_GRAD) else rel(a[n], b[n])) for n in a}


def check_fp64(ck):
    for tag, c in (("M*M-", N.config_hybrid(VOCAB)), ("M-* tied bias limit", N.config_tied_bias(VOCAB)),
                   ("M*EME moe", N.config_moe(VOCAB))):
        m32 = N.init_model(c, seed=7)
        m64 = N.init_model(c, seed=7).double()
        x, y = batch(2)
        a, b = fwd_bwd(m32, x, y), fwd_bwd(m64, x, y)
        errs = {"logits": rel(a[0], b[0]), "loss": rel(a[1], b[1])}
        errs.update({"grad." + n: v for n, v in scale_rel(a[2], b[2], b[2]).items()})
        worst = max(errs, key=errs.get)
        zero = [n for n in a[2] if n.endswith(N.ZERO_GRAD)]
        extra = "".join(f"; {n} (analytically 0) max|g| fp32 {float(a[2][n].abs().max()):.1e} fp64 "
                        f"{float(b[2][n].abs().max()):.1e}" for n in zero)
        ck(f"[b] {tag}: fp32 vs fp64, logits, loss, all grads (< 1e-5 rel, half the engine's 2e-5)",
           errs[worst] < 1e-5, f"worst {worst} {errs[worst]:.1e}; logits {errs['logits']:.1e}{extra}")


def fd_worst(m, x, y, probes):
    """Central differences with h 1e-5 on an fp64 model m (truncation ~h^2, rounding ~1e-16 * loss / h
    ~ 1e-11): per probed tensor (names of m) its largest-gradient element and a random one; returns
    (worst |fd - autograd| / max(|autograd|, 1e-4), what it was, how many scalars)."""

    def loss():
        lg = m(x)
        return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))

    m.zero_grad(set_to_none=True)
    loss().backward()
    params = dict(m.named_parameters())
    worst, wname, n = 0.0, "", 0
    g = torch.Generator().manual_seed(11)
    for name in probes:
        p = params[name]
        for i in (int(p.grad.abs().argmax()), int(torch.randint(0, p.numel(), (1,), generator=g))):
            ag = float(p.grad.reshape(-1)[i])
            h = 1e-5
            with torch.no_grad():
                flat = p.view(-1)
                old = float(flat[i])
                flat[i] = old + h
                lp = float(loss())
                flat[i] = old - h
                lm = float(loss())
                flat[i] = old
            fd = (lp - lm) / (2 * h)
            e = abs(fd - ag) / max(abs(ag), 1e-4)
            n += 1
            if e >= worst:
                worst, wname = e, f"{name}[{i}] autograd {ag:.9e} fd {fd:.9e}"
    return worst, wname, n


def check_fd(ck):
    for tag, c in (("M*M-", N.config_hybrid(VOCAB)), ("M-* tied bias limit", N.config_tied_bias(VOCAB)),
                   ("M*EME moe", N.config_moe(VOCAB))):
        m = N.init_model(c, seed=5).double()
        x, y = batch(3)
        probes = [n for n, _ in m.named_parameters() if any(s in n for s in (
            "layers.0.mixer.A_log", "layers.0.mixer.dt_bias", "layers.0.mixer.D", "layers.0.mixer.conv1d.weight",
            "layers.0.mixer.in_proj.weight", "layers.0.mixer.norm.weight", "q_proj.weight", "k_proj.weight",
            "v_proj.bias", "up_proj.weight", "down_proj.bias", "layers.1.norm.weight", "embeddings.weight",
            "mixer.gate.weight", "experts.1.down_proj.weight", "shared_experts.down_proj.weight"))]
        worst, wname, n = fd_worst(m, x, y, probes)
        ck(f"[c] {tag}: autograd vs central differences (fp64, {n} scalars of {len(probes)} tensors, < 1e-6)",
           worst < 1e-6, f"worst {worst:.1e} ({wname})")


def check_scan(ck):
    c = N.make_config("M*M-M", hidden=16, vocab=VOCAB, heads=2, kv_heads=1, head_dim=8, intermediate=24,
                      mamba_heads=4, mamba_head_dim=8, groups=2, state=4, chunk=5, limit=(0.002, 0.06))
    m = N.init_model(c, seed=1).double()
    x, _ = batch(4, 2, 13)
    a, b = m(x, M2.ssd_chunked), m(x, M2.ssd_sequential)
    e = rel(a.detach(), b.detach())
    ck("[d] hybrid model: chunked SSD vs the sequential recurrence (fp64, chunk 5, T 13)", e < 1e-12, f"{e:.1e}")


def eager_attention(att, h, nh, nkv, hd):
    """transformers' NemotronHAttention.forward + eager_attention_forward, written out."""
    b, t, _ = h.shape
    q = att.q_proj(h).view(b, t, -1, hd).transpose(1, 2)
    k = att.k_proj(h).view(b, t, -1, hd).transpose(1, 2)
    v = att.v_proj(h).view(b, t, -1, hd).transpose(1, 2)
    rep = nh // nkv
    k = k[:, :, None].expand(b, nkv, rep, t, hd).reshape(b, nh, t, hd)
    v = v[:, :, None].expand(b, nkv, rep, t, hd).reshape(b, nh, t, hd)
    mask = torch.full((t, t), float("-inf"), dtype=h.dtype).triu(1)
    w = torch.softmax(q @ k.transpose(2, 3) * hd ** -0.5 + mask, dim=-1)
    return att.o_proj((w @ v).transpose(1, 2).reshape(b, t, -1))


def check_attention(ck):
    for tag, c in (("GQA 4/2", N.config_hybrid(VOCAB)), ("MQA 2/1, biases", N.config_tied_bias(VOCAB))):
        m = N.init_model(c, seed=2).double()
        i = c.pattern.index("*")
        att = m.backbone.layers[i].mixer
        h = torch.randn(2, 11, c.hidden_size, dtype=torch.float64)
        ones, zeros = torch.ones(11, c.head_dim, dtype=torch.float64), torch.zeros(11, c.head_dim, dtype=torch.float64)
        ref = eager_attention(att, h, c.num_attention_heads, c.num_key_value_heads, c.head_dim)
        e = rel(att(h, ones, zeros).detach(), ref.detach())
        cos, sin = L.rope_cos_sin(11, c.head_dim, 10000.0, torch.float64)
        e_rope = rel(att(h, cos, sin).detach(), ref.detach())
        ck(f"[e] {tag}: attention vs transformers' eager path (fp64), RoPE variant far", e < 1e-13 and e_rope > 1e-3,
           f"{e:.1e}; with RoPE {e_rope:.1e}")


def check_gated_norm(ck):
    D, G, eps = 48, 2, 1e-5
    y, z = torch.randn(3, 5, D, dtype=torch.float64), torch.randn(3, 5, D, dtype=torch.float64)
    norm = M2.GatedRMSNorm(D, G, eps).double()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(D, dtype=torch.float64))
    gs = D // G  # Zamba2RMSNormGated(intermediate, group_size=intermediate // n_groups)
    hs = y * F.silu(z)
    grp = hs.view(3, 5, D // gs, gs)
    grp = grp * torch.rsqrt(grp.pow(2).mean(-1, keepdim=True) + eps)
    zamba = norm.weight * grp.view(3, 5, D)
    whole = hs * torch.rsqrt(hs.pow(2).mean(-1, keepdim=True) + eps) * norm.weight
    e, e_whole = rel(norm(y, z).detach(), zamba.detach()), rel(whole.detach(), zamba.detach())
    ck("[f] gated norm vs Zamba2RMSNormGated (group_size 24 of 48), whole-width norm far", e < 1e-14 and e_whole > 1e-3,
       f"{e:.1e}; whole-width {e_whole:.1e}")
    mlp = N.MLP(N.config_hybrid(VOCAB)).double()
    x = torch.randn(4, 32, dtype=torch.float64)
    u = x @ mlp.up_proj.weight.t() + mlp.up_proj.bias if mlp.up_proj.bias is not None else x @ mlp.up_proj.weight.t()
    ref = (torch.clamp(u, min=0) ** 2) @ mlp.down_proj.weight.t()
    ck("[f] MLP: down_proj(relu(up_proj x)^2)", rel(mlp(x).detach(), ref.detach()) < 1e-14, "")


def check_config(ck):
    with tempfile.TemporaryDirectory() as d:
        c = N.config_tied_bias(VOCAB)
        m = N.init_model(c, seed=4)
        N.save_hf(m, d)
        back = N.load_hf(d)
        same = all(torch.equal(p, q) for p, q in zip(m.parameters(), back.parameters()))
        ck("[g] save_hf / load_hf round trip (tensors, config)", same and back.config.to_dict() == c.to_dict(), "")
        txt = open(os.path.join(d, "config.json")).read()
        ck("[g] config.json: hybrid_override_pattern and head_dim written", '"hybrid_override_pattern": "M-*"' in txt
           and '"head_dim": 16' in txt, "")
        raw = common.config_read(d)
        alias = dict(raw)
        alias["attention_head_dim"] = alias.pop("head_dim")
        alias["layers_block_type"] = ["mamba", "mlp", "attention"]
        del alias["hybrid_override_pattern"]
        ca = N.NemotronHConfig(alias)
        ck("[g] attention_head_dim and layers_block_type read as head_dim / the pattern",
           ca.to_dict() == c.to_dict(), "")
    with tempfile.TemporaryDirectory() as d:
        c = N.config_moe(VOCAB)
        m = N.init_model(c, seed=4)
        N.save_hf(m, d)
        back = N.load_hf(d)
        st = common.st_read(os.path.join(d, "model.safetensors"))
        bias = [n for n in st if n.endswith("e_score_correction_bias")]
        same = all(torch.equal(p, q) for p, q in zip(m.state_dict().values(), back.state_dict().values()))
        nz = all(float(np.abs(st[n]).min()) > 0 for n in bias)
        ck("[g] 'E' model: save_hf / load_hf round trip (parameters and the routers' e_score_correction_bias, "
           "nonzero)", same and len(bias) == c.pattern.count("E") and nz and back.config.to_dict() == c.to_dict(),
           f"{len(st)} tensors, biases {bias}")
        raw = common.config_read(d)
        want = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                    moe_shared_expert_intermediate_size=40, routed_scaling_factor=2.5, n_group=1, topk_group=1,
                    norm_topk_prob=True, n_shared_experts=1, moe_latent_size=None)
        bad = {k: raw.get(k, "absent") for k, v in want.items() if raw.get(k, "absent") != v}
        ck("[g] config.json: the MoE fields written", not bad, str(bad) if bad else ", ".join(want))
        dense = N.config_hybrid(VOCAB).to_dict()
        ck("[g] a dense config writes them too (transformers' defaults)", all(k in dense for k in want),
           f"n_routed_experts {dense.get('n_routed_experts')}, "
           f"moe_intermediate_size {dense.get('moe_intermediate_size')}")
        try:
            N.NemotronHConfig(dict(raw, moe_latent_size=16))
            ck("[g] moe_latent_size (the latent MoE) is refused by name", False, "accepted")
        except NotImplementedError as ex:
            ck("[g] moe_latent_size (the latent MoE) is refused by name", "moe_latent_size" in str(ex), str(ex))


def moe_loop(moe, x):
    """NemotronHMoE token by token, written out from route_tokens_to_experts (fp64 in, fp64 out):
    per token: logits = W x, s = sigmoid, choice = s + bias; with n_group > 1 the groups ranked by
    the sum of their two best choice scores, the topk_group best kept, the rest 0; the experts
    sorted by choice (index breaks ties), the k first; weights s (no bias) / (sum + 1e-20) when
    norm_topk_prob, times routed_scaling_factor; sum_j w_j down(relu(up x)^2) + the shared MLP."""
    c = moe.c
    W, bias = moe.gate.weight.detach(), moe.gate.e_score_correction_bias
    ne, g = c.n_routed_experts, c.n_group
    per = ne // g

    def lin(mod, v):
        return mod.weight.detach() @ v + (mod.bias.detach() if mod.bias is not None else 0)

    def mlp(mod, v):
        return lin(mod.down_proj, torch.clamp(lin(mod.up_proj, v), min=0) ** 2)

    out, picks = [], []
    for v in x.reshape(-1, x.shape[-1]):
        s = [1 / (1 + math.exp(-float(W[e] @ v))) for e in range(ne)]
        ch = [s[e] + float(bias[e]) for e in range(ne)]
        if g > 1:
            gs = [sum(sorted(ch[j * per:(j + 1) * per], reverse=True)[:2]) for j in range(g)]
            keep = sorted(range(g), key=lambda j: (-gs[j], j))[:c.topk_group]
            ch = [ch[e] if e // per in keep else 0.0 for e in range(ne)]
        sel = sorted(range(ne), key=lambda e: (-ch[e], e))[:c.num_experts_per_tok]
        w = [s[e] for e in sel]
        if c.norm_topk_prob:
            tot = sum(w) + 1e-20
            w = [wi / tot for wi in w]
        w = [wi * c.routed_scaling_factor for wi in w]
        y = mlp(moe.shared_experts, v)
        for wi, e in zip(w, sel):
            y = y + wi * mlp(moe.experts[e], v)
        out.append(y)
        picks.append(sorted(sel))
    return torch.stack(out).reshape(x.shape), picks


def moe_configs():
    """(tag, config): the checks' (4 experts top-2, norm, scale 2.5) and a group-limited one."""
    return (("4 experts top-2, n_group 1", N.config_moe(VOCAB)),
            ("8 experts top-3, n_group 2 topk_group 1, no norm, mlp_bias",
             N.make_config("E", hidden=16, vocab=VOCAB, n_routed_experts=8, num_experts_per_tok=3,
                           moe_intermediate_size=12, moe_shared_expert_intermediate_size=20, routed_scaling_factor=1.7,
                           n_group=2, topk_group=1, norm_topk_prob=False, mlp_bias=True)))


def check_moe(ck):
    for tag, c in moe_configs():
        m = N.init_model(c, seed=6).double()
        i = c.pattern.index("E")
        moe = m.backbone.layers[i].mixer
        x = torch.randn(3, 9, c.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
        y = moe(x)
        ref, picks = moe_loop(moe, x)
        same = [sorted(r) for r in moe.selected.tolist()] == picks
        e = rel(y.detach(), ref)
        groups = ""
        if c.n_group > 1:  # every token's experts lie in one group (topk_group 1)
            per = c.n_routed_experts // c.n_group
            one = all(len({e_ // per for e_ in p}) == 1 for p in picks)
            used = sorted({p[0] // per for p in picks})
            groups = f"; every token in one group: {one}, groups used {used}"
            same = same and one and len(used) > 1
        ck(f"[h] {tag}: MoE layer vs the token-by-token loop (fp64, 27 tokens; < 1e-13), same experts", e < 1e-13
           and same, f"{e:.1e}; selections equal: {same}{groups}")
        # gradients: loss = sum(out * R) by central differences (fp64)
        r = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        xp = x.clone().requires_grad_(True)

        def loss():
            return (moe(xp) * r).sum()
        moe.zero_grad(set_to_none=True)
        loss().backward()
        params = dict(moe.named_parameters())
        params["input"] = xp
        worst, wname, n = 0.0, "", 0
        gsel = torch.Generator().manual_seed(12)
        for name in ("gate.weight", "experts.0.up_proj.weight", "experts.1.down_proj.weight",
                     f"experts.{c.n_routed_experts - 1}.up_proj.weight", "shared_experts.up_proj.weight",
                     "shared_experts.down_proj.weight", "input") + (("shared_experts.up_proj.bias",) if c.mlp_bias
                                                                    else ()):
            p = params[name]
            for k in (int(p.grad.abs().argmax()), int(torch.randint(0, p.numel(), (1,), generator=gsel))):
                ag = float(p.grad.reshape(-1)[k])
                fd = common.central_diff(p, k, loss)
                err = abs(fd - ag) / max(abs(ag), 1e-4)
                n += 1
                if err >= worst:
                    worst, wname = err, f"{name}[{k}] autograd {ag:.9e} fd {fd:.9e}"
        ck(f"[h] {tag}: gradients (router, routed and shared experts, input) vs central differences (fp64, {n} "
           "scalars, < 1e-7)", worst < 1e-7, f"worst {worst:.1e} ({wname})")
    # the bias is used: zeroed, some tokens choose other experts (the checks' config and init)
    c = N.config_moe(VOCAB)
    m = N.init_model(c, seed=6)
    x, _ = batch(5)
    with torch.no_grad():
        m(x)
        before = [sorted(r) for b in m.backbone.layers if b.kind == "moe" for r in b.mixer.selected.tolist()]
        bias = [float(b.mixer.gate.e_score_correction_bias.abs().max()) for b in m.backbone.layers if b.kind == "moe"]
        for b in m.backbone.layers:
            if b.kind == "moe":
                b.mixer.gate.e_score_correction_bias.zero_()
        m(x)
        after = [sorted(r) for b in m.backbone.layers if b.kind == "moe" for r in b.mixer.selected.tolist()]
    diff = sum(a != b for a, b in zip(before, after))
    ck("[h] e_score_correction_bias changes the choice of some tokens (init_model's N(0, 0.05) bias)", diff > 0,
       f"{diff} of {len(before)} token-layers choose differently without it (max|bias| per layer "
       + ", ".join(f"{v:.3f}" for v in bias) + ")")


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    ck = Checks()
    check_vs_mamba2(ck)
    check_fp64(ck)
    check_fd(ck)
    check_scan(ck)
    check_attention(ck)
    check_gated_norm(ck)
    check_config(ck)
    check_moe(ck)
    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
