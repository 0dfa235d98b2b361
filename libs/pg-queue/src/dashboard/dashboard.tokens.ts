/** DI token of the validated dashboard options (ResolvedDashboardOptions), one per dashboard module. */
export const DASHBOARD_OPTIONS = Symbol('PG_QUEUE_DASHBOARD_RESOLVED_OPTIONS');
