import { NonRetryableError, SandboxCrashedError, ShutdownAbortError } from '../errors';
import type { ValidSandbox } from '../sandbox.options';
import type { Task, TaskContextBase } from '../types';
import { startSandbox, type RemoteError, type SandboxChannel, type SandboxMessage } from './sandbox.channel';

/** What of the attempt's ctx a sandboxed task uses: its abort, and where its progress and log lines go. */
export type SandboxRunContext = Pick<TaskContextBase, 'signal' | 'progress' | 'log'>;

/**
 * The sandboxes of one queue (`@TaskHandler`'s `sandbox`): each runs one task at a time, and is
 * kept for the next task when the task ended normally (returned or threw). Started lazily, one per
 * task running at once: the lease runner runs at most `concurrency` tasks, so the pool never holds
 * more than that (plus ones still being terminated).
 *
 * A sandbox whose task is aborted (timeout, lost lease, cancel, shutdown) is terminated, not
 * signalled: CPU-bound code never yields to look at a signal. A sandbox that ends by itself mid-task
 * (uncaught exception, process.exit) fails that task's attempt with SandboxCrashedError. Either way
 * the next task gets a new one. The main thread only waits for messages, so its event loop (and
 * the lease's heartbeat on it) stays free while the sandbox computes.
 */
export class SandboxPool {
  private readonly idle: SandboxChannel[] = [];
  /** Sandboxes running a task, and idle ones: what close() ends. */
  private readonly live = new Set<SandboxChannel>();
  /** Terminations under way, which close() waits for. */
  private readonly ending = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly sandbox: ValidSandbox,
    private readonly queue: string,
    private readonly size: number,
  ) {}

  /** Runs one task in an idle sandbox or a new one; resolves with what it returned, rejects with what it threw. */
  run(task: Task, ctx: SandboxRunContext): Promise<unknown> {
    if (this.closed) return Promise.reject(new ShutdownAbortError());
    const signal = ctx.signal;
    if (signal.aborted) return Promise.reject(signal.reason);
    const channel = this.idle.pop() ?? this.start();
    return new Promise<unknown>((resolve, reject) => {
      let settled = false;
      const end = (keep: boolean, settle: () => void) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        channel.onMessage = ignore;
        if (keep && !this.closed && this.idle.length < this.size) this.park(channel);
        else this.retire(channel);
        settle();
      };
      const onAbort = () => end(false, () => reject(signal.reason));
      signal.addEventListener('abort', onAbort, { once: true });
      channel.onExit = (why) => {
        this.live.delete(channel);
        end(false, () => reject(new SandboxCrashedError(task.id, this.queue, why)));
      };
      channel.onMessage = (m: SandboxMessage) => {
        try {
          if (m.type === 'progress') ctx.progress(m.value);
          else if (m.type === 'log') ctx.log(m.line as string);
          else if (m.type === 'done') end(true, () => resolve(m.value));
          else if (m.type === 'error') end(true, () => reject(remoteError(m.error)));
        } catch (error) {
          // ctx.progress or ctx.log refused the value (as they would throw in process): the task
          // fails with that error, and its sandbox, still running it, is ended.
          end(false, () => reject(error));
        }
      };
      channel.run(task);
    });
  }

  /** Ends every sandbox (shutdown: the queue's running work has settled or been aborted). */
  async close(): Promise<void> {
    this.closed = true;
    for (const channel of [...this.live]) this.retire(channel);
    this.idle.length = 0;
    await Promise.all([...this.ending]);
  }

  private start(): SandboxChannel {
    const channel = startSandbox(this.sandbox);
    this.live.add(channel);
    return channel;
  }

  /** Idle until the next task; one that ends meanwhile (a timer of its own that threw) is dropped. */
  private park(channel: SandboxChannel): void {
    channel.idle();
    channel.onExit = () => {
      this.live.delete(channel);
      const i = this.idle.indexOf(channel);
      if (i >= 0) this.idle.splice(i, 1);
    };
    this.idle.push(channel);
  }

  private retire(channel: SandboxChannel): void {
    this.live.delete(channel);
    channel.onMessage = ignore;
    channel.onExit = ignore;
    const ending = channel.terminate().finally(() => this.ending.delete(ending));
    this.ending.add(ending);
  }
}

/**
 * An error thrown in a sandbox, rebuilt here: its name, message and stack (the sandbox's frames)
 * survive, its class does not, except NonRetryableError by name, so a sandbox can end its task
 * dead without importing the library.
 */
function remoteError(e: RemoteError): Error {
  const error = e.name === 'NonRetryableError' ? new NonRetryableError(e.message) : new Error(e.message);
  error.name = e.name;
  if (e.stack) error.stack = e.stack;
  return error;
}

function ignore(): void {}
