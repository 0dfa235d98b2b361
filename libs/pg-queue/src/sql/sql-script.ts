/**
 * Splits a SQL script into statements at its top-level semicolons, as psql does: a semicolon inside
 * a string ('…', E'…'), a quoted identifier, a dollar-quoted body ($$ … $$, $fn$ … $fn$), a comment
 * or parentheses does not end a statement. The installer runs each statement on its own rather than
 * the whole script as one simple query, because an adapter whose statementNameGenerator names every
 * statement prepares it, and a prepared statement may hold only one command.
 *
 * Not understood: SQL-standard function bodies (`BEGIN ATOMIC … END`); give functions a
 * dollar-quoted body instead.
 */
export function splitSqlScript(script: string): string[] {
  const statements: string[] = [];
  let start = 0;
  let depth = 0;
  let code = false; // the current statement has more than whitespace and comments
  const end = (at: number) => {
    if (code) statements.push(script.slice(start, at).trim());
    start = at + 1;
    code = false;
  };
  for (let i = 0; i < script.length; ) {
    const c = script[i];
    const next = script[i + 1];
    if (c === '-' && next === '-') {
      const eol = script.indexOf('\n', i);
      i = eol < 0 ? script.length : eol + 1;
      continue;
    }
    if (c === '/' && next === '*') {
      i = blockCommentEnd(script, i);
      continue;
    }
    if (c === ';' && depth === 0) {
      end(i);
      i++;
      continue;
    }
    if (!/\s/.test(c)) code = true;
    if (c === "'") i = quotedEnd(script, i, "'", isEscapeString(script, i));
    else if (c === '"') i = quotedEnd(script, i, '"', false);
    else if (c === '$' && !isIdentChar(script[i - 1])) i = dollarQuotedEnd(script, i);
    else {
      if (c === '(') depth++;
      else if (c === ')') depth--;
      i++;
    }
  }
  end(script.length);
  return statements;
}

const IDENT_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;
const DOLLAR_TAG = /\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/y;

function isIdentChar(c: string | undefined): boolean {
  return c !== undefined && IDENT_CHAR.test(c);
}

/** E'…' strings take backslash escapes; the E must start a token (not end an identifier). */
function isEscapeString(script: string, quote: number): boolean {
  const prefix = script[quote - 1];
  return (prefix === 'E' || prefix === 'e') && !isIdentChar(script[quote - 2]);
}

/** Index after the closing quote; a doubled quote is an escaped one. Unterminated: the end. */
function quotedEnd(script: string, open: number, quote: string, backslashEscapes: boolean): number {
  for (let i = open + 1; i < script.length; i++) {
    if (backslashEscapes && script[i] === '\\') i++;
    else if (script[i] === quote) {
      if (script[i + 1] !== quote) return i + 1;
      i++;
    }
  }
  return script.length;
}

/** Index after the closing tag of a dollar quote opening at `open`; `open + 1` if `$` opens none ($1). */
function dollarQuotedEnd(script: string, open: number): number {
  DOLLAR_TAG.lastIndex = open;
  const tag = DOLLAR_TAG.exec(script)?.[0];
  if (!tag) return open + 1;
  const close = script.indexOf(tag, open + tag.length);
  return close < 0 ? script.length : close + tag.length;
}

/** Block comments nest in PostgreSQL. */
function blockCommentEnd(script: string, open: number): number {
  let depth = 0;
  for (let i = open; i < script.length; i++) {
    if (script[i] === '/' && script[i + 1] === '*') {
      depth++;
      i++;
    } else if (script[i] === '*' && script[i + 1] === '/') {
      depth--;
      i++;
      if (depth === 0) return i + 1;
    }
  }
  return script.length;
}
