import type { Metric } from 'prom-client';

type Labels = { queue: string; outcome: string };

interface Series {
  labels: Labels;
  /** Attempts with this outcome. */
  count: number;
  /** Of those, the ones with a run time, and their sum in seconds. */
  timed: number;
  sum: number;
  /** Timed attempts per bucket (not cumulative); the last slot is +Inf. */
  perBucket: number[];
}

interface MetricValue {
  metricName?: string;
  labels: Record<string, string | number>;
  /** Printed after `labels` and after the registry's default labels, as prom-client's Histogram does. */
  sharedLabels?: Labels;
  value: number;
}

/**
 * Finished attempts per (queue, outcome), with a histogram of their run times, tallied in plain
 * objects and handed to a prom-client registry as one counter and one histogram. prom-client's own
 * inc() and observe() validate and hash their label object on every call, which cost about 1.3 µs
 * per task, several per cent of a worker's CPU at tens of thousands of tasks a second; here a task
 * costs one Map lookup, and the exposition work waits for a scrape. The exposition matches
 * prom-client's Counter and Histogram line for line (attempt.tally.spec.ts compares them).
 */
export class AttemptTally {
  private readonly series = new Map<string, Series>();

  constructor(private readonly buckets: readonly number[]) {}

  record(queue: string, outcome: string, seconds: number | undefined): void {
    const key = `${queue}\u0000${outcome}`;
    let s = this.series.get(key);
    if (s === undefined) {
      s = { labels: { queue, outcome }, count: 0, timed: 0, sum: 0, perBucket: new Array<number>(this.buckets.length + 1).fill(0) };
      this.series.set(key, s);
    }
    s.count += 1;
    if (seconds === undefined) return;
    s.timed += 1;
    s.sum += seconds;
    let i = 0;
    while (i < this.buckets.length && seconds > this.buckets[i]) i++;
    s.perBucket[i] += 1;
  }

  /** A counter of attempts per (queue, outcome), for `registry.registerMetric`. */
  counter(name: string, help: string): Metric {
    const values = () => [...this.series.values()].filter((s) => s.count > 0).map((s) => ({ labels: { ...s.labels }, value: s.count }));
    return this.metric(name, help, 'counter', values, values, () => this.forget((s) => (s.count = 0)));
  }

  /** A histogram of run times per (queue, outcome), for `registry.registerMetric`. */
  histogram(name: string, help: string): Metric {
    const forText = (): MetricValue[] => {
      const values: MetricValue[] = [];
      for (const s of this.series.values()) {
        if (s.timed === 0) continue;
        let cumulative = 0;
        this.buckets.forEach((le, i) => {
          cumulative += s.perBucket[i];
          values.push({ metricName: `${name}_bucket`, labels: { le }, sharedLabels: s.labels, value: cumulative });
        });
        values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf' }, sharedLabels: s.labels, value: s.timed });
        values.push({ metricName: `${name}_sum`, labels: {}, sharedLabels: s.labels, value: s.sum });
        values.push({ metricName: `${name}_count`, labels: {}, sharedLabels: s.labels, value: s.timed });
      }
      return values;
    };
    // As JSON, the shared labels are merged into each value's labels (prom-client does the same).
    const forJson = () => forText().map(({ sharedLabels, ...v }) => ({ ...v, labels: { ...v.labels, ...sharedLabels } }));
    return this.metric(name, help, 'histogram', forJson, forText, () =>
      this.forget((s) => {
        s.timed = 0;
        s.sum = 0;
        s.perBucket.fill(0);
      }),
    );
  }

  /** Clears one metric's part of every series; a series neither metric still shows is dropped. */
  private forget(clear: (s: Series) => void): void {
    for (const [key, s] of this.series) {
      clear(s);
      if (s.count === 0 && s.timed === 0) this.series.delete(key);
    }
  }

  /**
   * The shape a prom-client registry reads from a metric: name, help, type, aggregator, get() (JSON
   * and cluster aggregation), getForPromString() (the text exposition) and reset().
   */
  private metric(name: string, help: string, type: 'counter' | 'histogram', json: () => MetricValue[], text: () => MetricValue[], reset: () => void): Metric {
    const metric = {
      name,
      help,
      type,
      aggregator: 'sum',
      // metric.name, not name: in OpenMetrics mode the registry renames counters (drops `_total`).
      get: async () => ({ name: metric.name, help, type, aggregator: 'sum', values: json() }),
      getForPromString: async () => ({ name: metric.name, help, type, aggregator: 'sum', values: text() }),
      reset,
    };
    return metric as unknown as Metric;
  }
}
