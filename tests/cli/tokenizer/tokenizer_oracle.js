// tests/cli/tokenizer/tokenizer_oracle.js — the Hugging Face tokenizers oracle (the Rust
// library through its Node binding @anush008/tokenizers) for
// tests/cli/tokenizer/test_tokenizer_hf.sh and the tokenizer benchmark.
//   node tokenizer_oracle.js compare TOKENIZER.json CORPUS.jsonl OURS_IDS.txt OURS_DEC.jsonl
//     encode(add_special_tokens=false) and decode(skip_special_tokens=false) of every
//     corpus line, compared with shardlm's; prints mismatches and "N passed, M failed".
//   node tokenizer_oracle.js info MODEL_DIR
//     {"vocab_size", "eos_id", "bos_id"} from HF: get_vocab_size(true) and the ids of
//     tokenizer_config.json's eos_token / bos_token.
//   node tokenizer_oracle.js family MODEL_DIR CORPUS.jsonl OURS_IDS.txt OURS_DEC.jsonl [CHAT.jsonl PREFIX]
//     compare (CORPUS '-': none) and info with one load (a 262k vocabulary takes seconds); with CHAT.jsonl (rows of
//     [text, in_loss] chunks: a chat template's rendering) also `shardlm prepare`'s PREFIX.bin /
//     PREFIX.lmask: the ids must equal encode(all chunks joined) (as transformers' apply_chat_template
//     tokenizes, add_special_tokens=false), and a token is in the loss when one of its characters
//     (HF's offsets) is in a chunk that counts.
//   node tokenizer_oracle.js bench TOKENIZER.json CORPUS.jsonl REPEAT
//     one thread, one document at a time: tokens/s of encode.
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');

function lines(path) {
  return fs.readFileSync(path, 'utf8').split('\n').filter((l) => l.length > 0);
}

async function compareWith(tok, tokPath, corpus, oursIds, oursDec) {
  const docs = lines(corpus).map((l) => { const j = JSON.parse(l); return typeof j === 'string' ? j : j.text; });
  const ids = fs.readFileSync(oursIds, 'utf8').split('\n');
  const dec = lines(oursDec).map((l) => JSON.parse(l));
  let pass = 0, fail = 0;
  for (let i = 0; i < docs.length; i++) {
    const e = await tok.encode(docs[i], null, { addSpecialTokens: false });
    const want = Array.from(e.getIds());
    const got = ids[i].trim() === '' ? [] : ids[i].trim().split(/\s+/).map(Number);
    const name = `${tokPath.split('/').slice(-3).join('/')} doc ${i + 1} ${JSON.stringify(docs[i]).slice(0, 50)}`;
    if (JSON.stringify(want) === JSON.stringify(got)) pass++;
    else {
      fail++;
      console.log(`FAIL encode ${name}\n     hf:      ${JSON.stringify(want)}\n     shardlm: ${JSON.stringify(got)}`);
    }
    const wantDec = await tok.decode(want, false);
    if (dec[i] === wantDec) pass++;
    else {
      fail++;
      console.log(`FAIL decode ${name}\n     hf:      ${JSON.stringify(wantDec)}\n     shardlm: ${JSON.stringify(dec[i])}`);
    }
  }
  console.log(`oracle ${tokPath}: ${docs.length} documents, ${pass} passed, ${fail} failed`);
  return fail;
}

async function compare(tokPath, corpus, oursIds, oursDec) {
  const tok = await Tokenizer.fromFile(tokPath);
  process.exit((await compareWith(tok, tokPath, corpus, oursIds, oursDec)) ? 1 : 0);
}

// the chat rows against PREFIX.bin / .lmask (int32 ids: these vocabularies exceed 65,500)
async function chat(tok, rowsPath, prefix) {
  const rows = lines(rowsPath).map((l) => JSON.parse(l));
  const bin = fs.readFileSync(prefix + '.bin'), lm = fs.readFileSync(prefix + '.lmask');
  const got = Array.from(new Int32Array(bin.buffer, bin.byteOffset, bin.length / 4)), gmask = Array.from(lm.subarray(16));
  let ids = [], mask = [], fail = 0;
  for (let r = 0; r < rows.length; r++) {
    // a token counts when one of its characters lies in a chunk that counts (the rule of
    // transformers' return_assistant_tokens_mask); offsets are in code points
    const e = await tok.encode(rows[r].map((c) => c[0]).join(''), null, { addSpecialTokens: false });
    const inLoss = [];
    for (const [text, m] of rows[r]) for (const _ of Array.from(text)) inLoss.push(m);
    ids = ids.concat(Array.from(e.getIds()));
    mask = mask.concat(e.getOffsets().map(([a, b]) => (inLoss.slice(a, b).some((m) => m) ? 1 : 0)));
  }
  if (JSON.stringify(ids) !== JSON.stringify(got)) {
    fail++;
    console.log(`FAIL chat ids\n     hf:      ${JSON.stringify(ids)}\n     shardlm: ${JSON.stringify(got)}`);
  }
  if (JSON.stringify(mask) !== JSON.stringify(gmask)) {
    fail++;
    console.log(`FAIL chat mask\n     want:    ${mask.join('')}\n     shardlm: ${gmask.join('')}`);
  }
  console.log(`chat ${rows.length} rows, ${ids.length} tokens, ${mask.filter((m) => m).length} in the loss: ${fail ? 'FAIL' : 'equal'}`);
  return fail;
}

async function family(dir, corpus, oursIds, oursDec, chatRows, prefix) {
  const tok = await Tokenizer.fromFile(dir + '/tokenizer.json');
  let fail = corpus === '-' ? 0 : await compareWith(tok, dir + '/tokenizer.json', corpus, oursIds, oursDec);
  console.log(`info ${infoOf(tok, dir)}`);
  if (chatRows) fail += await chat(tok, chatRows, prefix);
  process.exit(fail ? 1 : 0);
}

async function bench(tokPath, corpus, repeat) {
  const tok = await Tokenizer.fromFile(tokPath);
  const docs = lines(corpus).map((l) => { const j = JSON.parse(l); return typeof j === 'string' ? j : j.text; });
  let tokens = 0, bytes = 0;
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < repeat; r++)
    for (const d of docs) {
      const e = await tok.encode(d, null, { addSpecialTokens: false });
      tokens += e.getIds().length;
      bytes += Buffer.byteLength(d);
    }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ bench: 'tokenizer-hf-node', threads: 1, docs: docs.length * repeat, bytes, tokens,
    seconds: +s.toFixed(3), tokens_per_s: Math.round(tokens / s), mb_per_s: +(bytes / s / 1e6).toFixed(2) }));
}

function infoOf(tok, dir) {
  const cfg = JSON.parse(fs.readFileSync(dir + '/tokenizer_config.json', 'utf8'));
  const id = (t) => { if (t && typeof t === 'object') t = t.content; const v = t ? tok.tokenToId(t) : null; return v == null ? -1 : v; };
  return JSON.stringify({ vocab_size: tok.getVocabSize(true), eos_id: id(cfg.eos_token), bos_id: id(cfg.bos_token) })
    .replace(/,/g, ', ').replace(/:/g, ': ');
}

async function info(dir) {
  console.log(infoOf(await Tokenizer.fromFile(dir + '/tokenizer.json'), dir));
}

const [mode, ...args] = process.argv.slice(2);
const modes = { compare, info, family, bench: (t, c, r) => bench(t, c, +(r || 1)) };
(modes[mode] || modes.bench)(...args).catch((e) => {
  console.error(`tokenizer_oracle: ${e}`);
  process.exit(3);
});
