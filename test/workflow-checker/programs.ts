/**
 * The generated-program workflow checker, part 1: the programs. A program is data (it travels in
 * the workflow's input, so one `@Workflow` method runs any of them, see interpreter.ts): blocks of
 * calls to the public WorkflowContext API, concurrent branches, and try/catch shapes. `expect()` is
 * the model: what a correct engine must end with for the program, whatever the faults. `show()`
 * prints a program as the TypeScript a user would have written, for a failure report.
 *
 * Programs are built so that their outcome is determined by their code alone (the property a user
 * relies on), never by timing: a step that fails only a few times (`transient`) appears only where
 * a failure ends the attempt (top level, a branch, a try that rethrows or wraps), so a retry makes
 * it succeed whatever the faults; a step that always fails (`permanent`) or a child that ends dead
 * appears where its failure is handled the same way on every run.
 */
import fc from 'fast-check';

export type StepMode =
  | { kind: 'ok' }
  /** Throws on its first `fails` runs for this workflow, counted across attempts (it recovers by a retry of the workflow). */
  | { kind: 'transient'; fails: number }
  /** Throws on its first `fails` runs within one call, under the step's own `maxAttempts: fails + 1`. */
  | { kind: 'retried'; fails: number }
  /** Always throws. */
  | { kind: 'permanent' };

export type Call =
  | { op: 'step'; name: string; mode: StepMode; latencyMs: number; honoursSignal: boolean }
  | { op: 'transaction'; name: string }
  | { op: 'sleep'; ms: number }
  /** Without a timeout its signal is sent (in a way the fault plan picks); with one, none is. */
  | { op: 'signal'; name: string; timeoutMs: number | null }
  | { op: 'enqueue' }
  | { op: 'child'; name: string; fails: boolean }
  /** `if (await wf.patched(id)) <call>`: true on every run of an unchanged program. */
  | { op: 'patched'; id: string; then: Call };

export type Handler = 'compensate' | 'rethrow' | 'wrap';

export type Block =
  | { op: 'call'; call: Call }
  | { op: 'parallel'; branches: Call[][] }
  | { op: 'try'; tag: string; body: Call[]; handler: Handler };

export interface Program {
  blocks: Block[];
}

/** The names of calls are given after generation, in order, so that every name is unique. */
type Unnamed<T> = T extends { name: string } ? Omit<T, 'name'> & { name?: string } : T;

const LATENCIES = fc.oneof({ weight: 3, arbitrary: fc.constantFrom(0, 2, 10, 30, 60) }, { weight: 1, arbitrary: fc.integer({ min: 100, max: 350 }) });
const SLEEPS = fc.constantFrom(20, 80, 200);

function stepArb(modes: StepMode['kind'][]): fc.Arbitrary<Call> {
  const mode: fc.Arbitrary<StepMode> = fc.constantFrom(...modes).chain((kind) =>
    kind === 'transient' || kind === 'retried' ? fc.integer({ min: 1, max: 2 }).map((fails) => ({ kind, fails }) as StepMode) : fc.constant({ kind } as StepMode),
  );
  return fc.record({ op: fc.constant('step' as const), name: fc.constant(''), mode, latencyMs: LATENCIES, honoursSignal: fc.boolean() });
}

/**
 * The calls of a place in a program: `compensated` (a try body whose catch compensates and goes
 * on: failures there must be the same on every run), `retried` (a try body whose catch rethrows or
 * wraps: a permanent failure ends the workflow dead), a concurrent `branch`, or the `top` level.
 */
function callArb(where: 'top' | 'branch' | 'compensated' | 'retried'): fc.Arbitrary<Call> {
  const steps =
    where === 'compensated'
      ? stepArb(['ok', 'ok', 'retried', 'permanent'])
      : where === 'retried'
        ? stepArb(['ok', 'ok', 'transient', 'transient', 'retried', 'permanent'])
        : stepArb(['ok', 'ok', 'ok', 'transient', 'retried']);
  const plain: fc.Arbitrary<Call> = fc.oneof(
    { weight: 6, arbitrary: steps },
    { weight: 2, arbitrary: fc.constant({ op: 'transaction', name: '' } as Call) },
    { weight: 2, arbitrary: SLEEPS.map((ms) => ({ op: 'sleep', ms }) as Call) },
    { weight: 2, arbitrary: fc.option(fc.constantFrom(50, 150), { nil: null, freq: 2 }).map((timeoutMs) => ({ op: 'signal', name: '', timeoutMs }) as Call) },
    { weight: 1, arbitrary: fc.constant({ op: 'enqueue' } as Call) },
    { weight: 1, arbitrary: fc.boolean().map((fails) => ({ op: 'child', name: '', fails: fails && where === 'compensated' }) as Call) },
  );
  // patched() in a concurrent branch is not supported (README: the other branches may still have calls to replay).
  if (where === 'branch') return plain;
  return fc.oneof({ weight: 9, arbitrary: plain }, { weight: 1, arbitrary: steps.map((then) => ({ op: 'patched', id: '', then }) as Call) });
}

