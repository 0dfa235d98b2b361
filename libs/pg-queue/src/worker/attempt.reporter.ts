import { InvalidArgumentError, LeaseLostError, PgQueueError } from '../errors';
import { serialisePayload } from '../core/task-input';
import { isLockTimeout } from '../sql/database-error';
import type { Lease } from '../sql/statement-values';
import type { StoredLogEntry } from '../sql/task-report.repository';
import { LOG_ENTRIES_KEPT } from '../sql/task-report.sql';
import type { Attempt } from './attempt';
import { truncateUtf8 } from './error-text';

/** The most bytes of a progress value's JSON: it is rewritten often and shown in lists, so small. */
export const PROGRESS_MAX_BYTES = 1024;
/** A log line longer than this (UTF-8 bytes) is cut, with a marker: a log call never fails for its length. */
export const LOG_LINE_MAX_BYTES = 2048;
/** At most one write per attempt this often, whatever the call rate (plus the last one, at its end). */
export const REPORT_INTERVAL_MS = 1000;
/** At the handler's end, how many times a write whose row a business transaction holds is tried again. */
const FINAL_WRITE_TRIES = 20;

/** Where an attempt's reports go (the worker's runner provides it). */
export interface ReportSink {
  /** Writes them, fenced by the lease; false when the lease no longer held (nothing written). */
  write(lease: Lease, progress: string | null, entries: StoredLogEntry[] | null): Promise<boolean>;
  /** A progress value was written (for the 'progress' event). */
  written(attempt: Attempt, progress: unknown): void;
  warn(message: string): void;
  /** The database's clock, as epoch ms (log entries of failures are stamped by it). */
  now(): number;
}

/**
 * `ctx.progress` and `ctx.log` of one attempt: made on first use, so an attempt that never reports
 * costs nothing. Calls only buffer; a timer writes the newest progress and the buffered lines in
 * one statement, at most once per REPORT_INTERVAL_MS, through the app's client and outside any
 * handler transaction (a rolled-back attempt's log is what one wants to read). What is left when
 * the handler ends is written before its outcome, so the log's order is the attempt's. A write
 * that meets the task's row held by a business transaction gives up within its bound
 * (rowLockBound) and keeps what it carried for the next one; a write that fails otherwise is
 * warned about and dropped: reporting never fails a task. A write the lease fence
 * refuses aborts the attempt as lost (LeaseLostError), and later calls throw it.
 */
export class AttemptReporter {
  #progress: { json: string; value: unknown } | null = null;
  /** Lines not written yet: at most as many as a log keeps (older ones would be cut anyway). */
  #entries: StoredLogEntry[] = [];
  #lastWrite = Number.NEGATIVE_INFINITY;
  #timer: NodeJS.Timeout | null = null;
  #writing: Promise<void> | null = null;
  #finishing = false;
  #lost = false;

  constructor(
    private readonly attempt: Attempt,
    private readonly sink: ReportSink,
  ) {}

  progress(value: unknown): void {
    this.check('progress');
    let json: string;
    try {
      json = serialisePayload(`progress of task ${this.attempt.task.id}`, value, PROGRESS_MAX_BYTES);
    } catch (err) {
      throw new InvalidArgumentError('progress', `${(err as Error).message.replace(/^pg-queue: /, '')} (ctx.progress takes JSON of at most ${PROGRESS_MAX_BYTES} bytes)`);
    }
    this.#progress = { json, value: JSON.parse(json) };
    this.schedule();
  }

  log(line: string): void {
    this.check('log');
    if (typeof line !== 'string') throw new InvalidArgumentError('line', `ctx.log takes a string, got ${typeof line}`);
    // Through a UTF-8 buffer: a lone surrogate becomes U+FFFD (jsonb refuses it), as U+0000 is dropped.
    const message = truncateUtf8(Buffer.from(line.replace(/\u0000/g, ''), 'utf8').toString('utf8'), LOG_LINE_MAX_BYTES);
    this.#entries.push({ at: Math.round(this.sink.now()), attempt: this.attempt.task.attempt, kind: 'log', message });
    if (this.#entries.length > LOG_ENTRIES_KEPT) this.#entries.shift();
    this.schedule();
  }

  /** The handler ended: writes what is left now, after the write in flight. */
  async finish(): Promise<void> {
    this.#finishing = true;
    try {
      if (this.#timer) clearTimeout(this.#timer);
      this.#timer = null;
      while (this.#writing) await this.#writing;
      for (let tries = 0; tries < FINAL_WRITE_TRIES && !this.#lost && this.pending; tries++) {
        if (tries > 0) await new Promise((r) => setTimeout(r, REPORT_INTERVAL_MS / 2));
        await this.write();
      }
    } finally {
      this.#finishing = false;
    }
  }

  private check(call: string): void {
    if (this.#lost) throw new LeaseLostError(this.attempt.task.id);
    if (this.attempt.finished) throw new PgQueueError(`pg-queue: ctx.${call} called after task ${this.attempt.task.id}'s handler returned`);
  }

  private get pending(): boolean {
    return this.#progress !== null || this.#entries.length > 0;
  }

  private schedule(): void {
    if (this.#timer || this.#writing || this.#finishing || this.#lost || !this.pending) return;
    const wait = Math.max(0, this.#lastWrite + REPORT_INTERVAL_MS - performance.now());
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.write();
    }, wait);
    this.#timer.unref();
  }

  /** What a write whose row was held carried goes back in front of what came since (newer progress wins). */
  private keep(progress: { json: string; value: unknown } | null, entries: StoredLogEntry[]): void {
    this.#progress ??= progress;
    this.#entries = [...entries, ...this.#entries].slice(-LOG_ENTRIES_KEPT);
  }

  private write(): Promise<void> {
    if (!this.pending) return Promise.resolve();
    const progress = this.#progress;
    const entries = this.#entries;
    this.#progress = null;
    this.#entries = [];
    this.#lastWrite = performance.now();
    const { lease, task } = this.attempt;
    this.#writing = this.sink
      .write(lease, progress?.json ?? null, entries.length > 0 ? entries : null)
      .then(
        (held) => {
          if (!held) {
            this.#lost = true;
            this.attempt.abort(new LeaseLostError(task.id));
          } else if (progress !== null) this.sink.written(this.attempt, progress.value);
        },
        (err: unknown) => {
          if (isLockTimeout(err)) return this.keep(progress, entries);
          this.sink.warn(`could not write the progress or log of task ${task.id} of "${task.queue}" (dropped): ${(err as Error)?.message ?? err}`);
        },
      )
      .finally(() => {
        this.#writing = null;
        this.schedule();
      });
    return this.#writing;
  }
}
