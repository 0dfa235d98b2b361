import { parseMarker, runtimeFunctions } from './runtime-functions';

describe('runtime functions', () => {
  // That a changed body gets a higher release is checked against the statements snapshot
  // (statements-snapshot.spec.ts).
  it('records release and hash in a comment the installer reads back', () => {
    const [f] = runtimeFunctions('jobs');
    expect(f.identity).toBe('"jobs".archive_partitions()');
    const comment = /IS '([^']*)';$/.exec(f.marker)![1];
    expect(parseMarker(comment)).toEqual({ release: f.release, hash: f.hash });
    expect(parseMarker(null)).toBeNull();
    expect(parseMarker('a note of our own')).toBeNull();
  });
});
