// onnx_app.mjs: ONNX Runtime in a Node addon (onnxruntime-node, from scripts/peer-onnx.sh): a
// session created from MODEL and released, CYCLES times, as its users do (InferenceSession.create,
// session.release). The model: tests/trace/onnx_model.py.
//
//     node tests/trace/onnx_app.mjs MODEL [CYCLES]
//
// The package is found in bench/peers/node_modules (links into the npm cache outside the
// clone), or in $ONNX_NODE_MODULES.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const modules = process.env.ONNX_NODE_MODULES ||
  fileURLToPath(new URL('../../bench/peers/node_modules/', import.meta.url));
const require = createRequire(modules.endsWith('/') ? modules : modules + '/');
const ort = require('onnxruntime-node');
const [model, cycles = '3'] = process.argv.slice(2);
if (!model) {
  console.error('usage: node onnx_app.mjs MODEL [CYCLES]');
  process.exit(2);
}
for (let c = 0; c < Number(cycles); c++) {
  const session = await ort.InferenceSession.create(model, { executionProviders: ['cpu'] });
  await session.release();
  console.log(`onnx_app: cycle ${c + 1} created and released`);
}
