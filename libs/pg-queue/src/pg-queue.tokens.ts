/** DI token of the validated module options (ResolvedModuleOptions). */
export const RESOLVED_OPTIONS = Symbol('PG_QUEUE_RESOLVED_OPTIONS');
