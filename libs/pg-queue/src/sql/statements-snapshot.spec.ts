import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseMarker, runtimeFunctions } from './runtime-functions';
import { statementsSnapshot } from './statements-snapshot';

const FILE = path.join(__dirname, '../../sql/statements.sql');

/** Release and hash of each runtime function as a snapshot's COMMENT lines record them. */
function recordedFunctions(snapshot: string): Map<string, { release: number; hash: string }> {
  const out = new Map<string, { release: number; hash: string }>();
  for (const m of snapshot.matchAll(/^COMMENT ON FUNCTION "pgqueue"\.(\w+)\(.*\) IS '([^']*)';$/gm)) {
    const marker = parseMarker(m[2]);
    if (marker) out.set(m[1], marker);
  }
  return out;
}

/**
 * Runtime functions whose body differs from the snapshot's without a release one above it. An
 * instance replaces a runtime function whose recorded release is not above its own: two builds
 * with one release and two bodies would replace each other's at every start of a rolling deploy.
 */
function unreleasedChanges(snapshot: string): { function: string; release: number; changedFrom: { release: number; hash: string } }[] {
  const before = recordedFunctions(snapshot);
  return runtimeFunctions('pgqueue').flatMap((f) => {
    const was = before.get(f.name);
    return was === undefined || was.hash === f.hash || f.release === was.release + 1 ? [] : [{ function: f.name, release: f.release, changedFrom: was }];
  });
}

describe('statements snapshot (libs/pg-queue/sql/statements.sql)', () => {
  // Under `npm run sql:snapshot` this writes the file; in every other run it compares.
  const writing = process.env.PGQUEUE_WRITE_SQL_SNAPSHOT === '1';
  const committed = fs.existsSync(FILE) ? fs.readFileSync(FILE, 'utf8') : '';
  const current = statementsSnapshot();

  it('holds the text of every statement as the code generates it (npm run sql:snapshot writes it)', () => {
    if (!writing) return expect(current).toBe(committed);
    // Checked before the file is written: a write would make the next run compare with itself.
    expect(unreleasedChanges(committed)).toEqual([]);
    fs.writeFileSync(FILE, current);
  });

  it("gives a runtime function whose text changed a release above the snapshot's", () => {
    expect(unreleasedChanges(committed)).toEqual([]);
  });

  it('lists a statement once: no two headings alike', () => {
    const headings = current.split('\n').filter((line) => /^-- @statement /.test(line));
    expect(headings.length).toBeGreaterThan(100);
    expect(new Set(headings).size).toBe(headings.length);
  });
});
