"""File formats for the PyTorch reference, written independently of the engine.

Owns: a minimal safetensors reader/writer (F32 / BF16 / F16 / F64 / I32 / I64),
Megatron indexed-dataset (.idx/.bin) reader/writer and HF config.json helpers.
Plain Python + numpy only (no `safetensors`, no `transformers`).

safetensors layout: u64 little-endian header length N, N bytes of JSON
{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 optional "__metadata__": {str: str}}, then the data region; offsets are
relative to the start of the data region.

Megatron .idx layout: magic b"MMIDIDX\\x00\\x00", u64 version (1), u8 dtype
code, u64 sequence count S, u64 document count D (= S + 1 when every sequence
is a document), int32 sizes[S] (tokens), int64 pointers[S] (byte offsets into
.bin), int64 doc_idx[D] (0..S). PREFIX.bin holds the tokens back to back.
"""
import json
import os
import struct

import numpy as np

# ---------------------------------------------------------------- safetensors

_ST_DTYPES = {
    "F32": (np.float32, 4),
    "F64": (np.float64, 8),
    "F16": (np.float16, 2),
    "BF16": (np.uint16, 2),  # raw bits, converted explicitly
    "I32": (np.int32, 4),
    "I64": (np.int64, 8),
    "U8": (np.uint8, 1),
}


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 array (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bf16 bit patterns, round to nearest even (NaN kept)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def st_read_header(path):
    """Return (header dict without __metadata__, metadata dict, data start)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: file shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        size = os.fstat(f.fileno()).st_size
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds file size {size}")
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


def st_read(path, to_f32=True):
    """Read a safetensors file -> {name: np.ndarray}.

    With to_f32, BF16/F16 tensors are widened to float32; otherwise BF16
    comes back as raw uint16 bits and F16 as float16."""
    header, _, start = st_read_header(path)
    size = os.path.getsize(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            dt = info["dtype"]
            if dt not in _ST_DTYPES:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
            npdt, es = _ST_DTYPES[dt]
            shape = tuple(int(s) for s in info["shape"])
            b, e = info["data_offsets"]
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if e - b != count * es:
                raise ValueError(f"{path}: tensor {name}: {e - b} bytes for shape {shape} {dt}")
            if start + e > size:
                raise ValueError(f"{path}: tensor {name}: data past end of file")
            f.seek(start + b)
            arr = np.frombuffer(f.read(e - b), dtype=np.dtype(npdt).newbyteorder("<"))
            arr = arr.astype(npdt).reshape(shape)
            if to_f32 and dt == "BF16":
                arr = bf16_bits_to_f32(arr)
            elif to_f32 and dt == "F16":
                arr = arr.astype(np.float32)
            out[name] = arr
    return out


def st_write(path, tensors, dtype="F32", metadata=None):
    """Write {name: array-like} as a safetensors file.

    dtype: "F32", "BF16" or "F16" for floating tensors (integer arrays keep
    their own dtype). Tensors are laid out in sorted name order, 8-byte
    aligned header as the reference implementation does."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = tensors[name]
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        if a.dtype.kind == "f":
            if dtype == "F32":
                data, dt = a.astype("<f4"), "F32"
            elif dtype == "F16":
                data, dt = a.astype("<f2"), "F16"
            elif dtype == "BF16":
                data, dt = f32_to_bf16_bits(a.astype(np.float32)).astype("<u2"), "BF16"
            else:
                raise ValueError(f"unsupported float dtype {dtype}")
        elif a.dtype == np.int64:
            data, dt = a.astype("<i8"), "I64"
        elif a.dtype == np.int32:
            data, dt = a.astype("<i4"), "I32"
        else:
            raise ValueError(f"tensor {name}: unsupported numpy dtype {a.dtype}")
        raw = np.ascontiguousarray(data).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


# ------------------------------------------------------------ Megatron data

_IDX_MAGIC = b"MMIDIDX\x00\x00"
_IDX_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
              6: np.float64, 7: np.float32, 8: np.uint16}


