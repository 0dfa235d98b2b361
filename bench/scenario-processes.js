// Scenario 10 for bench/run.js: the variants (1, 2, 4 worker processes per pg-queue mode) and the
// table. The run itself is bench/src/processes.ts.
'use strict';

const report = require('./report');

const PROCESSES = [1, 2, 4];
const CONCURRENCY = 10; // per process: the drain scenario's c=10 setting
// The limited rows (issue 25): one queue under globalConcurrency LIMIT, each process able to run
// all of it (concurrency LIMIT), so that 2 and 4 processes only add claimers contending for the
// same slots; lease mode, a fifth of the backlog (a limited drain is slower).
const LIMIT = 20;

function processesScenario({ n, libs, variant, cores }) {
  const k = n.toLocaleString('en-US');
  const limitedN = Math.max(1000, Math.round(n / 5));
  const variants = () => [
    ...libs
      .filter((l) => l.startsWith('pg-queue'))
      .flatMap((libKey) => PROCESSES.map((p) => ({ ...variant(libKey, CONCURRENCY, `${p} proc`), processes: p }))),
    ...libs
      .filter((l) => l === 'pg-queue-lease')
      .flatMap((libKey) =>
        PROCESSES.map((p) => ({
          ...variant(libKey, LIMIT, `${p} proc, globalConcurrency ${LIMIT}`),
          label: `pg-queue (lease), globalConcurrency ${LIMIT}, ${limitedN.toLocaleString('en-US')} tasks`,
          processes: p,
          globalConcurrency: LIMIT,
          n: limitedN,
        })),
      ),
  ];
  return {
    num: 10,
    title: `Scaling out: ${k} pre-inserted no-op tasks drained by 1, 2 and 4 worker processes (pg-queue, concurrency ${CONCURRENCY} per process); a queue under globalConcurrency ${LIMIT} (lease, concurrency ${LIMIT} per process) likewise`,
    variants,
    n,
    timeoutMs: 300_000,
    table: (plan, results) => table(plan.find((s) => s.id === 'processes').all, results, cores),
    metrics: [
      { key: 'tasksPerSec', label: 'tasks/s', unit: 'tasks/s', better: 'higher' },
      { key: 'pgMsPerTask', label: 'Postgres CPU ms per task', better: 'lower' },
      { key: 'nodeMsPerTask', label: 'Node CPU ms per task', better: 'lower' },
    ],
  };
}

function table(all, results, cores) {
  const med = (v, key) => report.summary(results, v, key).median;
  const f = report.fmt;
  const rows = all.map((v) => {
    const s = report.summary(results, v, 'tasksPerSec');
    const one = all.find((x) => x.label === v.label && x.processes === 1);
    const base = one ? med(one, 'tasksPerSec') : null;
    return [
      v.label,
      String(v.processes),
      `${s.n}/${s.runs}`,
      `${f(s.min)} / ${f(s.median)} / ${f(s.max)}`,
      s.median !== null && base ? report.ratio(s.median / base) : 'n/a',
      `${f(med(v, 'pgMsPerTask'))} (${f(med(v, 'pgBackendMsPerTask'))})`,
      f(med(v, 'nodeMsPerTask')),
      ['pgCores', 'nodeCores', 'irqCores', 'otherCores', 'idleCores'].map((key) => f(med(v, key))).join(' / '),
      `${f(med(v, 'coordinatorCores'))} / ${f(med(v, 'stealCores'))}`,
    ];
  });
  const head = ['library', 'processes', 'runs', 'tasks/s min / median / max', '÷ 1 process', 'Postgres CPU ms/task, all (backends)', 'Node CPU ms/task (workers)', `cores: Postgres / Node / interrupts / other / idle (of ${cores})`, 'of other: coordinator / steal'];
  return [
    `Wall time from the start signal to the database showing every task finished (archived as done, none left). CPU from /proc over the same interval: Postgres = every server process (postmaster, backends, checkpointer, walwriter, autovacuum…; in parentheses the client backends of the run's database alone); Node = \`process.cpuUsage()\` of the worker processes, summed. Cores = CPU time ÷ wall time; interrupts = irq + softirq from /proc/stat (loopback TCP, charged to no process); "other" is the rest of the machine's ${cores} cores: the coordinating process, the hypervisor's steal, anything else running on the machine. Medians except tasks/s.`,
    report.compareTable(head, rows),
    ...[...new Set(all.map((v) => v.label))].map((label) => verdict(all.filter((v) => v.label === label), med, cores)),
  ].join('\n\n');
}

/** What limits one mode, from its medians: the CPU both sides need per task against the cores there are. */
function verdict(rows, med, cores) {
  const top = rows[rows.length - 1];
  const base = med(rows[0], 'tasksPerSec');
  const scaling = rows.slice(1).map((v) => `${v.processes}: ${base ? report.ratio(med(v, 'tasksPerSec') / base) : 'n/a'}`).join(', ');
  const pg = med(top, 'pgMsPerTask');
  const node = med(top, 'nodeMsPerTask');
  if (pg === null || node === null) return `${top.label}: tasks/s ÷ 1 process with ${scaling}; Postgres CPU n/a.`;
  const f = report.fmt;
  const bound = (cores * 1000) / (pg + node);
  const busy = ['pgCores', 'nodeCores', 'irqCores', 'otherCores'].map((k) => med(top, k) ?? 0).reduce((a, b) => a + b, 0);
  return (
    `${top.label}: tasks/s ÷ 1 process with ${scaling}. At ${top.processes} processes the machine was ${Math.round((busy / cores) * 100)} % busy ` +
    `(Postgres ${f(med(top, 'pgCores'))} cores, Node ${f(med(top, 'nodeCores'))}); per task Postgres spent ${f(pg)} ms and Node ${f(node)} ms ` +
    `(Postgres ${Math.round((pg / (pg + node)) * 100)} %), so ${cores} cores allow at most ${f(bound)} tasks/s ` +
    `(measured ${f(med(top, 'tasksPerSec'))}, ${report.ratio(med(top, 'tasksPerSec') / bound)} of it); the larger consumer is ${pg >= node ? 'Postgres' : 'Node'}. ` +
    `With the workers on other machines Postgres alone would allow ${f((cores * 1000) / pg)} tasks/s here, Node alone ${f((cores * 1000) / node)}.`
  );
}

module.exports = { processesScenario };
