// tests/cli/tokenizer/tokenizer_oracle.js — the Hugging Face tokenizers oracle (the Rust
// library through its Node binding @anush008/tokenizers) for
// tests/cli/tokenizer/test_tokenizer_hf.sh and the tokenizer benchmark.
//   node tokenizer_oracle.js compare TOKENIZER.json CORPUS.jsonl OURS_IDS.txt OURS_DEC.jsonl
//     encode(add_special_tokens=false) and decode(skip_special_tokens=false) of every
//     corpus line, compared with shardlm's; prints mismatches and "N passed, M failed".
//   node tokenizer_oracle.js info MODEL_DIR
//     {"vocab_size", "eos_id", "bos_id"} from HF: get_vocab_size(true) and the ids of
//     tokenizer_config.json's eos_token / bos_token.
//   node tokenizer_oracle.js bench TOKENIZER.json CORPUS.jsonl REPEAT
//     one thread, one document at a time: tokens/s of encode.
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');

function lines(path) {
  return fs.readFileSync(path, 'utf8').split('\n').filter((l) => l.length > 0);
}

async function compare(tokPath, corpus, oursIds, oursDec) {
  const tok = await Tokenizer.fromFile(tokPath);
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

async function info(dir) {
  const tok = await Tokenizer.fromFile(dir + '/tokenizer.json');
  const cfg = JSON.parse(fs.readFileSync(dir + '/tokenizer_config.json', 'utf8'));
  const id = (t) => { if (t && typeof t === 'object') t = t.content; const v = t ? tok.tokenToId(t) : null; return v == null ? -1 : v; };
  console.log(JSON.stringify({ vocab_size: tok.getVocabSize(true), eos_id: id(cfg.eos_token), bos_id: id(cfg.bos_token) })
    .replace(/,/g, ', ').replace(/:/g, ': '));
}

const [mode, ...args] = process.argv.slice(2);
(mode === 'compare' ? compare(...args) : mode === 'info' ? info(...args) : bench(args[0], args[1], +(args[2] || 1))).catch((e) => {
  console.error(`tokenizer_oracle: ${e}`);
  process.exit(3);
});
