// app.mjs: a runtime author's smallest app on llama.rn's Node twin (@fugood/llama.node, from
// scripts/peer-node.sh): CYCLES loads and releases of a GGUF model, use_mmap on or off.
//
//     node tests/trace/app.mjs MODEL [on|off] [CYCLES]
//
// The package is found in bench/peers/node_modules (links into the npm cache that
// scripts/npm-cache.sh keeps outside the clone), or in $LLAMA_NODE_MODULES.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const modules = process.env.LLAMA_NODE_MODULES ||
  fileURLToPath(new URL('../../bench/peers/node_modules/', import.meta.url));
const require = createRequire(modules.endsWith('/') ? modules : modules + '/');
const { loadModel } = require('@fugood/llama.node');
const [model, mmapArg = 'on', cyclesArg = '3'] = process.argv.slice(2);
if (!model) {
  console.error('usage: node app.mjs MODEL [on|off] [CYCLES]');
  process.exit(2);
}
const use_mmap = mmapArg !== 'off';
for (let c = 0; c < Number(cyclesArg); c++) {
  const ctx = await loadModel({ model, use_mmap, n_ctx: 128, n_gpu_layers: 0 });
  await ctx.release();
  console.log(`app: cycle ${c + 1} loaded and released (use_mmap ${use_mmap})`);
}
