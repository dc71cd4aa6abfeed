#!/usr/bin/env bash
# `prepare --format messages`: what issue 43 found rendered other than asked.
#  - item 4: every {role} and {content} of a literal --chat-template is
#    rendered, also after {content} ('<{role}>{content}</{role}>\n' gives
#    <user>Hi</user>); a second {content} repeats the content; a role spelled
#    with "{content}" by --chat-role is not rendered again; the loss mask
#    counts an assistant's content and everything after it; the chatml preset
#    equals its literal template;
#  - item 9: content as a list of text parts (Hugging Face's chat datasets)
#    gives the bytes of the same rows with the parts joined (chatml, qwen3
#    with reasoning, a literal template); Gemma trims each part as Gemma 3's
#    template does; an image part, a part without a type, a text part without
#    text and a Gemma system message of several parts: exit 2, FILE:LINE and
#    the part named.
source "${SL_SRC:?}/tests/lib/run.sh" chat_parts numpy
"$PY" - "$W" <<'PY' || { echo "FAIL could not write the inputs"; exit 1; }
import json, sys
W = sys.argv[1]
def rows(name, rs): open(f"{W}/{name}.jsonl", "w").write("".join(json.dumps({"messages": m}) + "\n" for m in rs))
rows("hi", [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]])
parts = [[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
          {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
          {"role": "assistant", "content": [{"type": "text", "text": "<think>add</think>"}, {"type": "text", "text": "4"}]}],
         [{"role": "user", "content": []}, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]]
joined = [[dict(m, content="".join(p["text"] for p in m["content"])) for m in r] for r in parts]
rows("parts", parts)
rows("joined", joined)
rows("gparts", [[{"role": "user", "content": [{"type": "text", "text": " Hi "}, {"type": "text", "text": "there "}]},
                 {"role": "assistant", "content": "Yo"}]])
rows("gjoined", [[{"role": "user", "content": "Hithere"}, {"role": "assistant", "content": "Yo"}]])
rows("image", [[{"role": "user", "content": "ok"}, {"role": "assistant", "content": "ok"}],
               [{"role": "user", "content": [{"type": "text", "text": "See"}, {"type": "image", "url": "x.png"}]}]])
rows("notype", [[{"role": "user", "content": [{"text": "Hi"}]}]])
rows("notext", [[{"role": "user", "content": [{"type": "text", "txt": "Hi"}]}]])
rows("gsys", [[{"role": "system", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
               {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]])
# a byte-level tokenizer with Gemma's specials (a preset with BOS needs a tokenizer that has one)
import os
os.makedirs(W + "/gtok", exist_ok=True)
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
added = [{"id": 256 + k, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
          "special": True} for k, t in enumerate(["<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"])]
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
json.dump({"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": bl, "post_processor": None,
           "decoder": bl, "model": {"type": "BPE", "unk_token": None, "byte_fallback": False,
                                    "vocab": {chr(c): b for b, c in zip(bs, cs)}, "merges": []}},
          open(W + "/gtok/tokenizer.json", "w"))
json.dump({"eos_token": "<eos>", "bos_token": "<bos>"}, open(W + "/gtok/tokenizer_config.json", "w"))
PY
prep() { # name input template [flags]
  local n=$1 in=$2 t=$3; shift 3
  "$B" prepare --quiet --format messages --input "$W/$in.jsonl" --output "$W/$n" --chat-template "$t" "$@" > "$W/$n.log" 2>&1
}
# text and loss mask of a byte-level prefix: "TEXT|MASK" (EOD as <EOD>, the mask as 0/1 per token)
show() { "$PY" - "$W/$1" <<'PY'
import sys, numpy as np
p = sys.argv[1]
t = np.fromfile(p + ".bin", dtype=np.uint16)
m = open(p + ".lmask", "rb").read()[16:]
print(repr(b"".join(bytes([x]) if x < 256 else b"<EOD>" for x in t).decode()) + "|" + "".join(map(str, m)))
PY
}
same() { cmp -s "$W/$1.bin" "$W/$2.bin" && cmp -s "$W/$1.idx" "$W/$2.idx" && cmp -s "$W/$1.lmask" "$W/$2.lmask"; }

# ---- item 4: the whole template
prep lit hi '<{role}>{content}</{role}>\n' || bad "prepare lit: $(cat "$W/lit.log")"
want="'<user>Hi</user>\\n<assistant>Yo</assistant>\\n<EOD>'|$(printf '0%.0s' {1..27})$(printf '1%.0s' {1..16})"
got=$(show lit)
[ "$got" = "$want" ] && ok "{role} after {content} rendered: $got" || bad "{role} after {content}: got $got, want $want"
prep twice hi '{content}|{role}|{content}\n' || bad "prepare twice: $(cat "$W/twice.log")"
want="'Hi|user|Hi\\nYo|assistant|Yo\\n<EOD>'|$(printf '0%.0s' {1..11})$(printf '1%.0s' {1..17})"
got=$(show twice)
[ "$got" = "$want" ] && ok "a second {content} repeats the content: $got" || bad "two {content}: got $got, want $want"
prep rolemap hi '<{role}>{content}\n' --chat-role 'user=x{content}x' || bad "prepare rolemap: $(cat "$W/rolemap.log")"
got=$(show rolemap)
case "$got" in "'<x{content}x>Hi\\n<assistant>Yo\\n<EOD>'|"*) ok "a role spelled '{content}' is not rendered again: ${got%%|*}" ;;
  *) bad "role with {content}: $got" ;; esac
prep cml hi chatml && prep cmllit hi '<|im_start|>{role}\n{content}<|im_end|>\n' && same cml cmllit &&
  ok "chatml preset == its literal template (bytes, index, mask)" || bad "chatml preset differs from its template"

# ---- item 9: content as a list of text parts
for t in chatml qwen3 '[{role}] {content} [/{role}]\n'; do
  prep p_list parts "$t" && prep p_join joined "$t" && same p_list p_join &&
    ok "text parts == the joined strings under --chat-template $t ($(show p_list | cut -c1-70)...)" ||
    bad "text parts under $t: $(cat "$W/p_list.log" "$W/p_join.log")"
done
if prep g_list gparts gemma --tokenizer "$W/gtok" && prep g_join gjoined gemma --tokenizer "$W/gtok" && same g_list g_join; then
  ok "gemma: each text part trimmed (' Hi ' + 'there ' renders as 'Hithere', Gemma 3's template)"
else bad "gemma parts: $(cat "$W/g_list.log" "$W/g_join.log")"; fi
refuse() { # name input template needle [flags]
  local n=$1 in=$2 t=$3 needle=$4; shift 4
  prep "$n" "$in" "$t" "$@"
  rc_is "$n" $? 2 "$W/$n.log" "$needle"
  ls "$W/$n".{bin,idx} > /dev/null 2>&1 && bad "$n: output left behind"
}
refuse image image chatml 'image.jsonl:2: messages[0].content[1]: a part of type "image" is not supported'
refuse notype notype chatml 'notype.jsonl:1: messages[0].content[0]: a content part must be an object with a string "type"'
refuse notext notext chatml 'notext.jsonl:1: messages[0].content[0]: a "text" part needs a string "text"'
refuse gsys gsys gemma 'gsys.jsonl:1: messages[0]: --chat-template gemma: a system message given as 2 parts' --tokenizer "$W/gtok"
finish
