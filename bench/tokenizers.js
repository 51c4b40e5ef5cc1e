// Encode throughput of the JavaScript references on the same text as
// transformer-tokenizer-bench (bench/tokenizers.py drives both):
//   node tokenizers.js gpt-3-encoder ENCODER_JS TEXT [REPS]
//   node tokenizers.js kitoken NODE_CJS TOKENIZER_JSON|MODEL TEXT [REPS]
//       (a .model file is read as SentencePiece's)
//   node tokenizers.js llama-tokenizer-js LLAMA_TOKENIZER_JS TEXT [REPS]
//   node tokenizers.js hf-tokenizers TOKENIZERS_CJS TOKENIZER_JSON TEXT [REPS]
//       (npm @huggingface/tokenizers, Hugging Face's JavaScript port)
// One encode call per line, best of REPS passes; prints MB/s,lines,bytes,tokens,seconds.
"use strict";
const fs = require("fs");
const path = require("path");
const { pathToFileURL } = require("url");

async function main() {
  const [kind, ...args] = process.argv.slice(2);
  let encode, textPath, reps;
  if (kind === "gpt-3-encoder") {
    encode = require(args[0]).encode;
    textPath = args[1];
    reps = Number(args[2] || 5);
  } else if (kind === "llama-tokenizer-js") {
    const { LlamaTokenizer } = await import(pathToFileURL(path.resolve(args[0])).href);
    const tok = new LlamaTokenizer();
    encode = (t) => tok.encode(t, false, true);
    textPath = args[1];
    reps = Number(args[2] || 5);
  } else if (kind === "hf-tokenizers") {
    const { Tokenizer } = require(path.resolve(args[0]));
    const tok = new Tokenizer(JSON.parse(fs.readFileSync(args[1], "utf8")), {});
    encode = (t) => tok.encode(t, { add_special_tokens: false }).ids;
    textPath = args[2];
    reps = Number(args[3] || 5);
  } else {
    const { Kitoken } = require(args[0]);
    const data = fs.readFileSync(args[1]);
    const tok = args[1].endsWith(".json") ? Kitoken.from_tokenizers(data)
                                          : Kitoken.from_sentencepiece(data);
    encode = (t) => tok.encode(t, false);
    textPath = args[2];
    reps = Number(args[3] || 5);
  }
  const raw = fs.readFileSync(textPath);
  const lines = raw.toString("utf8").split("\n");
  let best = Infinity, tokens = 0;
  for (let r = 0; r < reps; r++) {
    tokens = 0;
    const t0 = process.hrtime.bigint();
    for (const line of lines) tokens += encode(line).length;
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (dt < best) best = dt;
  }
  console.log(`${(raw.length / best / 1e6).toFixed(2)},${lines.length},${raw.length},${tokens},${best.toFixed(4)}`);
}
main();
