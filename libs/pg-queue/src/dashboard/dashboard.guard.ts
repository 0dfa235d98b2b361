import { ForbiddenException, Inject, Injectable, type CanActivate, type ExecutionContext, type OnModuleInit, type Type } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { isObservable, lastValueFrom } from 'rxjs';
import type { ResolvedDashboardOptions } from './dashboard.options';
import { DASHBOARD_OPTIONS } from './dashboard.tokens';

/**
 * Puts the user's guard (option `guard`) in front of every dashboard route: pages, assets and
 * actions. A class is built once by Nest's injector (or taken from the app if it is a provider
 * there), so it can inject the app's services; an instance is used as it is. Anything but `true`
 * from it is a 403; an exception it throws (an UnauthorizedException, say) goes out as it is.
 * With `guard: 'none'` every request passes (the module warned at startup). A guard class that
 * cannot be built fails the app's startup.
 */
@Injectable()
export class DashboardAccessGuard implements CanActivate, OnModuleInit {
  private resolved?: Promise<CanActivate>;

  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly moduleRef: ModuleRef,
  ) {}

  async onModuleInit(): Promise<void> {
    if (this.options.guard !== null) await this.userGuard(this.options.guard);
  }

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const guard = this.options.guard;
    if (guard === null) return true;
    const instance = await this.userGuard(guard);
    const verdict = instance.canActivate(context);
    const allowed = isObservable(verdict) ? await lastValueFrom(verdict, { defaultValue: false }) : await verdict;
    if (allowed !== true) throw new ForbiddenException();
    return true;
  }

  private userGuard(guard: Type<CanActivate> | CanActivate): Promise<CanActivate> {
    // Built once; a failure is not kept, so the next request tries again.
    return (this.resolved ??= this.instanceOf(guard).catch((err: unknown) => {
      this.resolved = undefined;
      throw err;
    }));
  }

  private async instanceOf(guard: Type<CanActivate> | CanActivate): Promise<CanActivate> {
    if (typeof guard !== 'function') return guard;
    try {
      return this.moduleRef.get(guard, { strict: false });
    } catch {
      return this.moduleRef.create(guard);
    }
  }
}
