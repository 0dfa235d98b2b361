import { splitSqlScript } from './sql-script';

describe('splitSqlScript', () => {
  it('splits at top-level semicolons and drops empty and comment-only statements', () => {
    expect(splitSqlScript('CREATE TABLE a (x int);\nCREATE INDEX ON a (x) ;; \n-- trailing note;\n')).toEqual([
      'CREATE TABLE a (x int)',
      'CREATE INDEX ON a (x)',
    ]);
    expect(splitSqlScript('SELECT 1')).toEqual(['SELECT 1']);
  });

  it('keeps a leading comment with its statement', () => {
    expect(splitSqlScript('-- why;\nSELECT 1;')).toEqual(['-- why;\nSELECT 1']);
  });

  it('does not split inside dollar-quoted bodies, with or without a tag', () => {
    const doBlock = 'DO $$\nBEGIN\n  PERFORM 1;\n  RAISE NOTICE $q$a;b$q$;\nEND\n$$';
    const fn = 'CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $fn$\nBEGIN\n  RETURN 1; -- $$ is not the end here\nEND;\n$fn$';
    expect(splitSqlScript(`${doBlock};\n${fn};\nSELECT 2;`)).toEqual([doBlock, fn, 'SELECT 2']);
  });

  it('does not split inside strings, quoted identifiers, comments or parentheses', () => {
    const cases = [
      "SELECT 'a;b', 'it''s;'",
      "SELECT E'\\';', e'x\\\\'",
      'SELECT 1 AS "a;""b"',
      'SELECT 1 /* a; /* nested; */ still; */',
      'CREATE RULE r AS ON INSERT TO a DO ALSO (NOTIFY a; NOTIFY b)',
    ];
    expect(splitSqlScript(cases.map((c) => `${c};\n`).join(''))).toEqual(cases);
  });

  it('treats $1 and identifiers with $ as code, not as dollar quotes', () => {
    expect(splitSqlScript('SELECT $1; SELECT a$b$ FROM t$; SELECT 3')).toEqual(['SELECT $1', 'SELECT a$b$ FROM t$', 'SELECT 3']);
  });

  it('a standard string ending in a backslash ends at its quote', () => {
    expect(splitSqlScript("SELECT 'C:\\'; SELECT 2")).toEqual(["SELECT 'C:\\'", 'SELECT 2']);
  });
});
