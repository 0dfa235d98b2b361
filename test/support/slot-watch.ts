import { pause } from './wait-for';

type Sql = <T = any>(text: string, values?: unknown[]) => Promise<T[]>;

export interface PhaseSlots {
  /** Slots in use (running tasks), on average over the phase. */
  running: number;
  /** Of those, held by workers that had died, on average. */
  dead: number;
  maxDead: number;
}

export interface VictimSlots {
  worker: string;
  /** Slots it held at the first sample after its death. */
  held: number;
  /** From its death to the first sample in which it held none (null: never seen free). */
  freedMs: number | null;
}

/**
 * Watches a queue's slots (its running tasks) by holder, sampled every `everyMs`, beside the time
 * each worker died (`died`): how many slots dead workers held, and how long each one's outlived it.
 */
export function watchSlots(sql: Sql, queue: string, everyMs = 250) {
  const deaths = new Map<string, number>();
  const samples: { at: number; held: Map<string, number> }[] = [];
  const deadAt = (at: number, held: Map<string, number>) => [...held].reduce((n, [w, k]) => n + ((deaths.get(w) ?? Infinity) <= at ? k : 0), 0);

  const sample = async () => {
    const rows = await sql<{ worker: string; n: number }>(
      "SELECT locked_by AS worker, count(*)::int AS n FROM pgqueue.task WHERE queue = $1 AND state = 'running' GROUP BY 1",
      [queue],
    );
    const s = { at: Date.now(), held: new Map(rows.map((r) => [r.worker, r.n])) };
    samples.push(s);
    return s;
  };

  return {
    died(worker: string) {
      deaths.set(worker, Date.now());
    },
    /** Slots held by dead workers now (a fresh sample). */
    async deadNow(): Promise<number> {
      const s = await sample();
      return deadAt(s.at, s.held);
    },
    /** Samples until `until()` holds; the phase's figures. */
    async phase(until: () => boolean): Promise<PhaseSlots> {
      const phase: { running: number; dead: number }[] = [];
      while (!until()) {
        await pause(everyMs);
        const s = await sample();
        phase.push({ running: [...s.held.values()].reduce((a, b) => a + b, 0), dead: deadAt(s.at, s.held) });
      }
      const mean = (k: 'running' | 'dead') => phase.reduce((a, x) => a + x[k], 0) / Math.max(1, phase.length);
      return { running: mean('running'), dead: mean('dead'), maxDead: Math.max(0, ...phase.map((x) => x.dead)) };
    },
    /** Each dead worker that held slots after its death, and when they were free. */
    victims(): VictimSlots[] {
      return [...deaths].flatMap(([worker, at]) => {
        const after = samples.filter((s) => s.at >= at);
        const held = after[0]?.held.get(worker) ?? 0;
        if (held === 0) return [];
        const free = after.find((s) => !s.held.has(worker));
        return [{ worker, held, freedMs: free ? free.at - at : null }];
      });
    },
  };
}
