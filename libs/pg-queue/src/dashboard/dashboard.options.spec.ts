import { Injectable, Logger, type CanActivate } from '@nestjs/common';
import { InvalidOptionsError } from '../errors';
import { dashboardPath, resolveDashboardOptions } from './dashboard.options';
import { sameOrigin } from './dashboard.csrf';
import { basePath } from './dashboard.request';
import { containsPattern, listFilter } from './dashboard.input';

@Injectable()
class AllowGuard implements CanActivate {
  canActivate() {
    return true;
  }
}

describe('dashboard options', () => {
  beforeAll(() => Logger.overrideLogger(false)); // the warning for guard: 'none'
  afterAll(() => Logger.overrideLogger(['log', 'error', 'warn', 'debug', 'verbose']));

  it('a guard is required: a class, an instance, or an explicit none', () => {
    for (const guard of [undefined, null, 'off', {}, () => true, class {}]) {
      expect(() => resolveDashboardOptions({ guard } as never)).toThrow(InvalidOptionsError);
    }
    expect(() => resolveDashboardOptions(undefined as never)).toThrow(/dashboard/);
    expect(resolveDashboardOptions({ guard: AllowGuard }).guard).toBe(AllowGuard);
    const instance = new AllowGuard();
    expect(resolveDashboardOptions({ guard: instance }).guard).toBe(instance);
    expect(resolveDashboardOptions({ guard: 'none' }).guard).toBeNull();
  });

  it('form tokens: random per process, or derived from csrfSecret (the same on every instance)', () => {
    const a = resolveDashboardOptions({ guard: 'none' }).csrfToken;
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(resolveDashboardOptions({ guard: 'none' }).csrfToken).not.toBe(a);
    const secret = 'a shared secret of enough length';
    expect(resolveDashboardOptions({ guard: 'none', csrfSecret: secret }).csrfToken).toBe(resolveDashboardOptions({ guard: 'none', csrfSecret: secret }).csrfToken);
    expect(() => resolveDashboardOptions({ guard: 'none', csrfSecret: 'short' })).toThrow(/csrfSecret/);
    expect(() => resolveDashboardOptions({ guard: 'none', readOnly: 'yes' as never })).toThrow(/readOnly/);
  });

  it('unknown options are InvalidOptionsErrors naming the nearest valid one', () => {
    const err = (() => {
      try {
        resolveDashboardOptions({ guard: 'none', readonly: true } as never);
      } catch (e) {
        return e as InvalidOptionsError;
      }
      throw new Error('expected a throw');
    })();
    expect(err).toBeInstanceOf(InvalidOptionsError);
    expect(err.option).toBe('dashboard.readonly');
    expect(err.message).toBe('pg-queue: invalid option dashboard.readonly: unknown option "readonly" — did you mean "readOnly"?');
    expect(() => resolveDashboardOptions({ gaurd: AllowGuard } as never)).toThrow(/invalid option dashboard\.gaurd: unknown option "gaurd" — did you mean "guard"\?/);
    // path is an extra: next to useFactory in forRootAsync, not in what the factory returns
    expect(() => resolveDashboardOptions({ guard: 'none', path: '/admin' } as never)).toThrow(/invalid option dashboard\.path: .*next to useFactory/);
  });

  it('paths: normalised, plain segments only', () => {
    expect(dashboardPath(undefined)).toBe('/queues');
    expect(dashboardPath('admin/queues/')).toBe('/admin/queues');
    expect(dashboardPath('/')).toBe('');
    for (const bad of ['/a/:id', '/a*', '/a b', 7]) expect(() => dashboardPath(bad)).toThrow(/dashboard\.path/);
  });
});

describe('dashboard requests', () => {
  const req = (headers: Record<string, string>, url = '/queues/tasks/1') => ({ headers, url });

  it('base path: the request path without the route, never a protocol-relative link', () => {
    expect(basePath(req({}, '/api/queues/tasks/12?x=1'), 2, '/queues')).toBe('/api/queues');
    expect(basePath(req({}, '/queues/'), 0, '/queues')).toBe('/queues');
    expect(basePath(req({}, '//evil.example/queues/tasks'), 1, '/queues')).toBe('/queues');
    expect(basePath(req({}, '/x//evil.example/tasks'), 1, '/queues')).toBe('/x/evil.example');
    expect(basePath(req({}, '/tasks'), 2, '/queues')).toBe('/queues');
  });

  it('same origin: Sec-Fetch-Site decides when sent, else Origin against Host', () => {
    expect(sameOrigin(req({ 'sec-fetch-site': 'same-origin', origin: 'null' }))).toBe(true);
    for (const site of ['same-site', 'cross-site', 'none']) expect(sameOrigin(req({ 'sec-fetch-site': site }))).toBe(false);
    expect(sameOrigin(req({ host: 'app.example:8080', origin: 'https://app.example:8080' }))).toBe(true);
    expect(sameOrigin(req({ host: 'app.example', origin: 'https://evil.example' }))).toBe(false);
    expect(sameOrigin(req({ host: 'app.example', origin: 'null' }))).toBe(false);
    expect(sameOrigin(req({ host: 'app.example' }))).toBe(true); // no browser signal: the form token decides
  });

  it('filters: strings only, known states, queue names, ids; error text as a literal ILIKE pattern', () => {
    expect(listFilter({ queue: 'q', state: 'dead', error: ' x ', cursor: '12' })).toEqual({ queue: 'q', state: 'dead', key: null, group: null, tag: null, error: 'x', cursor: '12' });
    expect(listFilter({ tag: 'tenant:acme' }).tag).toBe('tenant:acme');
    for (const bad of [{ state: 'zombie' }, { queue: 'a b' }, { cursor: '0' }, { key: ['a', 'b'] }, { error: 'x\u0000' }, { group: 'g'.repeat(501) }, { tag: ['a', 'b'] }]) {
      expect(() => listFilter(bad)).toThrow();
    }
    expect(containsPattern('50%_off\\')).toBe('%50\\%\\_off\\\\%');
  });
});
