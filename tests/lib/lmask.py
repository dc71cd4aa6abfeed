"""Writer of the loss-mask file PREFIX.lmask (docs/formats.md), written from
the specification, independent of the engine:
  8 bytes b"SLLMASK1", uint64 little-endian N (tokens in PREFIX.bin),
  then N bytes, each 0 or 1 (1: predicting that token counts in the loss).

usage as a tool: lmask.py PREFIX PATTERN
  PATTERN "ones" | "zeros" | "alt" (1, 0, 1, ...) for every token of PREFIX."""
import os
import struct
import sys

import numpy as np

MAGIC = b"SLLMASK1"


def write_lmask(prefix, mask, magic=MAGIC, n=None):
    """mask: 1-D array of 0/1 per token. magic / n override the header (for
    bad-file tests)."""
    mask = np.asarray(mask, dtype=np.uint8)
    n = len(mask) if n is None else n
    tmp = prefix + ".lmask.tmp"
    with open(tmp, "wb") as f:
        f.write(magic)
        f.write(struct.pack("<Q", n))
        f.write(mask.tobytes())
    os.replace(tmp, prefix + ".lmask")


def read_lmask(prefix):
    with open(prefix + ".lmask", "rb") as f:
        raw = f.read()
    assert raw[:8] == MAGIC, raw[:8]
    (n,) = struct.unpack_from("<Q", raw, 8)
    m = np.frombuffer(raw, dtype=np.uint8, offset=16)
    assert len(m) == n
    return m


def _num_tokens(prefix):
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    (nseq,) = struct.unpack_from("<Q", raw, 18)
    sizes = np.frombuffer(raw, dtype="<i4", count=nseq, offset=34)
    return int(sizes.astype(np.int64).sum())


if __name__ == "__main__":
    prefix, pattern = sys.argv[1], sys.argv[2]
    n = _num_tokens(prefix)
    m = {"ones": np.ones(n), "zeros": np.zeros(n), "alt": (np.arange(n) + 1) % 2}[pattern]
    write_lmask(prefix, m)
