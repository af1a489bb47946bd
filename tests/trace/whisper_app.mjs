// whisper_app.mjs: whisper.cpp in a Node addon (@fugood/whisper.node, the speech sibling of the
// llama.rn family, from scripts/peer-whisper.sh) loaded and released CYCLES times, as a user of
// it would (initWhisper, release); and the model it loads, written by this script itself:
//
//     node tests/trace/whisper_app.mjs write MODEL     a tiny whisper.cpp ggml model (3.8 MB)
//     node tests/trace/whisper_app.mjs MODEL [CYCLES] [signal]
//
// With "signal", each release is also said with the release signal of `weightmap trace` (the
// docs/TRACE.md recipe for Node: its number is in $WMTRACE_SIGNAL; Node owns SIGUSR1).
//
// The model: whisper.cpp's own file format (magic "ggml", the hyper-parameters, the mel filters,
// no vocabulary words, then every tensor whisper_model_load asks for: one encoder and one
// decoder layer of width 64, f16 weights, zeros). Not GGUF: `weightmap trace` follows it when
// it is named with --file. The package is found in bench/peers/node_modules (links into the npm
// cache outside the clone), or in $WHISPER_NODE_MODULES.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { writeFileSync } from 'node:fs';

const [first, second] = process.argv.slice(2);
if (first === 'write') {
  writeModel(second);
  process.exit(0);
}
if (!first) {
  console.error('usage: node whisper_app.mjs MODEL [CYCLES] | write MODEL');
  process.exit(2);
}
const modules = process.env.WHISPER_NODE_MODULES ||
  fileURLToPath(new URL('../../bench/peers/node_modules/', import.meta.url));
const require = createRequire(modules.endsWith('/') ? modules : modules + '/');
const { initWhisper } = require('@fugood/whisper.node');
const signal = process.argv[4] === 'signal' && Number(process.env.WMTRACE_SIGNAL);
for (let c = 0; c < Number(second || '3'); c++) {
  const ctx = await initWhisper({ filePath: first, useGpu: false });
  await ctx.release();
  if (signal) process.kill(process.pid, signal);
  console.log(`whisper_app: cycle ${c + 1} loaded and released`);
}

function writeModel(path) {
  const h = { vocab: 51864, actx: 1500, state: 64, ahead: 2, alayer: 1, tctx: 448, thead: 2,
    tlayer: 1, mels: 80, ftype: 1 };
  const parts = [];
  const i32 = (...v) => { const b = Buffer.alloc(4 * v.length); v.forEach((x, k) => b.writeInt32LE(x, 4 * k)); parts.push(b); };
  i32(0x67676d6c, h.vocab, h.actx, h.state, h.ahead, h.alayer, h.tctx, h.state, h.thead, h.tlayer,
    h.mels, h.ftype);
  i32(h.mels, 201);
  parts.push(Buffer.alloc(h.mels * 201 * 4));
  i32(0); // no words: whisper.cpp names the tokens itself
  const F32 = 0, F16 = 1;
  const tensor = (name, type, ...ne) => {
    const n = ne.reduce((a, b) => a * b, 1);
    i32(ne.length, Buffer.byteLength(name), type, ...ne);
    parts.push(Buffer.from(name));
    parts.push(Buffer.alloc(n * (type === F16 ? 2 : 4)));
  };
  const s = h.state;
  tensor('encoder.positional_embedding', F32, s, h.actx);
  tensor('encoder.conv1.weight', F16, 3, h.mels, s);
  tensor('encoder.conv1.bias', F32, 1, s);
  tensor('encoder.conv2.weight', F16, 3, s, s);
  tensor('encoder.conv2.bias', F32, 1, s);
  tensor('encoder.ln_post.weight', F32, s);
  tensor('encoder.ln_post.bias', F32, s);
  const block = (pre, cross) => {
    tensor(`${pre}.mlp_ln.weight`, F32, s);
    tensor(`${pre}.mlp_ln.bias`, F32, s);
    tensor(`${pre}.mlp.0.weight`, F16, s, 4 * s);
    tensor(`${pre}.mlp.0.bias`, F32, 4 * s);
    tensor(`${pre}.mlp.2.weight`, F16, 4 * s, s);
    tensor(`${pre}.mlp.2.bias`, F32, s);
    for (const a of cross ? ['attn', 'cross_attn'] : ['attn']) {
      tensor(`${pre}.${a}_ln.weight`, F32, s);
      tensor(`${pre}.${a}_ln.bias`, F32, s);
      tensor(`${pre}.${a}.query.weight`, F16, s, s);
      tensor(`${pre}.${a}.query.bias`, F32, s);
      tensor(`${pre}.${a}.key.weight`, F16, s, s);
      tensor(`${pre}.${a}.value.weight`, F16, s, s);
      tensor(`${pre}.${a}.value.bias`, F32, s);
      tensor(`${pre}.${a}.out.weight`, F16, s, s);
      tensor(`${pre}.${a}.out.bias`, F32, s);
    }
  };
  block('encoder.blocks.0', false);
  tensor('decoder.positional_embedding', F32, s, h.tctx);
  tensor('decoder.token_embedding.weight', F16, s, h.vocab);
  tensor('decoder.ln.weight', F32, s);
  tensor('decoder.ln.bias', F32, s);
  block('decoder.blocks.0', true);
  writeFileSync(path, Buffer.concat(parts));
}
