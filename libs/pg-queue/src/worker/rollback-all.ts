import type { Attempt } from './attempt';

/**
 * Thrown inside the transaction to roll all of it back: a handler stuck past its timeout, a
 * shutdown past its deadline, tasks cancelled while they ran, or tasks whose follow-ups could not
 * be inserted (their writes must not commit). `culprits` get a recorded outcome (`reasons`: the
 * error of each, when it is not implied by `why`); the other attempts run again.
 */
export class RollbackAll extends Error {
  constructor(
    readonly why: 'stuck-handler' | 'shutdown' | 'cancelled' | 'follow-ups',
    readonly culprits: Attempt[],
    readonly reasons = new Map<Attempt, Error>(),
  ) {
    super(why);
  }
}
