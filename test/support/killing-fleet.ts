import type { FixtureProcess } from './fixture-process';
import { pause } from './wait-for';

export interface KillingFleet {
  /** SIGKILLs the fleet delivered so far. */
  readonly kills: number;
  /** Processes started so far (the first `size` included). */
  readonly started: number;
  /** Members that died without being killed by the fleet (crash, failed startup), with their output. */
  readonly unexpectedExits: string[];
  /** Members that died on their own in a way `expectedExit` allowed (replaced too), with their output. */
  readonly expectedExits: string[];
  /** Names of the members running now (started, not exited). */
  liveMembers(): string[];
  /** With `holdFire`: starts the killing (a no-op otherwise). */
  startKilling(): void;
  /** Stops killing (and replacing); the members keep running. */
  stopKilling(): Promise<void>;
  /** Stops killing, then kills every member and waits for them to exit. */
  stop(): Promise<void>;
}

/**
 * Keeps `size` worker processes running and, about every `everyMs` (uniformly within ±33 %), SIGKILLs
 * one of them at random and starts a replacement in its place. Only members that printed
 * `readyMarker` are killed, so every kill lands on a process that runs the library, not on one still
 * loading its modules; with `minReadyMs`, only once they printed it that long ago (seen at the
 * killing's ticks), so that work gets done between kills on a machine where start-ups are slow.
 * Members that die on their own are replaced too, and reported. With `holdFire`, the members
 * start but the first kill waits for `startKilling()` (a phase without kills before one with them,
 * on the same processes). `expectedExit(output, at)` (at: Date.now() of the exit) names the deaths a
 * spec caused itself, such as a start-up that met a database it restarts.
 */
export function startKillingFleet(opts: {
  size: number;
  everyMs: number;
  spawn: (name: string) => FixtureProcess;
  readyMarker?: string;
  minReadyMs?: number;
  holdFire?: boolean;
  expectedExit?: (output: string, at: number) => boolean;
}): KillingFleet {
  const ready = opts.readyMarker ?? 'READY';
  const members: FixtureProcess[] = [];
  const killedByUs = new Set<FixtureProcess>();
  const unexpectedExits: string[] = [];
  const expectedExits: string[] = [];
  let started = 0;
  let kills = 0;
  let stopping = false;
  let killing = true;
  let fire = () => undefined as void;
  const fired = opts.holdFire ? new Promise<void>((resolve) => (fire = resolve)) : Promise.resolve();
  const names = new Map<FixtureProcess, string>();
  const readySince = new Map<FixtureProcess, number>();

  const spawnAt = (slot: number) => {
    const name = `w${slot}-${started++}`;
    const member = opts.spawn(name);
    members[slot] = member;
    names.set(member, name);
    void member.exited.then(({ code, signal }) => {
      if (killedByUs.has(member)) return;
      const output = member.output();
      const expected = opts.expectedExit?.(output, Date.now()) ?? false;
      (expected ? expectedExits : unexpectedExits).push(`${name} exited on its own (code ${code}, signal ${signal})\n${output}`);
      if (!stopping && members[slot] === member) spawnAt(slot);
    });
  };
  for (let slot = 0; slot < opts.size; slot++) spawnAt(slot);

  const loop = (async () => {
    await fired;
    while (killing) {
      await pause(opts.everyMs * (0.67 + Math.random() * 0.66));
      if (!killing) break;
      const now = Date.now();
      for (const m of members) if (!readySince.has(m) && m.saw(ready)) readySince.set(m, now);
      const victims = members
        .map((m, slot) => ({ m, slot }))
        .filter(({ m }) => readySince.has(m) && now - readySince.get(m)! >= (opts.minReadyMs ?? 0) && !m.hasExited);
      if (victims.length === 0) continue;
      const { m, slot } = victims[Math.floor(Math.random() * victims.length)];
      killedByUs.add(m);
      await m.kill();
      kills++;
      spawnAt(slot);
    }
  })();

  return {
    get kills() {
      return kills;
    },
    get started() {
      return started;
    },
    unexpectedExits,
    expectedExits,
    liveMembers: () => members.filter((m) => !m.hasExited).map((m) => names.get(m)!),
    startKilling: () => fire(),
    async stopKilling() {
      killing = false;
      fire();
      await loop;
    },
    async stop() {
      killing = false;
      stopping = true;
      fire();
      await loop;
      for (const m of members) killedByUs.add(m);
      await Promise.all(members.map((m) => m.kill()));
    },
  };
}
