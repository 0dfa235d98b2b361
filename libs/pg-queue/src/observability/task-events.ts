import { Injectable } from '@nestjs/common';
import { Subject, type Observable } from 'rxjs';
import type { TaskEvent } from '../types';

/** The stream of task events of this process; workers publish, anyone may subscribe. */
@Injectable()
export class TaskEvents {
  private readonly subject = new Subject<TaskEvent>();
  readonly events$: Observable<TaskEvent> = this.subject.asObservable();

  publish(event: TaskEvent): void {
    if (this.subject.observed) this.subject.next(event);
  }
}
