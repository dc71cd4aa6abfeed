"""Self-tests of the PyTorch oracle itself (no engine needed).

Checks the reference against independent formulations: autograd gradcheck in
float64, a naive loop attention (GQA mapping, causal mask, RoPE pair layout),
the data order across document boundaries and the wrap, file-format
round-trips, the LR schedule, and that training lowers the loss.
Prints one line per check; returns the number of failures.
"""
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref as L  # noqa: E402


def _naive_forward(m, idx):
    """Loop-per-head/per-position Llama forward, written from scratch."""
    c = m.config
    P = dict(m.named_parameters())
    B, T = idx.shape
    hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
    half = hd // 2

    def rms(x, w):  # Gemma: scale by 1 + w
        return (1 + w if c.gemma else w) * x / torch.sqrt((x * x).mean(-1, keepdim=True) + c.rms_norm_eps)

    def cap(v, k):
        return k * torch.tanh(v / k) if k else v

    def act(v):
        if c.act == "gelu_pytorch_tanh":
            return 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        return v / (1 + torch.exp(-v))

    theta = [c.rope_local_theta if c.layer_local[li] else c.rope_theta for li in range(c.num_hidden_layers)]

    def rope(v, pos, li):  # v (hd,): pairs (i, i+half) rotated by pos*theta^(-2i/hd)
        out = v.clone()
        for i in range(half):
            ang = pos * theta[li] ** (-2.0 * i / hd)
            co, si = math.cos(ang), math.sin(ang)
            out[i] = v[i] * co - v[i + half] * si
            out[i + half] = v[i + half] * co + v[i] * si
        return out

    x = P["model.embed_tokens.weight"][idx]
    if c.gemma:
        x = x * math.sqrt(c.hidden_size)
    for li in range(c.num_hidden_layers):
        pre = f"model.layers.{li}."
        def lin(h, name):  # h @ W^T (+ b when the checkpoint has the bias)
            out = h @ P[pre + name + ".weight"].t()
            return out + P[pre + name + ".bias"] if pre + name + ".bias" in P else out

        def qk_norm(vec, name):  # Qwen3: one head's hd values
            return rms(vec, P[pre + name]) if pre + name in P else vec
        win = c.layer_windows[li]
        h = rms(x, P[pre + "input_layernorm.weight"])
        q = lin(h, "self_attn.q_proj")
        k = lin(h, "self_attn.k_proj")
        v = lin(h, "self_attn.v_proj")
        y = torch.zeros(B, T, nh * hd, dtype=x.dtype)
        for b in range(B):
            for head in range(nh):
                kvh = head // (nh // nkv)
                for t in range(T):
                    qt = rope(qk_norm(q[b, t, head * hd:(head + 1) * hd], "self_attn.q_norm.weight"), t, li)
                    us = [u for u in range(t + 1) if win == 0 or t - u < win]
                    sc = []
                    for u in us:
                        ku = rope(qk_norm(k[b, u, kvh * hd:(kvh + 1) * hd], "self_attn.k_norm.weight"), u, li)
                        sc.append(cap(torch.dot(qt, ku) * c.attn_scale, c.attn_softcap))
                    p = torch.softmax(torch.stack(sc), 0)
                    acc = torch.zeros(hd, dtype=x.dtype)
                    for i, u in enumerate(us):
                        acc = acc + p[i] * v[b, u, kvh * hd:(kvh + 1) * hd]
                    y[b, t, head * hd:(head + 1) * hd] = acc
        if c.gemma:  # sandwich norms
            x = x + rms(lin(y, "self_attn.o_proj"), P[pre + "post_attention_layernorm.weight"])
            h = rms(x, P[pre + "pre_feedforward_layernorm.weight"])
        else:
            x = x + lin(y, "self_attn.o_proj")
            h = rms(x, P[pre + "post_attention_layernorm.weight"])
        g = lin(h, "mlp.gate_proj")
        u_ = lin(h, "mlp.up_proj")
        o = lin(act(g) * u_, "mlp.down_proj")
        x = x + (rms(o, P[pre + "post_feedforward_layernorm.weight"]) if c.gemma else o)
    x = rms(x, P["model.norm.weight"])
    W = P["model.embed_tokens.weight"] if c.tie_word_embeddings else P["lm_head.weight"]
    return cap(x @ W.t(), c.final_softcap)


