import { escapeHtml, html, Html } from './html';
import { pipelinePicture } from './pipeline.svg';
import { Links } from './links';
import { throughputChart } from './throughput.chart';

describe('html tag', () => {
  it('escapes the five characters that can end text or a quoted attribute', () => {
    expect(escapeHtml(`<script>alert('x') & "y"</script>`)).toBe('&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;');
  });

  it('escapes every interpolated value, keeps nested html, drops nullish and booleans', () => {
    const evil = '"><img src=x onerror=alert(1)>';
    const out = html`<a title="${evil}">${evil}${html`<b>${evil}</b>`}${[evil, html`<i></i>`]}${null}${undefined}${false}${7}</a>`;
    expect(out.text).toBe(
      '<a title="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;">&quot;&gt;&lt;img src=x onerror=alert(1)&gt;' +
        '<b>&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</b>&quot;&gt;&lt;img src=x onerror=alert(1)&gt;<i></i>7</a>',
    );
  });

  it('has no way to make Html but the tag', () => {
    expect(() => new (Html as unknown as new (t: string, b: symbol) => Html)('<x>', Symbol('Html'))).toThrow(TypeError);
  });
});

describe('links', () => {
  it('encode every query value and path segment', () => {
    const l = new Links('/admin/queues');
    expect(l.tasks({ queue: 'a b', error: '&x=<1>', key: '', group: null })).toBe('/admin/queues/tasks?queue=a%20b&error=%26x%3D%3C1%3E');
    expect(l.overview()).toBe('/admin/queues');
    expect(new Links('').overview()).toBe('/');
  });
});

describe('SVG views', () => {
  const now = new Date('2026-11-23T10:00:30Z');
  it('chart: one hit area per minute, bars only where there are counts, hostile-free titles', () => {
    const minutes = Array.from({ length: 60 }, (_, i) => ({ done: i === 59 ? 40 : 0, failed: i === 58 ? 3 : 0 }));
    const svg = throughputChart(minutes, now, null).text;
    expect(svg.match(/class="hit"/g)).toHaveLength(60);
    expect(svg.match(/class="done"/g)).toHaveLength(1);
    expect(svg.match(/class="failed"/g)).toHaveLength(1);
    expect(svg).toContain('<title>10:00 UTC: 40 done, 0 failed attempts</title>');
    expect(svg).not.toContain('style=');
  });

  it('pipeline: a box per task, an arrow per parent link, the queue name escaped', () => {
    const stage = (stageNo: number, id: string, parentId: string | null, queue: string) => ({
      stage: stageNo, id, queue, parentId, state: 'done' as const, attempt: 1, createdAt: now, startedAt: now, finishedAt: now,
    });
    const svg = pipelinePicture([stage(0, '1', null, 'a'), stage(1, '2', '1', 'b<x>'), stage(1, '3', '1', 'c')], '2', new Links('/q')).text;
    expect(svg.match(/<a href="\/q\/tasks\/\d"/g)).toHaveLength(3);
    expect(svg.match(/class="edge"/g)).toHaveLength(2);
    expect(svg).toContain('b&lt;x&gt;');
    expect(svg).toContain('class="node st-done current"');
  });
});
