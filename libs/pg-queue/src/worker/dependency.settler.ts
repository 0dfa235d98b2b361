import type { Logger } from '@nestjs/common';
import { SETTLE_DEBTS, type DependencyRepository, type SettleScope } from '../sql/dependencies.repository';
import type { SqlExecutor } from '../types';

/**
 * Tells dependants that their parents ended (dependencies.sql.ts): on each `!settle` notification,
 * which the statement that ended a parent sends at its commit, and on every rescuer round (debts a
 * crash or a missed notification left). Requests that arrive while a round runs fold into one more.
 */
export class DependencySettler {
  private running: Promise<void> | null = null;
  private again = false;
  /** What the next round does: the scopes of the requests it answers, together. */
  private scope: SettleScope = { fanIn: false, children: false, sweep: false };
  private closed = false;

  constructor(
    private readonly db: SqlExecutor,
    private readonly repo: DependencyRepository,
    private readonly logger: Logger,
  ) {}

  /**
   * Settles what `scope` names now (or once more after the round under way) and resolves when
   * done; never rejects. A rescuer round names what its probe found (see rescueExpired), with the
   * sweep for children's ends that no debt recorded when workflows wait for children.
   */
  request(scope: SettleScope = SETTLE_DEBTS): Promise<void> {
    if (this.closed) return Promise.resolve(); // shut down: the Prisma client is no longer ours
    this.scope = { fanIn: this.scope.fanIn || scope.fanIn, children: this.scope.children || scope.children, sweep: this.scope.sweep || scope.sweep };
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.loop().finally(() => (this.running = null));
    return this.running;
  }

  /** Resolves once no round runs (shutdown waits for it: a round uses the Prisma client). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  /** Starts no round after this (shutdown); resolves once the round under way ended. */
  async close(): Promise<void> {
    this.closed = true;
    await this.idle();
  }

  private async loop(): Promise<void> {
    do {
      if (this.closed) return;
      this.again = false;
      const scope = this.scope;
      this.scope = { fanIn: false, children: false, sweep: false };
      try {
        await this.repo.settle(this.db, scope);
      } catch (err) {
        this.logger.error(`settling task dependencies failed: ${(err as Error).message}`);
        return; // the rescuer's next round tries again
      }
    } while (this.again);
  }
}
