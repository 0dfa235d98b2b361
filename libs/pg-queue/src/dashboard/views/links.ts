/**
 * Every URL a page links or posts to, built from the dashboard's base path (as the browser
 * requested it, so a global prefix or a mount point is kept) and values passed through
 * encodeURIComponent. Pages never link to a URL taken from input.
 */
export class Links {
  constructor(readonly base: string) {}

  overview(): string {
    return this.base || '/';
  }

  tasks(query: Record<string, string | null | undefined> = {}): string {
    return `${this.base}/tasks${search(query)}`;
  }

  task(id: string, query: Record<string, string | null | undefined> = {}): string {
    return `${this.base}/tasks/${encodeURIComponent(id)}${search(query)}`;
  }

  schedules(query: Record<string, string | null | undefined> = {}): string {
    return `${this.base}/schedules${search(query)}`;
  }

  /** Where a runtime schedule's form posts (create or change), and its remove button. */
  scheduleAction(action: 'upsert' | 'remove'): string {
    return `${this.base}/schedules/${action}`;
  }

  stylesheet(): string {
    return `${this.base}/assets/dashboard.css`;
  }

  /** Where an action on a task posts. */
  action(id: string, action: 'retry' | 'cancel' | 'priority' | 'promote' | 'reschedule' | 'payload'): string {
    return `${this.base}/tasks/${encodeURIComponent(id)}/${action}`;
  }

  retryDead(): string {
    return `${this.base}/retry-dead`;
  }

  /** Where a queue's pause / resume posts (the queue in the form). */
  pause(): string {
    return `${this.base}/pause`;
  }

  resume(): string {
    return `${this.base}/resume`;
  }
}

function search(query: Record<string, string | null | undefined>): string {
  const parts = Object.entries(query)
    .filter((e): e is [string, string] => typeof e[1] === 'string' && e[1] !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  return parts.length ? `?${parts.join('&')}` : '';
}
