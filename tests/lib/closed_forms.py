#!/usr/bin/env python3
"""Closed forms of the field guide for one optimizer step of the engine,
computed from a Llama config.json independently of the engine's code:
per-unit flat sizes, padding to a multiple of d*align, communication bytes
per collective and per-rank model-state bytes per ZeRO stage (fp32 variant
of the CPU backend: params 4 + grads 4 + master/m/v 12 bytes per parameter).

usage: closed_forms.py CONFIG.json WORLD ZERO METRICS.jsonl
Checks the metrics of the last step against the closed forms and prints
one line per check; exit status 1 on any mismatch."""
import json
import sys

ALIGN = 16


def units(cfg):
    C = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim", C // nh)
    I = cfg["intermediate_size"]
    V = cfg["vocab_size"]
    L = cfg["num_hidden_layers"]
    block = C + (nh + 2 * nkv) * hd * C + C * nh * hd + C + 2 * I * C + I * C
    head = C + (0 if cfg.get("tie_word_embeddings") else V * C)
    return [V * C] + [block] * L + [head]


def main():
    cfgp, d, zero, mp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    cfg = json.load(open(cfgp))
    q = d * ALIGN
    padded = [(n + q - 1) // q * q for n in units(cfg)]
    P = sum(padded)
    last = [json.loads(l) for l in open(mp) if l.strip()][-1]
    fails = 0

    def check(name, got, want, rel):
        nonlocal fails
        ok = abs(got - want) <= rel * max(abs(want), 1)
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} world {d} ZeRO-{zero} {name}: measured {got} closed form {want}"
              + (f" (within {rel:.0%})" if rel else " (exact)"))

    # communication: bus bytes per rank, fp32 (e = 4)
    factor = 3 if zero == 3 else 2
    want = factor * (d - 1) * P * 4 // d
    want += 8 * (d - 1)  # the gradient-norm exchange: one double per rank
    check("comm bytes/step", last["comm_bytes"], want, 0)
    # memory: model states per arena
    a = last["arena_peak"]
    pairs = max(padded[i] + padded[i + 1] for i in range(len(padded) - 1))
    want_params = 4 * P if zero <= 2 else 4 * P // d
    want_grads = 4 * P if zero <= 1 else 4 * P // d + 4 * pairs  # + full grads of 2 units in flight
    want_optim = 12 * P if zero == 0 else 12 * P // d
    want_gather = 4 * pairs if zero == 3 else 0  # computing unit + 1 prefetched
    check("params arena", a["params"], want_params, 0.02)
    check("grads arena", a["grads"], want_grads, 0.02)
    check("optim arena", a["optim"], want_optim, 0.02)
    check("gather arena", a["gather"], want_gather, 0.02)
    state = a["params"] + a["grads"] + a["optim"] + a["gather"]
    print(f"info world {d} ZeRO-{zero} model-state bytes {state} ({state / (20 * P):.1%} of ZeRO-0's 20 bytes/param)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
