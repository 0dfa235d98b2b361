/**
 * The dashboard's stylesheet, compiled into the package as a string and served by the dashboard
 * itself (`<path>/assets/dashboard.css`): no CDN, no build step, and the Content-Security-Policy
 * can stay at `style-src 'self'`. Inline SVG (chart, pipeline) is coloured by these classes.
 */
export const DASHBOARD_CSS = `
:root { --bg: #f5f6f8; --panel: #fff; --ink: #1d2330; --muted: #667085; --line: #e3e6ec; --accent: #2f5bd3;
  --done: #2e9d5b; --failed: #d64545; --pending: #c58a12; --running: #2f7fd3; --cancelled: #8a8f98; --dead: #a12a2a; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
.top { display: flex; align-items: center; gap: 24px; padding: 0 24px; height: 52px; background: #1d2330; color: #fff; }
.top .brand { color: #fff; font-weight: 700; font-size: 16px; letter-spacing: .02em; }
.top nav { display: flex; gap: 4px; }
.top nav a { color: #c9cfdb; padding: 6px 12px; border-radius: 6px; }
.top nav a.active, .top nav a:hover { background: #313a4d; color: #fff; text-decoration: none; }
.top .mode { margin-left: auto; font-size: 12px; padding: 3px 8px; border: 1px solid #c9cfdb; border-radius: 10px; color: #c9cfdb; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 40px; }
h1 { font-size: 22px; margin: 4px 0 16px; display: flex; align-items: center; gap: 10px; flex-wrap: wrap; }
h2 { font-size: 15px; margin: 0 0 10px; color: #3a4254; }
footer { text-align: center; color: var(--muted); font-size: 12px; padding: 0 0 24px; }
.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 16px 18px; margin-bottom: 16px; overflow-x: auto; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 12px; margin-bottom: 16px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 12px 16px; }
.card .value { font-size: 24px; font-weight: 650; }
.card .label { color: var(--muted); font-size: 12px; }
.card.good .value { color: var(--done); }
.card.bad .value { color: var(--failed); }
.grid-table { border-collapse: collapse; width: 100%; }
.grid-table th, .grid-table td { text-align: left; padding: 7px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
.grid-table thead th { font-size: 12px; color: var(--muted); font-weight: 600; text-transform: uppercase; letter-spacing: .03em; }
.grid-table tbody tr:hover { background: #f8f9fb; }
.num { text-align: right !important; font-variant-numeric: tabular-nums; }
.mono, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
td.error { color: #8a2a2a; max-width: 420px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.nowrap { white-space: nowrap; }
a.dead, span.failed { color: var(--failed); font-weight: 600; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; color: #fff; background: var(--muted); vertical-align: middle; }
.badge.st-done { background: var(--done); } .badge.st-pending { background: var(--pending); } .badge.st-running { background: var(--running); }
.badge.st-dead { background: var(--dead); } .badge.st-cancelled { background: var(--cancelled); }
a.tag { display: inline-block; padding: 0 6px; margin: 1px 0; border: 1px solid var(--line); border-radius: 8px; font-size: 12px; font-family: ui-monospace, monospace; text-decoration: none; }
.badge.st-paused { background: #b7791f; }
.badge.st-cooldown { background: #c05621; }
.queue-name { font-family: ui-monospace, monospace; font-size: 16px; color: #3a4254; background: #e8ebf2; padding: 2px 8px; border-radius: 6px; }
.hint, .rel, .legend .hint { color: var(--muted); font-size: 12px; }
.rel { margin-left: 6px; }
.empty { color: var(--muted); margin: 4px 0; }
.notice { padding: 10px 14px; border-radius: 8px; margin: 0 0 16px; }
.notice.ok { background: #e6f4ec; border: 1px solid #b5dfc5; }
.notice.warn { background: #fdf1e3; border: 1px solid #f0cf9c; }
.btn { display: inline-block; font: inherit; font-weight: 600; padding: 6px 14px; border-radius: 6px; border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
.btn:hover { filter: brightness(1.08); text-decoration: none; }
.btn.ghost { background: #fff; color: var(--accent); }
.btn.danger { background: #fff; color: var(--failed); border-color: var(--failed); }
form.inline { display: inline-flex; align-items: center; gap: 8px; margin: 0 8px 0 0; }
.actions { display: flex; flex-wrap: wrap; gap: 8px; margin-bottom: 16px; }
.filters { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 10px; margin-bottom: 16px; }
.filters label, form.inline label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); gap: 3px; }
form.inline label { flex-direction: row; align-items: center; gap: 6px; }
input, select, textarea { font: inherit; padding: 5px 8px; border: 1px solid #cfd4de; border-radius: 6px; background: #fff; color: var(--ink); min-width: 120px; }
.pager { display: flex; gap: 8px; justify-content: flex-end; margin-top: 12px; }
.facts { display: grid; grid-template-columns: 140px 1fr; gap: 6px 16px; margin: 0; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; }
pre { background: #f4f5f8; border: 1px solid var(--line); border-radius: 8px; padding: 12px; margin: 0; overflow: auto; max-height: 480px; white-space: pre-wrap; word-break: break-word; }
pre.error-text { color: #7d1f1f; background: #fdf4f4; border-color: #f1d0d0; }
.progress-cell { display: inline-flex; align-items: center; gap: 6px; }
.progress-cell progress { width: 90px; height: 10px; }
.progress-text { color: var(--muted); font-variant-numeric: tabular-nums; }
.task-log pre.log-error { color: #7d1f1f; background: #fdf4f4; border-color: #f1d0d0; padding: 6px 8px; max-height: 200px; }
.legend { display: flex; align-items: center; gap: 6px; flex-wrap: wrap; margin: 0 0 8px; }
.legend .key { display: inline-block; width: 12px; height: 12px; border-radius: 2px; }
.legend .key.done { background: var(--done); } .legend .key.failed { background: var(--failed); margin-left: 10px; }
.legend .hint { margin-left: 16px; }
svg.chart { width: 100%; height: auto; }
svg .grid { stroke: var(--line); stroke-width: 1; }
svg .axis { fill: var(--muted); font-size: 9.5px; }
svg .done { fill: var(--done); } svg .failed { fill: var(--failed); }
svg .hit { fill: transparent; } svg .minute:hover .hit { fill: #eef1f7; }
svg .unsampled { fill: #f0f1f4; }
.scroll { overflow-x: auto; }
svg.pipeline .edge { fill: none; stroke: #8a93a6; stroke-width: 1.6; }
svg.pipeline .arrowhead { fill: #8a93a6; }
svg.pipeline .node rect { fill: #fff; stroke: #b9c0cd; stroke-width: 1.5; }
svg.pipeline .node.st-done rect { fill: #eaf6ef; stroke: var(--done); }
svg.pipeline .node.st-pending rect { fill: #fdf5e6; stroke: var(--pending); }
svg.pipeline .node.st-running rect { fill: #e9f2fc; stroke: var(--running); }
svg.pipeline .node.st-dead rect { fill: #fbecec; stroke: var(--dead); }
svg.pipeline .node.st-cancelled rect { fill: #f1f2f4; stroke: var(--cancelled); }
svg.pipeline .node.current rect { stroke-width: 3.5; }
svg.pipeline .node:hover rect { filter: brightness(.97); }
svg.pipeline text { fill: var(--ink); font-size: 12px; }
svg.pipeline text.q { font-weight: 650; font-size: 13px; }
svg.pipeline text.meta { fill: var(--muted); font-size: 11.5px; }
`;
