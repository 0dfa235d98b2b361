// Lets a child process (spawned by a test) require the TypeScript sources directly: .ts files are
// compiled with SWC on load, `@app/pg-queue` resolves to libs/pg-queue/src, and the `./x.js`
// imports in Prisma's generated client resolve to their .ts files. Nest itself loads natively.
const fs = require('node:fs');
const path = require('node:path');
const Module = require('node:module');
const { transformSync } = require('@swc/core');

const root = path.resolve(__dirname, '..', '..');
const alias = path.join(root, 'libs', 'pg-queue', 'src');

const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, parent, ...rest) {
  if (request === '@app/pg-queue') request = alias;
  else if (request.startsWith('@app/pg-queue/')) request = path.join(alias, request.slice('@app/pg-queue/'.length));
  else if (request.startsWith('.') && request.endsWith('.js') && parent && parent.filename) {
    const ts = path.resolve(path.dirname(parent.filename), request.slice(0, -3) + '.ts');
    if (fs.existsSync(ts)) request = ts;
  }
  return resolve.call(this, request, parent, ...rest);
};

require.extensions['.ts'] = function (module, filename) {
  const { code } = transformSync(fs.readFileSync(filename, 'utf8'), {
    filename,
    sourceMaps: 'inline',
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      target: 'es2022',
    },
    module: { type: 'commonjs' },
  });
  module._compile(code, filename);
};
