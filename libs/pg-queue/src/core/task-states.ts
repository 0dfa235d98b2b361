import type { TaskState } from '../types';

/** Every state a task can be in, in lifecycle order: what state filters accept and offer. */
export const TASK_STATES: readonly TaskState[] = ['pending', 'waiting', 'running', 'dead', 'done', 'cancelled'];