def run():
    torch.manual_seed(0)
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} selftest: {name} {detail}".rstrip(), flush=True)

    # 1. naive forward == vectorised forward (float64), tied and untied, head_dim != h/a
    for tied in (False, True):
        c = L.make_config(hidden=12, layers=2, heads=4, kv_heads=2, intermediate=20, vocab=13,
                          tied=tied, head_dim=4)
        m = L.init_model(c, seed=3, std=0.3, norm_jitter=0.2).double()
        idx = torch.randint(0, 13, (2, 6))
        a, b = m(idx), _naive_forward(m, idx)
        err = (a - b).abs().max().item() / b.abs().max().item()
        check(f"naive loop forward (tied={tied})", err < 1e-12, f"rel {err:.2e}")
    # 1b. the same for the block options: Qwen2 (q/k/v bias, a sliding layer),
    # Qwen3 (q/k norms, with and without attention_bias), Llama's biases
    for fam, ex in (("qwen2", dict(use_sliding_window=True, max_window_layers=1, sliding_window=3)),
                    ("qwen3", {}), ("qwen3", dict(attention_bias=True)),
                    (None, dict(attention_bias=True, mlp_bias=True)),
                    ("gemma2", dict(sliding_window=3, attn_logit_softcapping=0.5, final_logit_softcapping=3.0,
                                    query_pre_attn_scalar=6, hidden_activation="gelu_pytorch_tanh")),
                    ("gemma3_text", dict(sliding_window=3, sliding_window_pattern=2, rope_local_base_freq=100.0,
                                         rope_theta=1e6, query_pre_attn_scalar=6,
                                         hidden_activation="gelu_pytorch_tanh"))):
        c = L.make_config(hidden=12, layers=2, heads=4, kv_heads=2, intermediate=20, vocab=13,
                          head_dim=4, family=fam, **ex)
        m = L.init_model(c, seed=3, std=0.3, norm_jitter=0.2).double()
        idx = torch.randint(0, 13, (2, 6))
        a, b = m(idx), _naive_forward(m, idx)
        err = (a - b).abs().max().item() / b.abs().max().item()
        check(f"naive loop forward ({fam or 'llama'} {sorted(ex)})", err < 1e-12, f"rel {err:.2e}")

    # 2. gradcheck of the loss wrt every parameter (float64)
    c = L.make_config(hidden=8, layers=1, heads=2, kv_heads=1, intermediate=12, vocab=11)
    m = L.init_model(c, seed=1, std=0.3, norm_jitter=0.2).double()
    names = [n for n, _ in m.named_parameters()]
    x = torch.randint(0, 11, (2, 5))
    y = torch.randint(0, 11, (2, 5))

    def f(*ps):
        out = torch.nn.utils.stateless.functional_call(m, dict(zip(names, ps)), (x,))
        return L.loss_fn(out, y)
    ps = tuple(p.detach().clone().requires_grad_(True) for p in m.parameters())
    ok = torch.autograd.gradcheck(f, ps, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False)
    check("autograd gradcheck float64 (all params)", bool(ok))

    # 3. RoPE: scores depend only on relative position
    cos, sin = L.rope_cos_sin(9, 8, 10000.0, torch.float64)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)

    def rot(v, p):
        return v * cos[p] + L.rotate_half(v) * sin[p]
    d1 = torch.dot(rot(q, 5), rot(k, 2)).item()
    d2 = torch.dot(rot(q, 8), rot(k, 5)).item()
    check("rope relative-position invariance", abs(d1 - d2) < 1e-12, f"{d1:.6f} {d2:.6f}")

    # 4. data order across document boundaries and the wrap
    with tempfile.TemporaryDirectory() as td:
        docs = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7, 8, 9, 10])]
        common.idx_write(os.path.join(td, "d"), docs)
        with open(os.path.join(td, "d.idx"), "rb") as fh:
            raw = fh.read()
        hdr_ok = (raw[:9] == b"MMIDIDX\x00\x00" and struct.unpack_from("<QBQQ", raw, 9) == (1, 8, 3, 4)
                  and len(raw) == 34 + 3 * 4 + 3 * 8 + 4 * 8)
        st = common.token_stream(os.path.join(td, "d"))
        x0, y0 = L.batch(st, 0, 2, 4)
        x2, y2 = L.batch(st, 2, 1, 4)
        ok = (st.tolist() == list(range(1, 11)) and x0.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
              and y0.tolist() == [[2, 3, 4, 5], [6, 7, 8, 9]] and x2.tolist() == [[9, 10, 1, 2]]
              and y2.tolist() == [[10, 1, 2, 3]])
        check("megatron idx layout + sequential data order with wrap", hdr_ok and ok)
        # int32 dtype code
        common.idx_write(os.path.join(td, "e"), docs, dtype=np.int32)
        with open(os.path.join(td, "e.idx"), "rb") as fh:
            code = fh.read()[17]
        check("megatron int32 dtype code", code == 4 and
              common.token_stream(os.path.join(td, "e")).tolist() == list(range(1, 11)))

        # 5. safetensors round trips
        t = {"a": np.random.randn(3, 5).astype(np.float32), "b": np.arange(4, dtype=np.float32)}
        p = os.path.join(td, "t.safetensors")
        common.st_write(p, t)
        r = common.st_read(p)
        ok = all(np.array_equal(t[k], r[k]) for k in t)
        with open(p, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
        ok = ok and n % 8 == 0 and os.path.getsize(p) == 8 + n + 4 * 19
        check("safetensors F32 round trip", ok)
        common.st_write(p, t, dtype="BF16")
        r = common.st_read(p)
        ref = torch.from_numpy(t["a"]).bfloat16().float().numpy()
        check("safetensors BF16 round trip (RNE = torch)", np.array_equal(ref, r["a"]))
        common.st_write(p, t, dtype="F16")
        r = common.st_read(p)
        check("safetensors F16 round trip", np.array_equal(t["a"].astype(np.float16).astype(np.float32), r["a"]))

        # 6. HF dir save/load
        c = L.make_config(tied=True)
        m = L.init_model(c, seed=5)
        L.save_hf(m, os.path.join(td, "hf"))
        m2 = L.load_hf(os.path.join(td, "hf"))
        ok = all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))
        names = set(common.st_read(os.path.join(td, "hf", "model.safetensors")))
        check("HF dir save/load (tied, no lm_head tensor)", ok and "lm_head.weight" not in names
              and len(names) == 2 + 9 * c.num_hidden_layers)

    # 7. LR schedule
    lrs = [L.lr_at(s, 1.0, 0.1, 3, 10) for s in range(10)]
    ok = (abs(lrs[0] - 1 / 3) < 1e-15 and lrs[2] == 1.0 and lrs[3] == 1.0 and abs(lrs[9] - 0.1) < 1e-15
          and all(lrs[i] > lrs[i + 1] for i in range(3, 9)))
    check("lr warmup + cosine", ok, " ".join(f"{v:.3f}" for v in lrs))

    # 8. whole-batch == accumulated micro-batches (random tokens), and the loss drops
    c = L.make_config()
    st = np.random.RandomState(0).randint(0, c.vocab_size, 400)
    kw = dict(steps=10, B=2, T=16, accum=2, lr=3e-3, min_lr=3e-4, warmup=3, wd=0.1, b1=0.9,
              b2=0.95, eps=1e-8, clip=1.0)
    m1, m2 = L.init_model(c, seed=2), L.init_model(c, seed=2)
    r1 = L.train(m1, st, whole_batch=True, **kw)
    r2 = L.train(m2, st, whole_batch=False, **kw)
    dl = max(abs(a["loss"] - b["loss"]) for a, b in zip(r1, r2))
    dw = max((a - b).abs().max().item() for a, b in zip(m1.parameters(), m2.parameters()))
    check("whole batch == grad accumulation", dl < 1e-5 and dw < 1e-5, f"dloss {dl:.1e} dw {dw:.1e}")
    st[::2] = 7  # learnable structure
    kw.update(lr=1e-2, steps=12)
    r1 = L.train(L.init_model(c, seed=2), st, **kw)
    check("training lowers the loss", r1[-1]["loss"] < r1[0]["loss"] - 0.5,
          f"{r1[0]['loss']:.3f} -> {r1[-1]['loss']:.3f}")

    nfail = results.count(False)
    print(f"selftest: {len(results) - nfail} passed, {nfail} failed")
    return nfail


if __name__ == "__main__":
    torch.set_num_threads(2)
    sys.exit(1 if run() else 0)
