/** Round trips this short always give a usable estimate (error at most half of it). */
const TRUSTED_ROUND_TRIP_MS = 10;

/**
 * How far this process's clock is from the database's. Due times come from the database clock
 * (run_at = now() + delay), and an app clock a few ms ahead would wake a worker before its task is
 * due: it claims early, finds nothing, and the task waits for the next wake-up. Every claim
 * reports the database's time; the latest claim with a short round trip (under 10 ms, or twice
 * the best seen) sets the estimate, so a clock that is stepped is followed at the next claim.
 * A slow answer still proves bounds: the database read its clock while the local one read between
 * sending and receiving. An estimate outside them (a step, on a machine so loaded that no claim
 * came back quickly) moves to the nearer bound, wrong by at most that round trip.
 */
export class DatabaseClock {
  /** Database time minus local time, in ms. */
  private offsetMs = 0;
  private bestRoundTripMs = Number.POSITIVE_INFINITY;
  private measuredAt = Number.NEGATIVE_INFINITY;

  /** A database time `dbNowMs` read by a statement sent at `sentAt` and answered at `receivedAt` (local epoch ms). */
  observe(dbNowMs: number, sentAt: number, receivedAt: number): void {
    const roundTrip = receivedAt - sentAt;
    this.bestRoundTripMs = Math.min(this.bestRoundTripMs, roundTrip);
    // A slow answer says little about when the database read its clock, unless nothing better came for a minute.
    if (roundTrip <= Math.max(TRUSTED_ROUND_TRIP_MS, 2 * this.bestRoundTripMs) || receivedAt - this.measuredAt > 60_000) {
      this.offsetMs = dbNowMs - (sentAt + receivedAt) / 2;
      this.measuredAt = receivedAt;
    } else {
      this.offsetMs = Math.min(Math.max(this.offsetMs, dbNowMs - receivedAt), dbNowMs - sentAt);
    }
  }

  /** The database's clock now, as epoch ms (estimated). */
  now(): number {
    return Date.now() + this.offsetMs;
  }

  /** Milliseconds from now until the database's clock reads `dbEpochMs` (negative: already past). */
  msUntil(dbEpochMs: number): number {
    return dbEpochMs - (Date.now() + this.offsetMs);
  }
}
