import * as net from 'node:net';

/** A 127.0.0.1 port nothing listens on (it was free a moment ago): for "server unreachable" cases. */
export async function portNobodyListensOn(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}
