import { Counter, Histogram, Registry, type RegistryContentType } from 'prom-client';
import { AttemptTally } from './attempt.tally';

const BUCKETS = [0.001, 0.01, 0.1, 1];

/** The same observations through prom-client's own Counter and Histogram, and through the tally. */
function both(observations: [queue: string, outcome: string, seconds: number | undefined][]) {
  const reference = new Registry<RegistryContentType>();
  const counter = new Counter({ name: 'x_outcomes_total', help: 'outcomes', labelNames: ['queue', 'outcome'], registers: [reference] });
  const histogram = new Histogram({ name: 'x_duration_seconds', help: 'durations', labelNames: ['queue', 'outcome'], buckets: BUCKETS, registers: [reference] });
  const ours = new Registry<RegistryContentType>();
  const tally = new AttemptTally(BUCKETS);
  ours.registerMetric(tally.counter('x_outcomes_total', 'outcomes'));
  ours.registerMetric(tally.histogram('x_duration_seconds', 'durations'));
  for (const [queue, outcome, seconds] of observations) {
    counter.inc({ queue, outcome });
    if (seconds !== undefined) histogram.observe({ queue, outcome }, seconds);
    tally.record(queue, outcome, seconds);
  }
  return { reference, ours };
}

/** prom-client's JSON carries empty exemplar slots; the tally has no exemplars. */
function withoutExemplars(metrics: object[]): unknown {
  return JSON.parse(JSON.stringify(metrics, (key, value: unknown) => (key === 'exemplar' ? undefined : value)));
}

const OBSERVATIONS: [string, string, number | undefined][] = [
  ['a', 'completed', 0.0004],
  ['a', 'completed', 0.001], // on a bound: counted in that bucket (le is inclusive)
  ['a', 'completed', 0.05],
  ['a', 'failed', 2.5], // above the last bound: only +Inf
  ['b', 'completed', 0.02],
  ['b', 'lease-lost', undefined], // counted, no run time
  ['a', 'completed', 0.3],
];

describe('AttemptTally', () => {
  it("exposes the same text as prom-client's Counter and Histogram for the same observations", async () => {
    const { reference, ours } = both(OBSERVATIONS);
    expect(await ours.metrics()).toBe(await reference.metrics());
  });

  it('matches them in OpenMetrics format and as JSON too, and resets with the registry', async () => {
    const { reference, ours } = both(OBSERVATIONS);
    reference.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
    ours.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
    expect(await ours.metrics()).toBe(await reference.metrics());
    expect(withoutExemplars(await ours.getMetricsAsJSON())).toEqual(withoutExemplars(await reference.getMetricsAsJSON()));
    reference.resetMetrics();
    ours.resetMetrics();
    expect(await ours.metrics()).toBe(await reference.metrics());
  });

  it("matches them with the registry's default labels, and when one metric alone is reset", async () => {
    const { reference, ours } = both(OBSERVATIONS);
    reference.setDefaultLabels({ app: 'shop' });
    ours.setDefaultLabels({ app: 'shop' });
    expect(await ours.metrics()).toBe(await reference.metrics());
    for (const name of ['x_duration_seconds', 'x_outcomes_total']) {
      reference.getSingleMetric(name)!.reset();
      ours.getSingleMetric(name)!.reset();
      expect(await ours.metrics()).toBe(await reference.metrics());
    }
  });

  it('merges into an application registry', async () => {
    const { ours } = both(OBSERVATIONS);
    const merged = Registry.merge([ours as Registry, new Registry()]);
    expect(await merged.metrics()).toContain('x_outcomes_total{queue="b",outcome="lease-lost"} 1');
    expect(await merged.metrics()).toContain('x_duration_seconds_bucket{le="0.001",queue="a",outcome="completed"} 2');
  });
});
