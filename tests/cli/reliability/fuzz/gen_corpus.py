#!/usr/bin/python3
"""tests/cli/reliability/fuzz/gen_corpus.py OUTDIR [MANIFEST.json] — writes seed corpora of
valid and invalid inputs for the four fuzz targets, byte by byte with
struct/json (independent of the engine): OUTDIR/{safetensors,idx,hfconfig,
manifest}/. A real checkpoint manifest, when given, is added as a seed."""
import json, os, struct, sys

out = sys.argv[1]
def put(kind, name, data):
    d = os.path.join(out, kind); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), "wb").write(data if isinstance(data, bytes) else data.encode())

# safetensors
def st(tensors, meta=None, pad=b""):
    hdr, blob = {}, b""
    if meta is not None: hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(hdr).encode() + pad
    return struct.pack("<Q", len(h)) + h + blob
f32 = lambda n: struct.pack(f"<{n}f", *[i * 0.5 for i in range(n)])
put("safetensors", "good", st([("a", "F32", [2, 3], f32(6)), ("b", "BF16", [4], b"\x80\x3f" * 4)], {"format": "pt"}))
put("safetensors", "f16", st([("x", "F16", [3], b"\x00\x3c" * 3), ("i", "I64", [1], b"\x01" + b"\0" * 7)]))
put("safetensors", "scalar", st([("s", "F32", [], f32(1))], pad=b"   "))
put("safetensors", "bad_len", struct.pack("<Q", 1 << 40) + b"{}")
put("safetensors", "bad_offsets", st([("a", "F32", [2], f32(3))]))
put("safetensors", "bad_json", struct.pack("<Q", 5) + b"{\"a\":")
put("safetensors", "overlap", struct.pack("<Q", 90) + json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode().ljust(90) + f32(3))

# Megatron .idx (first 8 bytes: the .bin size the target validates against)
def idx(sizes, docs, dtype=8, magic=b"MMIDIDX\x00\x00", version=1, elem=2):
    pointers, p = [], 0
    for s in sizes: pointers.append(p); p += s * elem
    b = magic + struct.pack("<Q", version) + struct.pack("<B", dtype) + struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(docs))
    b += struct.pack(f"<{len(sizes)}i", *sizes) + struct.pack(f"<{len(sizes)}q", *pointers) + struct.pack(f"<{len(docs)}q", *docs)
    return struct.pack("<q", p) + b
put("idx", "good", idx([3, 5, 2], [0, 1, 3]))
put("idx", "uint8", idx([4, 4], [0, 2], dtype=1, elem=1))
put("idx", "float_dtype", idx([3], [0, 1], dtype=6, elem=8))
put("idx", "bad_magic", idx([3], [0, 1], magic=b"NOTANIDX\x00"))
put("idx", "bad_docs", idx([3, 3], [0, 5]))
put("idx", "truncated", idx([3, 5, 2], [0, 1, 3])[:40])
put("idx", "empty", idx([], [0]))

# config.json
llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
         "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 320,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "max_position_embeddings": 64}
put("hfconfig", "llama", json.dumps(llama))
put("hfconfig", "mistral", json.dumps(dict(llama, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=16)))
put("hfconfig", "mamba_hf", json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 32,
         "state_size": 8, "num_hidden_layers": 2, "vocab_size": 320, "expand": 2, "conv_kernel": 4}))
put("hfconfig", "mamba_ss", json.dumps({"d_model": 32, "n_layer": 2, "vocab_size": 320, "ssm_cfg": {}}))
put("hfconfig", "bad_heads", json.dumps(dict(llama, num_attention_heads=3)))
put("hfconfig", "bad_type", json.dumps(dict(llama, hidden_size="32")))
put("hfconfig", "not_json", "{\"hidden_size\": 32,")

# checkpoint manifest
def frame(off, n):
    return {"offset": off, "bytes": 4 * n, "raw": 4 * n, "shuffle": False, "zstd": False, "xxh64": "0123456789abcdef"}
def piece(u, lo, hi, off):
    n = hi - lo
    return {"unit": u, "lo": lo, "hi": hi, "frames": {"master": frame(off, n), "exp_avg": frame(off + 4 * n, n), "exp_avg_sq": frame(off + 8 * n, n)}}
man = {"format": "shardlm-checkpoint", "version": 1, "step": 3, "next_sample": 12, "rng_seed": "00000000000004d2",
       "world_size": 2, "zero": 3, "shard_group": 2, "replica_size": 1, "align": 4, "dtype": "F32",
       "compression": "none", "checksum": "xxh64", "config": "lr=0.001\n",
       "units": [{"kind": "embedding", "numel": 10, "padded": 16, "shard": 8, "group_size": 2,
                  "tensors": [{"name": "w", "shape": [2, 5], "dtype": "F32", "offset": 0}]}],
       "files": [{"name": "rank-00000.bin", "rank": 0, "bytes": 96, "xxh64": "fedcba9876543210", "pieces": [piece(0, 0, 8, 0)]},
                 {"name": "rank-00001.bin", "rank": 1, "bytes": 24, "xxh64": "fedcba9876543210", "pieces": [piece(0, 8, 10, 0)]}]}
put("manifest", "good", json.dumps(man, indent=1))
bad = json.loads(json.dumps(man)); bad["files"][1]["pieces"][0]["lo"] = 9; put("manifest", "gap", json.dumps(bad))
bad = json.loads(json.dumps(man)); bad["files"][0]["name"] = "../etc/passwd"; put("manifest", "traversal", json.dumps(bad))
bad = json.loads(json.dumps(man)); bad["files"][0]["bytes"] = 10; put("manifest", "frame_past_end", json.dumps(bad))
bad = json.loads(json.dumps(man)); bad["rng_seed"] = None; put("manifest", "no_seed", json.dumps(bad))
put("manifest", "truncated", json.dumps(man)[:200])
if len(sys.argv) > 2:
    put("manifest", "real", open(sys.argv[2], "rb").read())
