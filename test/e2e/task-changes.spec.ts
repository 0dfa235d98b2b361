/**
 * Changing a queued task (issue 27, item 6): promote, reschedule and updatePayload from one
 * instance while another instance's workers claim; refused while the task runs, after it ended,
 * while it waits for its dependencies (promote/reschedule), and fenced against claims in flight:
 * a payload change reported `changed` is the payload the handler sees, one refused never is.
 */
import { Injectable } from '@nestjs/common';
import { InvalidArgumentError, InvalidPayloadError, TaskHandler, type Task } from '@app/pg-queue';
import { deferred } from '../support/queue-app';
import { waitFor } from '../support/wait-for';
import { workerAndApi } from '../support/worker-and-api';

const HOUR = 3_600_000;
let hold = { started: deferred(), release: deferred() };

@Injectable()
class ChangeHandlers {
  @TaskHandler('change.work', { mode: 'lease', concurrency: 4 })
  async work(task: Task<{ v: string; hold?: boolean }>) {
    if (task.payload.hold) {
      hold.started.resolve();
      await hold.release.promise;
    }
    return task.payload.v;
  }

  @TaskHandler('change.tx', { mode: 'transactional', concurrency: 4 })
  async tx(task: Task<{ v: string }>) {
    return task.payload.v;
  }
}

describe('promote, reschedule, updatePayload', () => {
  const ctx = workerAndApi([ChangeHandlers], 6, () => hold.release.resolve());
  const api = { get queue() { return ctx.api.queue; } };
  beforeEach(() => {
    hold = { started: deferred(), release: deferred() };
  });

  const runAt = async (id: string) => (await api.queue.get(id))!.runAt.getTime();

  it('promote runs a delayed task at once on another instance (its workers are woken); reschedule moves it', async () => {
    const id = await api.queue.enqueue('change.work', { v: 'promoted' }, { delayMs: HOUR });
    expect(await api.queue.promote(id)).toBe('changed');
    await expect(api.queue.waitFor(id, { timeoutMs: 60_000 })).resolves.toBe('promoted');

    const later = await api.queue.enqueue('change.work', { v: 'later' }, { delayMs: HOUR });
    const target = new Date(Date.now() + 2 * HOUR);
    expect(await api.queue.reschedule(later, { runAt: target })).toBe('changed');
    expect(await runAt(later)).toBe(target.getTime());
    expect((await api.queue.get(later))!.state).toBe('pending');
    expect(await api.queue.reschedule(later, { delayMs: 0 })).toBe('changed');
    await expect(api.queue.waitFor(later, { timeoutMs: 60_000 })).resolves.toBe('later');
  });

  it('updatePayload replaces a pending task\'s payload: the handler sees the new one', async () => {
    const id = await api.queue.enqueue('change.work', { v: 'old' }, { delayMs: HOUR });
    expect(await api.queue.updatePayload(id, { v: 'new' })).toBe('changed');
    expect((await api.queue.get(id))!.payload).toEqual({ v: 'new' });
    await api.queue.promote(id);
    await expect(api.queue.waitFor(id, { timeoutMs: 60_000 })).resolves.toBe('new');
  });

  it('refuses every change while the task runs, after it ended, and for an unknown id, with the reason', async () => {
    const id = await api.queue.enqueue('change.work', { v: 'running', hold: true });
    await hold.started.promise;
    expect(await api.queue.promote(id)).toBe('running');
    expect(await api.queue.reschedule(id, { delayMs: HOUR })).toBe('running');
    expect(await api.queue.updatePayload(id, { v: 'changed while running' })).toBe('running');
    hold.release.resolve();
    await expect(api.queue.waitFor(id, { timeoutMs: 60_000 })).resolves.toBe('running');
    expect(await api.queue.promote(id)).toBe('finished');
    expect(await api.queue.reschedule(id, { delayMs: 0 })).toBe('finished');
    expect(await api.queue.updatePayload(id, { v: 'x' })).toBe('finished');
    expect(await api.queue.promote('999999999')).toBe('not-found');
  });

  it('a task waiting for its dependencies is not promoted or rescheduled past them, but its payload may change', async () => {
    const parent = await api.queue.enqueue('change.work', { v: 'parent' }, { delayMs: HOUR });
    const child = await api.queue.enqueue('change.work', { v: 'child' }, { dependsOn: [parent] });
    expect((await api.queue.get(child))!.state).toBe('waiting');
    expect(await api.queue.promote(child)).toBe('waiting');
    expect(await api.queue.reschedule(child, { delayMs: 0 })).toBe('waiting');
    expect(await api.queue.updatePayload(child, { v: 'child, changed' })).toBe('changed');
    expect(await api.queue.promote(parent)).toBe('changed');
    await expect(api.queue.waitFor(child, { timeoutMs: 60_000 })).resolves.toBe('child, changed');
  });

  it('checks its arguments before anything reaches the database', async () => {
    const id = await api.queue.enqueue('change.work', { v: 'x' }, { delayMs: HOUR });
    await expect(api.queue.reschedule(id, {} as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(api.queue.reschedule(id, { delayMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(api.queue.reschedule(id, { runAt: new Date(NaN) })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(api.queue.updatePayload(id, { f: () => 1 })).rejects.toBeInstanceOf(InvalidPayloadError);
    await expect(api.queue.promote('nope')).rejects.toBeInstanceOf(InvalidArgumentError);
    await api.queue.cancel(id);
  });

  it.each(['change.work', 'change.tx'] as const)('races with claims (%s): a change reported made is what the handler ran with, a refused one never is', async (queue) => {
    const ids = await api.queue.enqueueMany(Array.from({ length: 60 }, (_, n) => ({ queue, payload: { v: `old ${n}` } })));
    // Claims of these due tasks run on the worker instance while the changes go in from this one.
    const changes = await Promise.all(ids.map((id, n) => api.queue.updatePayload(id, { v: `new ${n}` })));
    const results = await Promise.all(ids.map((id) => api.queue.waitFor(id, { timeoutMs: 60_000 })));
    ids.forEach((_, n) => {
      expect([n, changes[n], results[n]]).toEqual(changes[n] === 'changed' ? [n, 'changed', `new ${n}`] : [n, expect.stringMatching(/^(running|finished)$/), `old ${n}`]);
    });
    const promoted = await api.queue.enqueueMany(Array.from({ length: 30 }, (_, n) => ({ queue, payload: { v: `p ${n}` } })));
    const outcomes = await Promise.all(promoted.map((id) => api.queue.reschedule(id, { delayMs: HOUR })));
    // A task rescheduled away is pending an hour from now; one refused had been claimed and ran.
    await waitFor('the refused ones to end', async () => {
      const rows = await Promise.all(promoted.map((id) => api.queue.get(id)));
      return rows.every((t, n) => (outcomes[n] === 'changed' ? t!.state === 'pending' && t!.runAt.getTime() > Date.now() + HOUR / 2 : t!.state === 'done'));
    });
    expect(outcomes.every((o) => o === 'changed' || o === 'running' || o === 'finished')).toBe(true);
    for (const [n, id] of promoted.entries()) if (outcomes[n] === 'changed') expect(await api.queue.promote(id)).toBe('changed');
    await Promise.all(promoted.map((id) => api.queue.waitFor(id, { timeoutMs: 60_000 })));
  });
});