def idx_write(prefix, docs, dtype=np.uint16):
    """Write documents (list of 1-D int arrays) as PREFIX.idx + PREFIX.bin."""
    dtype = np.dtype(dtype)
    code = {np.dtype(v): k for k, v in _IDX_CODES.items()}[dtype]
    sizes = np.array([len(d) for d in docs], dtype="<i4")
    pointers = np.zeros(len(docs), dtype="<i8")
    if len(docs) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * dtype.itemsize
    doc_idx = np.arange(len(docs) + 1, dtype="<i8")
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            d = np.asarray(d)
            if d.size and (d.min() < np.iinfo(dtype).min or d.max() > np.iinfo(dtype).max):
                raise ValueError("token out of range for the dataset dtype")
            f.write(d.astype(dtype.newbyteorder("<")).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(_IDX_MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(docs)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_idx.tobytes())


def idx_read(prefix):
    """Read PREFIX.idx/.bin -> list of 1-D int64 arrays (one per sequence)."""
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    if raw[:9] != _IDX_MAGIC:
        raise ValueError(f"{prefix}.idx: bad magic {raw[:9]!r}")
    (version,) = struct.unpack_from("<Q", raw, 9)
    if version != 1:
        raise ValueError(f"{prefix}.idx: version {version}, expected 1")
    (code,) = struct.unpack_from("<B", raw, 17)
    nseq, ndoc = struct.unpack_from("<QQ", raw, 18)
    o = 34
    sizes = np.frombuffer(raw, dtype="<i4", count=nseq, offset=o)
    o += 4 * nseq
    pointers = np.frombuffer(raw, dtype="<i8", count=nseq, offset=o)
    o += 8 * nseq
    _ = np.frombuffer(raw, dtype="<i8", count=ndoc, offset=o)
    dt = np.dtype(_IDX_CODES[code]).newbyteorder("<")
    binraw = np.fromfile(prefix + ".bin", dtype=np.uint8)
    docs = []
    for s, p in zip(sizes, pointers):
        docs.append(np.frombuffer(binraw[p:p + int(s) * dt.itemsize].tobytes(), dtype=dt).astype(np.int64))
    return docs


def token_stream(prefix):
    """All documents concatenated in index order (int64)."""
    docs = idx_read(prefix)
    return np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)


# ------------------------------------------------------------ HF directory

def config_write(model_dir, cfg):
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def config_read(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def model_variant(src, dst, **cfg_edits):
    """A copy of HF model dir src (config.json + model.safetensors) in dst
    with config.json fields replaced; returns dst."""
    c = config_read(src)
    c.update(cfg_edits)
    config_write(dst, c)
    st_write(os.path.join(dst, "model.safetensors"), st_read(os.path.join(src, "model.safetensors")),
             metadata={"format": "pt"})
    return dst


def read_metrics(path):
    """JSONL metrics -> list of dicts sorted by step."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def load_params(m, path, tolerated=()):
    """Copies the safetensors file's tensors into m's parameters by HF name (torch
    only here, imported lazily: common stays numpy-only for the other oracles); every
    parameter must be present with its shape, and no tensor but those in tolerated
    may remain. Returns m."""
    import torch  # noqa: PLC0415
    tensors = st_read(path)
    seen = set()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name not in tensors:
                raise KeyError(f"{path}: missing tensor {name}")
            a = tensors[name]
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"{path}: {name} shape {a.shape}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(np.array(a, dtype=np.float32)).to(p.dtype))
            seen.add(name)
    extra = set(tensors) - seen - set(tolerated)
    if extra:
        raise KeyError(f"{path}: unexpected tensors {sorted(extra)}")
    return m


def central_diff(p, k, loss, h=1e-6):
    """(loss() at p's flat element k + h minus at k - h) / 2h, p restored: a finite-difference check's
    reading (torch tensors; no gradient recorded)."""
    import torch  # noqa: PLC0415
    with torch.no_grad():
        flat = p.view(-1)
        old = float(flat[k])
        flat[k] = old + h
        lp = float(loss())
        flat[k] = old - h
        lm = float(loss())
        flat[k] = old
    return (lp - lm) / (2 * h)
