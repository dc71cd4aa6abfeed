#!/usr/bin/env bash
# TensorBoard scalars (formats/tbevents.c, docs/cli.md "TensorBoard"): a run
# writes OUT_DIR/events.out.tfevents.<time>.<host>, decoded here by a reader
# written from the record format alone (TFRecord: uint64 length, masked CRC32C
# of the length, data, masked CRC32C of the data; Event / Summary protobufs):
# every CRC valid, the first event file_version "brain.Event:2", one
# train/loss per step equal (as float32) to metrics.jsonl's loss, lr and
# grad_norm likewise, eval/loss at the evaluated steps, memory/* >= 0. A
# flipped byte is reported as a CRC error (the check can fail). Rank 0 alone
# writes (2 ranks: one file); --tensorboard false writes none; a resumed run
# writes a new file whose first step is the resumed one, after a SessionLog
# START; a full disk under the events file warns once and training completes.
source "${SL_SRC:?}/tests/lib/run.sh" tensorboard
tiny_model "$W/model" llama '"num_hidden_layers": 1'
tiny_data "$W/data"
A="--model $W/model --init random --data $W/data --steps 5 --micro-batch 2 --seq-len 16 --threads 1 --summary false \
  --plot false --split 90,10,0 --eval-every 2 --eval-samples 2"

cat > "$W/tb.py" <<'P'
import json, struct, sys

def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82f63b78 if c & 1 else c >> 1
    return c ^ 0xffffffff

def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff

def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7f) << s; s += 7
        if x < 0x80: return v, i

def fields(b):  # (field, wire, value) of one message
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i + 8]; i += 8
        elif w == 5: v = b[i:i + 4]; i += 4
        elif w == 2: n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise SystemExit("bad wire type %d" % w)
        out.append((f, w, v))
    return out

def events(path):
    b, i, out = open(path, "rb").read(), 0, []
    while i < len(b):
        if len(b) - i < 12: raise SystemExit("truncated record header at %d" % i)
        n, = struct.unpack("<Q", b[i:i + 8])
        if struct.unpack("<I", b[i + 8:i + 12])[0] != masked(b[i:i + 8]): raise SystemExit("CRC error (length) at %d" % i)
        d = b[i + 12:i + 12 + n]
        if len(d) < n or len(b) < i + 16 + n: raise SystemExit("truncated record at %d" % i)
        if struct.unpack("<I", b[i + 12 + n:i + 16 + n])[0] != masked(d): raise SystemExit("CRC error (data) at %d" % i)
        i += 16 + n
        ev = {"values": {}}
        for f, w, v in fields(d):
            if f == 1 and w == 1: ev["wall_time"] = struct.unpack("<d", v)[0]
            elif f == 2 and w == 0: ev["step"] = v
            elif f == 3 and w == 2: ev["file_version"] = v.decode()
            elif f == 7 and w == 2: ev["session_log"] = dict((g, x) for g, _, x in fields(v))
            elif f == 5 and w == 2:
                for g, _, val in fields(v):
                    assert g == 1
                    tag = val_ = None
                    for h, hw, x in fields(val):
                        if h == 1 and hw == 2: tag = x.decode()
                        if h == 2 and hw == 5: val_ = struct.unpack("<f", x)[0]
                    ev["values"][tag] = val_
            else: raise SystemExit("unexpected field %d" % f)
        out.append(ev)
    return out

f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
mode, path = sys.argv[1], sys.argv[2]
evs = events(path)
if mode == "decode": print("%d events" % len(evs)); sys.exit(0)
assert evs[0].get("file_version") == "brain.Event:2", evs[0]
first = int(sys.argv[4])
rest = evs[1:]
if first > 1:  # a resumed run: SessionLog START at the first step it trains
    assert rest[0].get("session_log") == {1: 1} and rest[0]["step"] == first, rest[0]
    rest = rest[1:]
lines = [json.loads(l) for l in open(sys.argv[3])]
lines = [l for l in lines if l["step"] >= first]
assert [e["step"] for e in rest] == [l["step"] for l in lines], ([e["step"] for e in rest], [l["step"] for l in lines])
nev = 0
for e, l in zip(rest, lines):
    v = e["values"]
    for tag, key in (("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm")):
        assert v[tag] == f32(l[key]), (e["step"], tag, v[tag], l[key])
    assert abs(v["train/tokens_per_s"] - l["tokens_per_s"]) <= 0.01 + 1e-6 * l["tokens_per_s"], e["step"]
    for a, x in l["arena_peak"].items():
        assert v["memory/" + a] == f32(x) and x >= 0, (a, v.get("memory/" + a), x)
    assert v["memory/peak_bytes"] == f32(l["peak_bytes"])
    assert ("eval/loss" in v) == ("eval_loss" in l), e["step"]
    if "eval_loss" in l: assert v["eval/loss"] == f32(l["eval_loss"]); nev += 1
print("%d steps from %d, %d evaluations, every value equal to the metrics" % (len(lines), first, nev))
P
tb() { ls "$1"/events.out.tfevents.* 2> /dev/null; }

