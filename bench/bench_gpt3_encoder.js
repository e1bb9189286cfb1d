// Times gpt-3-encoder (GPT-2's BPE in JavaScript) encoding every line of a file, as
// bench/bench_tokenizer.sh feeds megadlm the same lines. Usage: node bench_gpt3_encoder.js FILE
// Prints: "<bytes> <seconds> <tokens>" (bytes: the UTF-8 bytes of the lines and their '\n's;
// seconds: the encode loop only, not reading the file or loading the package).
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.join(__dirname, '..', 'tests', 'node', 'node_modules', 'gpt-3-encoder'));
const buf = fs.readFileSync(process.argv[2]);
const lines = buf.toString('utf-8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
let tokens = 0;
const t0 = process.hrtime.bigint();
for (const l of lines) tokens += encode(l).length;
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`${buf.length} ${secs.toFixed(3)} ${tokens}`);