/** CHECK_SHAPES (e.g. `call,try`): only these kinds of block, to look at one shape. */
const shapes = new Set((process.env.CHECK_SHAPES ?? 'call,parallel,try').split(','));
const weight = (shape: Block['op'], w: number) => (shapes.has(shape) ? w : 0);
/** CHECK_HANDLERS (e.g. `wrap`): only these kinds of catch. */
const handlers = (process.env.CHECK_HANDLERS ?? 'compensate,rethrow,wrap').split(',') as Handler[];

const blockArb: fc.Arbitrary<Block> = fc.oneof(
  { weight: weight('call', 4), arbitrary: callArb('top').map((call) => ({ op: 'call', call }) as Block) },
  { weight: weight('parallel', 3), arbitrary: fc.array(fc.array(callArb('branch'), { minLength: 1, maxLength: 3 }), { minLength: 2, maxLength: 3 }).map((branches) => ({ op: 'parallel', branches }) as Block) },
  {
    weight: weight('try', 3),
    arbitrary: fc.constantFrom(...handlers).chain((handler) =>
      fc.array(callArb(handler === 'compensate' ? 'compensated' : 'retried'), { minLength: 1, maxLength: 3 }).map((body) => ({ op: 'try', tag: '', body, handler }) as Block),
    ),
  },
);

/** Programs of 1 to 6 blocks, each name unique, with a bounded total step latency (well inside the handler's timeout). */
export const programArb: fc.Arbitrary<Program> = fc
  .array(blockArb, { minLength: 1, maxLength: 6 })
  .map((blocks) => nameCalls({ blocks }))
  .filter((p) => totalLatency(p) <= 1200);

function nameCalls(p: Program): Program {
  let n = 0;
  const name = (c: Call): Call => {
    n++;
    switch (c.op) {
      case 'step':
        return { ...c, name: `s${n}` };
      case 'transaction':
        return { ...c, name: `t${n}` };
      case 'signal':
        return { ...c, name: `g${n}` };
      case 'child':
        return { ...c, name: `c${n}` };
      case 'patched':
        return { ...c, id: `p${n}`, then: name(c.then) };
      default:
        return c;
    }
  };
  return {
    blocks: p.blocks.map((b) =>
      b.op === 'call' ? { ...b, call: name(b.call) } : b.op === 'parallel' ? { ...b, branches: b.branches.map((br) => br.map(name)) } : { ...b, tag: `k${++n}`, body: b.body.map(name) },
    ),
  };
}

/** Every call of a program, in code order (branches one after another). */
export function callsOf(p: Program): Call[] {
  const out: Call[] = [];
  const add = (c: Call) => {
    out.push(c);
    if (c.op === 'patched') add(c.then);
  };
  for (const b of p.blocks) {
    if (b.op === 'call') add(b.call);
    else if (b.op === 'parallel') b.branches.flat().forEach(add);
    else b.body.forEach(add);
  }
  return out;
}

function totalLatency(p: Program): number {
  return callsOf(p).reduce((sum, c) => sum + (c.op === 'step' ? c.latencyMs * (c.mode.kind === 'retried' ? c.mode.fails + 1 : 1) : 0), 0);
}

/** The signals the harness must send: one per wait without a timeout. */
export function signalsOf(p: Program): string[] {
  return callsOf(p).flatMap((c) => (c.op === 'signal' && c.timeoutMs === null ? [c.name] : []));
}

export const payloadOf = (signal: string) => `p-${signal}`;

/** What a correct engine ends a program's workflow with, whatever the faults. */
export interface Expected {
  state: 'done' | 'dead';
  /** The workflow's result (done), or the start of its last error's message (dead). */
  result: string[] | null;
  error: string | null;
  /** Ledger rows written by transactions, each exactly once. */
  ledger: string[];
  followUps: number;
  children: number;
  /** Signals consumed (each once). */
  consumed: string[];
  /** Attempts that fail by the program's own code on the way (transient steps), each counted. */
  failures: number;
}