"$B" train $A --out-dir "$W/r" > "$W/r.log" 2>&1 || { bad "the run failed"; tail -5 "$W/r.log"; }
n=$(tb "$W/r" | wc -l)
[ "$n" = 1 ] && ok "one events file: $(basename "$(tb "$W/r")")" || bad "$n events files in OUT_DIR"
f=$(tb "$W/r" | head -1)
if out=$("$PY" "$W/tb.py" check "$f" "$W/r/metrics.jsonl" 1 2>&1) && [ -n "$f" ]; then ok "decoded, CRCs valid: $out"
else bad "decoding against the metrics: $out"; fi
case "$(basename "$f")" in events.out.tfevents.[0-9]*."$(hostname)"*) ok "named events.out.tfevents.<time>.<host>" ;;
  *) bad "name $(basename "$f")" ;; esac

# negative control: a flipped byte in the data of a record is a CRC error
cp "$f" "$W/flip"
"$PY" -c "import sys; b = bytearray(open(sys.argv[1],'rb').read()); b[len(b)//2] ^= 0x10; open(sys.argv[1],'wb').write(b)" "$W/flip"
out=$("$PY" "$W/tb.py" decode "$W/flip" 2>&1) && bad "a flipped byte decoded: $out" ||
  { case "$out" in *"CRC error"*) ok "a flipped byte: $out" ;; *) bad "a flipped byte: $out" ;; esac; }

"$B" train $A --out-dir "$W/off" --tensorboard false > "$W/off.log" 2>&1 || bad "--tensorboard false run failed"
[ -z "$(tb "$W/off")" ] && ok "--tensorboard false: no events file" || bad "--tensorboard false wrote $(tb "$W/off")"
echo '{"tensorboard": false}' > "$W/cfg.json"
"$B" train --config "$W/cfg.json" $A --out-dir "$W/offc" > "$W/offc.log" 2>&1 || bad "config-file run failed"
[ -z "$(tb "$W/offc")" ] && ok "config key \"tensorboard\": false: no events file" || bad "config key: $(tb "$W/offc")"

# the metrics elsewhere (--metrics): the events go to their directory
mkdir -p "$W/m"
"$B" train $A --out-dir "$W/o2" --metrics "$W/m/x.jsonl" > "$W/m.log" 2>&1 || bad "--metrics run failed"
[ "$(tb "$W/m" | wc -l)" = 1 ] && [ -z "$(tb "$W/o2")" ] && ok "--metrics DIR/x.jsonl: the events in DIR" ||
  bad "--metrics: events in $(tb "$W/m") $(tb "$W/o2")"

if [ -n "$MPI" ] && command -v mpirun > /dev/null; then
  $MPI -np 2 "$B" train $A --out-dir "$W/r2" > "$W/r2.log" 2>&1 || { bad "2-rank run failed"; tail -5 "$W/r2.log"; }
  n=$(tb "$W/r2" | wc -l)
  out=$("$PY" "$W/tb.py" check "$(tb "$W/r2" | head -1)" "$W/r2/metrics.jsonl" 1 2>&1)
  prc=$?
  [ "$n" = 1 ] && [ $prc = 0 ] && ok "2 ranks: one file (rank 0): $out" || bad "2 ranks: $n files; $out"
fi

# resume: a new file, SessionLog START at the first resumed step
"$B" train $A --steps 3 --out-dir "$W/c" --ckpt-dir "$W/c/ck" > "$W/c1.log" 2>&1 || bad "3-step run failed"
f1=$(tb "$W/c")
sleep 1
"$B" train $A --out-dir "$W/c" --ckpt-dir "$W/c/ck" --resume true > "$W/c2.log" 2>&1 || bad "resumed run failed"
f2=$(tb "$W/c" | grep -vxF "$f1")
if [ "$(tb "$W/c" | wc -l)" = 2 ] && out=$("$PY" "$W/tb.py" check "$f2" "$W/c/metrics.jsonl" 4 2>&1); then
  ok "resumed: a second file: $out"
else bad "resumed: files $(tb "$W/c" | xargs -n1 basename | tr '\n' ' '): $out"; fi

# a full disk under the events file (metrics through a link to a disk with room): warn once, train on
if mkdir -p "$W/fs" && mount -t tmpfs -o size=8k tmpfs "$W/fs" 2> /dev/null; then
  on_exit "umount '$W/fs'"
  ln -s "$W/full.jsonl" "$W/fs/metrics.jsonl"
  "$B" train $A --steps 60 --eval-every 0 --out-dir "$W/o3" --metrics "$W/fs/metrics.jsonl" > "$W/full.log" 2>&1
  rc_is "events on a full disk: the run completes" $? 0 "$W/full.log" "writing the TensorBoard events failed"
  w=$(grep -c "TensorBoard events failed" "$W/full.log")
  [ "$w" = 1 ] && [ "$(grep -c . "$W/full.jsonl")" = 60 ] && ok "warned once, 60 metrics lines" ||
    bad "$w warnings, $(grep -c . "$W/full.jsonl") metrics lines"
else echo "(not root: the full-disk case is skipped)"; fi
finish
