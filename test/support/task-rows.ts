import type { NewTaskRow } from '../../libs/pg-queue/src/sql/statement-values';

/** A row for TaskRepository.insert with the library's defaults; override what a test needs. */
export function taskRow(queue: string, over: Partial<NewTaskRow> = {}): NewTaskRow {
  return {
    queue, payloadJson: '{}', priority: 0, runAt: null, delayMs: 0, maxAttempts: 5, parentId: null,
    dedupKey: null, groupKey: null, onConflict: 'ignore', traceContext: null, partitionKey: null, tags: null, debounce: null, dependsOn: null, ...over,
  };
}
