/**
 * Wraps the app's PrismaClient `$disconnect` so that `before()` runs first: Nest may destroy the
 * app's PrismaService before the queue's module, and the queue's work must not lose its pool.
 */
export function holdDisconnect(prisma: unknown, before: () => Promise<void>): void {
  const client = prisma as { $disconnect?: () => Promise<void> };
  const disconnect = client.$disconnect;
  if (typeof disconnect !== 'function') return;
  Object.defineProperty(client, '$disconnect', {
    configurable: true,
    writable: true,
    value: async () => {
      await before();
      return disconnect.call(client);
    },
  });
}
