import * as net from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a PostgreSQL port that can simulate a half-open network:
 * `stall()` stops forwarding in both directions while every socket stays open (no FIN, no RST;
 * the kernel keeps acknowledging, so TCP keepalive sees nothing wrong), as when a NAT or a
 * firewall silently black-holes a flow. Bytes are held, not dropped, as TCP retransmission would
 * deliver them once the path heals: `resume()` forwards everything held, then carries on.
 * Connections opened during a stall are accepted and held the same way.
 * `delayMs` makes a distant database instead: what the client sends reaches the server that much
 * later (order kept), so every statement pays a round trip's latency.
 * `repoint()` moves it to another server, as a VIP, DNS or a pooler does in a failover.
 * `refuse()` drops every connection and closes new ones at once until `admit()`: a path gone for
 * the clients that use this proxy while the server and everyone else go on.
 */
export class StallProxy {
  private server: net.Server | null = null;
  private readonly sockets = new Set<net.Socket>();
  private stalled = false;
  private refusing = false;
  /** stallAfter's markers and what it resolves (null: not armed). */
  private trigger: { markers: string[]; fired: () => void } | null = null;
  /** refuseOn's markers and what it resolves (null: not armed). */
  private refuseTrigger: { markers: string[]; fired: () => void } | null = null;
  port = 0;
  /** Milliseconds by which each chunk from a client is held before it is forwarded (0: at once). */
  delayMs = 0;

  constructor(private targetPort: number, private readonly targetHost = '127.0.0.1') {}

  /** Moves the address (a failover): new connections go to `port`, every open one is dropped. */
  repoint(port: number): void {
    this.targetPort = port;
    for (const s of this.sockets) s.destroy();
  }

  /** A copy of `url` (postgres://…) that goes through this proxy. */
  url(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  /** Listens on `port` (default: any free one). */
  async start(port = 0): Promise<void> {
    this.server = net.createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(port, '127.0.0.1', resolve);
    });
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Drops every open connection, and closes each new one as it arrives, until admit(). */
  refuse(): void {
    this.refusing = true;
    for (const s of this.sockets) s.destroy();
  }

  admit(): void {
    this.refusing = false;
  }

  /** Stops forwarding; sockets stay open and what arrives is held. */
  stall(): void {
    this.stalled = true;
    for (const s of this.sockets) s.pause();
  }

  /**
   * Stalls right after forwarding the next chunk from a client that holds every one of `markers`
   * (latin1): the server gets that statement, and its reply is held. Resolves then.
   */
  stallAfter(...markers: string[]): Promise<void> {
    return new Promise((fired) => (this.trigger = { markers, fired }));
  }

  /**
   * Refuses (see refuse) on the next chunk from a client that holds every one of `markers`, before
   * forwarding it: the server never gets that statement, and the client sees its connection drop.
   * Resolves then.
   */
  refuseOn(...markers: string[]): Promise<void> {
    return new Promise((fired) => (this.refuseTrigger = { markers, fired }));
  }

  /** Forwards what was held, and everything after. */
  resume(): void {
    this.stalled = false;
    for (const s of this.sockets) s.resume();
  }

  /** Connections currently open through the proxy (each counts its two sockets once). */
  get connections(): number {
    return this.sockets.size / 2;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: net.Socket): void {
    if (this.refusing) return void client.destroy();
    const upstream = net.connect(this.targetPort, this.targetHost);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(from);
      from.setNoDelay(true);
      // Paused sockets emit no 'data' and no 'end' until resumed: nothing leaks through a stall.
      const fromClient = from === client;
      from.on('data', (chunk: Buffer) => {
        const r = this.refuseTrigger;
        if (fromClient && r && r.markers.every((m) => chunk.toString('latin1').includes(m))) {
          this.refuseTrigger = null;
          this.refuse();
          r.fired();
          return;
        }
        if (fromClient && this.delayMs > 0) setTimeout(() => to.write(chunk), this.delayMs);
        else to.write(chunk);
        const t = this.trigger;
        if (fromClient && t && t.markers.every((m) => chunk.toString('latin1').includes(m))) {
          this.trigger = null;
          this.stall();
          t.fired();
        }
      });
      from.on('end', () => (fromClient && this.delayMs > 0 ? setTimeout(() => to.end(), this.delayMs) : to.end()));
      from.on('error', () => to.destroy());
      from.on('close', () => {
        this.sockets.delete(from);
        to.destroy();
      });
      if (this.stalled) from.pause();
    }
  }
}
