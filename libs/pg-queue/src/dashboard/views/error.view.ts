import { html, type Html } from './html';

/** A refusal or failure, saying only its status: never data, never the error's own text. */
export function errorPage(status: number, title: string, detail?: string): Html {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${status} ${title}</title></head>
<body><h1>${status} ${title}</h1>${detail ? html`<p>${detail}</p>` : ''}</body></html>
`;
}
