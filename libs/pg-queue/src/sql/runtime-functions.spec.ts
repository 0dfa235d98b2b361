import { parseMarker, runtimeFunctions } from './runtime-functions';

describe('runtime functions', () => {
  // Every released text of every function (schema pgqueue), append-only: a changed body gets a
  // new line with a higher release, never an edited one. An instance replaces a function whose
  // recorded release is not above its own: two builds with one release and two bodies would
  // replace each other's at every start of a rolling deploy.
  const RELEASES: [string, number, string][] = [
    ['archive_partitions', 1, 'dc941d6210e4c1af'],
    ['archive_partition_step', 2, '73f5986b01bdd34a'],
    ['claim_limited', 1, '2bf5fbb9ce39b9c0'],
    ['claim_limited', 2, 'fa2fa7a09d1250cf'],
    ['claim_limited', 3, '9fb27b9d5755e874'],
    ['claim_limited', 4, '4606aa931dc35a3a'],
    ['claim_limited', 5, 'b24db32ee79c0a34'],
    ['claim_limited', 6, '3cd4a36e80f3e718'],
    ['workflow_signal_committed', 1, '347f965f3cfd5676'],
  ];

  it("pins each function's text to its release: a changed body needs a new release, listed above", () => {
    const current = runtimeFunctions('pgqueue').map((f): [string, number, string] => [f.name, f.release, f.hash]);
    for (const f of current) expect(RELEASES).toContainEqual(f);
    // One text per release, and the current one is each function's newest.
    const keys = RELEASES.map(([name, release]) => `${name}@${release}`);
    expect(new Set(keys).size).toBe(keys.length);
    for (const [name, release] of current) expect(Math.max(...RELEASES.filter((r) => r[0] === name).map((r) => r[1]))).toBe(release);
  });

  it('records release and hash in a comment the installer reads back', () => {
    const [f] = runtimeFunctions('jobs');
    expect(f.identity).toBe('"jobs".archive_partitions()');
    const comment = /IS '([^']*)';$/.exec(f.marker)![1];
    expect(parseMarker(comment)).toEqual({ release: f.release, hash: f.hash });
    expect(parseMarker(null)).toBeNull();
    expect(parseMarker('a note of our own')).toBeNull();
  });
});
