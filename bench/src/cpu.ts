import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { cpus } from 'node:os';

/**
 * CPU time from /proc, for scenario 10 (processes.ts): the PostgreSQL server's processes and the
 * whole machine, read before and after a timed part. Linux only, and only when the server runs on
 * this machine (the bench's throwaway cluster does); otherwise `serverCpu` returns null.
 */

const TICK_MS = (() => {
  try {
    return 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  } catch {
    return 10; // USER_HZ is 100 on every Linux build we know of
  }
})();

interface ProcStat {
  ppid: number;
  /** utime + stime, ms. */
  own: number;
  /** cutime + cstime, ms: children that exited and were waited for. */
  reaped: number;
}

function procStat(pid: number): ProcStat | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name is in parentheses and may contain spaces: count fields after the last ')'.
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(f[1]), own: (Number(f[11]) + Number(f[12])) * TICK_MS, reaped: (Number(f[13]) + Number(f[14])) * TICK_MS };
  } catch {
    return null; // exited meanwhile, or no /proc
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

export interface ServerCpu {
  /** Every server process: the postmaster's own and reaped children's time plus every live child's. */
  totalMs: number;
  /** Per live child: CPU ms, and whether it is a client backend of the run's database. */
  children: Map<number, { ms: number; backend: boolean }>;
}

/**
 * The server's CPU so far. `backendPid` (pg_backend_pid() of a connection to `dbName`) leads to the
 * postmaster, its parent. A backend, autovacuum worker or parallel worker that exits during the
 * run is not lost: the postmaster waits for it, and the kernel adds its time to the postmaster's
 * cutime/cstime. So `after.totalMs - before.totalMs` covers every server process, the checkpointer,
 * walwriter and background writer included.
 */
export function serverCpu(backendPid: number, dbName: string): ServerCpu | null {
  if (!cmdline(backendPid).includes(` ${dbName} `)) return null; // the server is not on this machine
  const postmaster = procStat(backendPid)?.ppid;
  const main = postmaster ? procStat(postmaster) : null;
  if (!postmaster || !main) return null;
  const children = new Map<number, { ms: number; backend: boolean }>();
  let totalMs = main.own + main.reaped;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const st = procStat(pid);
    if (!st || st.ppid !== postmaster) continue;
    totalMs += st.own;
    // A client backend's title: "postgres: <user> <database> <host>(<port>) <state>".
    children.set(pid, { ms: st.own, backend: cmdline(pid).includes(` ${dbName} `) });
  }
  return { totalMs, children };
}

/** CPU ms spent between two readings by the run database's client backends alive at the end. */
export function backendMs(before: ServerCpu, after: ServerCpu): number {
  let ms = 0;
  for (const [pid, c] of after.children) if (c.backend) ms += c.ms - (before.children.get(pid)?.ms ?? 0);
  return ms;
}

export interface MachineCpu {
  /** Idle and iowait, ms summed over the CPUs. */
  idleMs: number;
  /** Hardware and soft interrupts (loopback TCP between Node and Postgres is mostly softirq), not charged to any process. */
  irqMs: number;
  /** Time the hypervisor gave this VM's CPUs to someone else. */
  stealMs: number;
}

/** The machine's CPU time so far, by kind (/proc/stat, all CPUs). */
export function machineCpu(): MachineCpu {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { idleMs: (f[3] + f[4]) * TICK_MS, irqMs: (f[5] + f[6]) * TICK_MS, stealMs: f[7] * TICK_MS };
}

export const CORES = cpus().length;
