// Builds pool_suffix_js.wasm with the componentize() API of the pinned
// @bytecodealliance/componentize-js (package.json). The jco CLI's
// `componentize` is not used: it failed on this machine ("failed to get path
// metadata"), the API works. componentize-js 0.23.0 imports
// @bytecodealliance/preview2-shim at run time but lists it only as a
// devDependency, so package.json pins it too.
import { componentize } from '@bytecodealliance/componentize-js';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '../../target/javascript/pool_suffix_js.wasm');
const { component } = await componentize({
  sourcePath: join(here, 'pool-suffix.js'),
  witPath: join(here, '../../../wit'),
  worldName: 'driver-name-policy',
  disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
});
await mkdir(dirname(out), { recursive: true });
await writeFile(out, component);
console.log(`${out}: ${component.length} bytes`);
