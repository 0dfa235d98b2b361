import type { RuntimeScheduleOptions } from '../client/schedules.client';
import { InvalidScheduleError } from '../errors';
import { BadDashboardInput } from './dashboard.filter';
import { queueName, text } from './dashboard.input';

type Fields = Record<string, unknown> | undefined;

/** The payload field's limit: the library's for schedule payloads (64 KiB of JSON), plus slack for spacing. */
const MAX_PAYLOAD_TEXT = 128 * 1024;

/**
 * The schedule form (schedules.view.ts): name, queue, cron and timezone or everyMs (ms), payload
 * (JSON, default {}), missed. Only the form's shape is read here; the rules are TaskQueue's
 * (see `scheduleInputError`). Empty fields are absent options.
 */
export function scheduleForm(body: Fields): { name: string; options: RuntimeScheduleOptions } {
  const name = text(body, 'name');
  if (name === null) throw new BadDashboardInput('name', 'a schedule name');
  const everyMs = text(body, 'everyMs');
  if (everyMs !== null && !/^[0-9]{1,15}$/.test(everyMs)) throw new BadDashboardInput('everyMs', 'an interval in milliseconds (digits only)');
  const missed = text(body, 'missed') ?? 'skip';
  if (missed !== 'skip' && missed !== 'once') throw new BadDashboardInput('missed', 'skip or once');
  const options: RuntimeScheduleOptions = { queue: queueName(body, 'queue', true), missed, payload: payloadField(body) };
  const cron = text(body, 'cron');
  const timezone = text(body, 'timezone');
  if (cron !== null) options.cron = cron;
  if (timezone !== null) options.timezone = timezone;
  if (everyMs !== null) options.everyMs = Number(everyMs);
  return { name, options };
}

/**
 * The name of an existing schedule (Remove's hidden field, `?edit=`): as given, not trimmed, since
 * upsertSchedule keeps spaces a name was made with; null when absent or empty.
 */
export function scheduleNameField(fields: Fields, field: string): string | null {
  const value = fields?.[field];
  if (value === undefined || value === null || value === '') return null;
  if (typeof value !== 'string' || value.length > 200 || value.includes('\u0000')) throw new BadDashboardInput(field, 'a schedule name of 1-200 characters');
  return value;
}

function payloadField(body: Fields): unknown {
  const value = body?.payload;
  if (value === undefined || value === null || (typeof value === 'string' && value.trim() === '')) return {};
  if (typeof value !== 'string' || value.length > MAX_PAYLOAD_TEXT) throw new BadDashboardInput('payload', 'JSON of at most 64 KiB');
  try {
    return JSON.parse(value);
  } catch {
    throw new BadDashboardInput('payload', 'JSON, such as {"report": "daily"}');
  }
}

/** What each schedule option takes, in a fixed sentence (a 400 never quotes input). */
const EXPECTED: Record<string, string> = {
  name: 'a name of 1-200 characters',
  queue: 'a queue name of 1-128 characters from [A-Za-z0-9_.:-]',
  cron: 'a cron expression such as "0 3 * * *" (seconds optional), or an interval in everyMs instead (exactly one of them)',
  timezone: 'an IANA time zone such as Europe/Berlin, with a cron expression only',
  everyMs: 'an interval in milliseconds from 100 to 366 days',
  payload: 'JSON of at most 64 KiB',
  missed: 'skip or once',
};

/** TaskQueue's refusal of the form's values as the dashboard's 400 naming the field; other errors as they are. */
export function scheduleInputError(err: unknown): unknown {
  if (!(err instanceof InvalidScheduleError)) return err;
  const field = /\.(\w+)$/.exec(err.option)?.[1] ?? 'name';
  return new BadDashboardInput(field, EXPECTED[field] ?? 'a valid value');
}
