// Llama's real vocabulary as a SentencePiece model, and reference ids, from
// the npm package llama-tokenizer-js (fetched by tools/fetch-tokenizer-refs.sh,
// never committed), which ships Llama's 32,000 pieces and its merges with a
// JavaScript encoder:
//
//   node llama_reference.mjs DIR/llama-tokenizer.js CORPUS.json OUT_DIR
//
// writes OUT_DIR/tokenizer.model (sentencepiece's ModelProto: <unk>, <s>,
// </s>, the 256 <0xNN> byte pieces, then the pieces in id order; BPE with
// byte fallback, identity normalization, dummy prefix, extra whitespace
// kept, as Llama's) and OUT_DIR/llama-tokenizer-js.tsv (the text's bytes in
// hex, a tab, the package's ids: encode(text, add_bos_token = false)).
//
// The package has no piece scores, only the merges in priority order, so a
// piece's score is minus the priority of the first merge that makes it
// (sentencepiece merges the pair whose piece scores highest, so the order
// is the package's); pieces no merge makes (single characters) score -1e9.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [module, corpus, outDir] = process.argv.slice(2);
const { LlamaTokenizer } = await import(pathToFileURL(path.resolve(module)).href);
const tok = new LlamaTokenizer();
const vocab = tok.vocabById;
if (vocab.length !== 32000) throw new Error(`${vocab.length} pieces, not 32000`);

const rank = new Map();
for (const [key, prio] of tok.merges) {
  const i = key.indexOf(" ", 1);  // pieces hold no plain space (U+2581)
  const piece = key.slice(0, i) + key.slice(i + 1);
  if (!rank.has(piece) || prio < rank.get(piece)) rank.set(piece, prio);
}

function varint(x) {
  const out = [];
  while (x >= 0x80) { out.push((x & 0x7f) | 0x80); x = Math.floor(x / 128); }
  out.push(x);
  return Buffer.from(out);
}
function field(number, wire, payload) {
  const key = varint(number * 8 + wire);
  return wire === 2 ? Buffer.concat([key, varint(payload.length), payload])
                    : Buffer.concat([key, payload]);
}
const parts = vocab.map((piece, id) => {
  const type = id === 0 ? 2 : id < 3 ? 3 : id < 259 ? 6 : 1;
  const score = Buffer.alloc(4);
  score.writeFloatLE(id < 259 ? 0 : rank.has(piece) ? -rank.get(piece) : -1e9);
  const body = [field(1, 2, Buffer.from(piece, "utf8")), field(2, 5, score)];
  if (type !== 1) body.push(field(3, 0, varint(type)));
  return field(1, 2, Buffer.concat(body));
});
parts.push(field(2, 2, Buffer.concat([field(3, 0, varint(2)),    // BPE
                                      field(35, 0, varint(1))]))); // byte_fallback
parts.push(field(3, 2, Buffer.concat([field(1, 2, Buffer.from("identity")),
                                      field(3, 0, varint(1)),    // add_dummy_prefix
                                      field(4, 0, varint(0))]))); // keep whitespace
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "tokenizer.model"), Buffer.concat(parts));

const texts = JSON.parse(fs.readFileSync(corpus, "utf8"));
const lines = texts.map((t) => Buffer.from(t, "utf8").toString("hex") + "\t" +
                               tok.encode(t, false, true).join(" "));
fs.writeFileSync(path.join(outDir, "llama-tokenizer-js.tsv"), lines.join("\n") + "\n");
console.log(`${vocab.length} pieces, ${rank.size} made by merges, ${texts.length} texts`);
