import { Injectable } from '@nestjs/common';
import { Subject, type Observable } from 'rxjs';
import type { TaskEvent } from '../types';
import { TaskNotices } from './task-notices';

/** What in-process counters (the metrics) need of an event. */
export type EventCounter = (type: TaskEvent['type'], queue: string, durationMs: number | undefined) => void;

/**
 * The stream of task events of this process; workers publish, anyone may subscribe. Counters
 * register separately and get the three fields they need, so a process whose events nobody
 * subscribes to builds no event object per task.
 */
@Injectable()
export class TaskEvents {
  private readonly subject = new Subject<TaskEvent>();
  readonly events$: Observable<TaskEvent> = this.subject.asObservable();
  private counters: EventCounter[] = [];
  /** Ends of tasks told across processes (see task-notices.ts). */
  readonly notices = new TaskNotices();

  /** Whether anyone subscribed to `events$` (if not, publishers need not build the event). */
  get observed(): boolean {
    return this.subject.observed;
  }

  publish(event: TaskEvent): void {
    if (this.subject.observed) this.subject.next(event);
  }

  count(type: TaskEvent['type'], queue: string, durationMs: number | undefined): void {
    for (const counter of this.counters) counter(type, queue, durationMs);
  }

  /** Registers a counter; returns its removal. */
  addCounter(counter: EventCounter): () => void {
    this.counters = [...this.counters, counter];
    return () => {
      this.counters = this.counters.filter((c) => c !== counter);
    };
  }
}
