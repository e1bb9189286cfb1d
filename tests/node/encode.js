// Encodes every line of a file with gpt-3-encoder (GPT-2's BPE in JavaScript) and prints the
// ids of each line, space-separated, one line per input line (the '\n's split the lines; a
// final '\n' ends the last line). Usage: node encode.js FILE > ids
'use strict';
const fs = require('fs');
const { encode } = require('gpt-3-encoder');
const text = fs.readFileSync(process.argv[2], 'utf-8');
const lines = text.split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const out = [];
for (const l of lines) out.push(encode(l).join(' '));
fs.writeFileSync(1, out.length ? out.join('\n') + '\n' : '');
