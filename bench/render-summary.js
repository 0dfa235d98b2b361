// `npm run bench:render`: rebuilds the summary table, bench/results/summary.svg and the results in
// BENCHMARKS.md and the README from the saved bench/results/*.json, without running anything
// (BENCH_OUT_DIR=/tmp/x: from and into a scratch copy, as with `npm run bench`).
'use strict';

const { publish } = require('./publish');

try {
  const done = publish();
  process.stderr.write(`${done.records} saved scenario(s) from ${done.runs} run(s) → ${done.files.join(', ')}\n`);
} catch (err) {
  process.stderr.write(`bench:render: ${err.message}\n`);
  process.exit(1);
}
