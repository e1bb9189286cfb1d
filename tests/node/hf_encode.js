// Reference for tests/scripts/test_hf_tokenizer_dirs.sh: Hugging Face's own tokenizers library
// (Rust, through the npm package `tokenizers`) on a tokenizer.json.
//
//   node hf_encode.js encode TOKENIZER.json TEXT     ids of every line of TEXT, space-separated,
//                                                    one line per input line
//   node hf_encode.js decode TOKENIZER.json IDS [DROP]  text of every line of ids (DROP: an id
//                                                    left out first, the end of document that
//                                                    megadlm's decode drops)
//   node hf_encode.js jsonl TOKENIZER.json FILE      ids of the "text" of every JSONL record
//   node hf_encode.js info TOKENIZER.json TOKEN...   "vocab N" (getVocabSize with the added
//                                                    tokens: Megatron's len(tokenizer)), then
//                                                    "id" of each token (tokenToId)
//
// Lines are split on the byte '\n' and each is decoded from UTF-8 with TextDecoder (WHATWG:
// every maximal ill-formed subsequence becomes U+FFFD, as Rust's String::from_utf8_lossy),
// because the library takes strings. Encoding adds no special tokens (addSpecialTokens false:
// the GPT-2 and GPT-NeoX post-processors add none either).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

function lines(buf) {
  const out = [];
  let s = 0;
  for (let i = 0; i < buf.length; i++) {
    if (buf[i] === 10) {
      out.push(buf.subarray(s, i));
      s = i + 1;
    }
  }
  if (s < buf.length) out.push(buf.subarray(s));
  return out;
}

async function inBatches(items, n, f) {
  const out = [];
  for (let i = 0; i < items.length; i += n) out.push(...(await f(items.slice(i, i + n))));
  return out;
}

async function main() {
  const [cmd, file, arg, drop] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(file);
  const out = [];
  if (cmd === 'encode') {
    const dec = new TextDecoder('utf-8');
    const text = lines(fs.readFileSync(arg)).map((b) => dec.decode(b));
    const encs = await inBatches(text, 2000, (b) => tok.encodeBatch(b, { addSpecialTokens: false }));
    for (const e of encs) out.push(e.getIds().join(' '));
  } else if (cmd === 'jsonl') {
    const docs = fs.readFileSync(arg, 'utf-8').split('\n').filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l).text);
    const encs = await inBatches(docs, 500, (b) => tok.encodeBatch(b, { addSpecialTokens: false }));
    for (const e of encs) out.push(e.getIds().join(' '));
  } else if (cmd === 'decode') {
    const ids = lines(fs.readFileSync(arg)).map((b) =>
      b.toString().split(/\s+/).filter((x) => x !== '' && x !== drop).map(Number));
    out.push(...(await inBatches(ids, 2000, (b) => tok.decodeBatch(b, false))));
  } else if (cmd === 'info') {
    out.push('vocab ' + tok.getVocabSize(true));
    for (const t of process.argv.slice(4)) out.push(String(tok.tokenToId(t)));
  } else {
    throw new Error('usage: node hf_encode.js encode|decode|jsonl|info TOKENIZER.json ...');
  }
  fs.writeFileSync(1, out.length ? out.join('\n') + '\n' : '');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
