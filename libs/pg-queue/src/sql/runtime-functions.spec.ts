import { parseMarker, runtimeFunctions } from './runtime-functions';

describe('runtime functions', () => {
  it("pins each function's text to its release: a changed body needs a higher release (update both here)", () => {
    // An instance replaces a function whose recorded release is not above its own: two builds with
    // one release and two bodies would replace each other's at every start of a rolling deploy.
    expect(runtimeFunctions('pgqueue').map((f) => [f.name, f.release, f.hash])).toEqual([
      ['archive_partitions', 1, 'dc941d6210e4c1af'],
      ['archive_partition_step', 2, '73f5986b01bdd34a'],
      ['claim_limited', 1, '1aaf0d946875a314'],
    ]);
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