class ModelFailure extends Error {}

/** The model: runs the program as its code reads, with every outside call succeeding or failing as its mode says. */
export function expect(p: Program): Expected {
  const e: Expected = { state: 'done', result: [], error: null, ledger: [], followUps: 0, children: 0, consumed: [], failures: 0 };
  const call = (c: Call): string => {
    switch (c.op) {
      case 'step':
        if (c.mode.kind === 'permanent') throw new ModelFailure(`permanent ${c.name}`);
        if (c.mode.kind === 'transient') e.failures += c.mode.fails;
        return `${c.name}:v`;
      case 'transaction':
        e.ledger.push(c.name);
        return `${c.name}:tx`;
      case 'sleep':
        return 'z';
      case 'signal':
        if (c.timeoutMs !== null) return `${c.name}:null`;
        e.consumed.push(c.name);
        return `${c.name}:${payloadOf(c.name)}`;
      case 'enqueue':
        e.followUps++;
        return 'enq';
      case 'child':
        e.children++;
        if (c.fails) throw new ModelFailure(`child ${c.name}`);
        return `${c.name}:42`;
      case 'patched':
        return call(c.then);
    }
  };
  const out = e.result!;
  try {
    for (const b of p.blocks) {
      if (b.op === 'call') out.push(call(b.call));
      else if (b.op === 'parallel') out.push(...b.branches.flatMap((br) => br.map(call)));
      else {
        try {
          for (const c of b.body) out.push(call(c));
        } catch (err) {
          if (b.handler === 'compensate') out.push(`undo-${b.tag}:v`);
          else throw new ModelFailure(b.handler === 'wrap' ? `wrapped ${b.tag}: ${(err as Error).message}` : (err as Error).message);
        }
      }
    }
  } catch (err) {
    if (!(err instanceof ModelFailure)) throw err;
    return { ...e, state: 'dead', result: null, error: err.message };
  }
  return e;
}

/** The program as the TypeScript of a `@Workflow` method. */
export function show(p: Program): string {
  const call = (c: Call): string => {
    switch (c.op) {
      case 'step': {
        const mode = c.mode.kind === 'ok' ? '' : c.mode.kind === 'permanent' ? ' /* always throws */' : c.mode.kind === 'transient' ? ` /* throws on its first ${c.mode.fails} run(s) */` : ` /* throws ${c.mode.fails}x, then returns */`;
        const opts = c.mode.kind === 'retried' ? `, { maxAttempts: ${c.mode.fails + 1}, backoff: { type: 'fixed', delayMs: 20 } }` : '';
        return `wf.step('${c.name}', () => outside(${c.latencyMs}${c.honoursSignal ? ', wf.signal' : ''})${opts})${mode}`;
      }
      case 'transaction':
        return `wf.transaction('${c.name}', (tx) => tx.ledger.create(...))`;
      case 'sleep':
        return `wf.sleep(${c.ms})`;
      case 'signal':
        return `wf.waitForSignal('${c.name}'${c.timeoutMs === null ? '' : `, { timeoutMs: ${c.timeoutMs} }`})`;
      case 'enqueue':
        return `wf.enqueue('chk.follow', {...})`;
      case 'child':
        return `wf.child('${c.name}', 'chk.child', { fails: ${c.fails} })`;
      case 'patched':
        return `(await wf.patched('${c.id}')) && await ${call(c.then)}`;
    }
  };
  const lines: string[] = [];
  for (const b of p.blocks) {
    if (b.op === 'call') lines.push(`await ${call(b.call)};`);
    else if (b.op === 'parallel') {
      lines.push('await Promise.all([');
      for (const br of b.branches) lines.push(`  (async () => { ${br.map((c) => `await ${call(c)};`).join(' ')} })(),`);
      lines.push(']);');
    } else {
      lines.push('try {');
      for (const c of b.body) lines.push(`  await ${call(c)};`);
      const handler =
        b.handler === 'compensate' ? `await wf.step('undo-${b.tag}', ...);` : b.handler === 'rethrow' ? `await wf.step('log-${b.tag}', ...); throw err;` : `throw new Error('wrapped ${b.tag}: ' + err.message);`;
      lines.push(`} catch (err) { ${handler} }`);
    }
  }
  return lines.join('\n');
}
