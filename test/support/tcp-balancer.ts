// A TCP load balancer for tests, as operators put in front of control-plane
// replicas: each new connection goes to the first target that accepts it, in
// the order given (an active/standby pair: everything lands on the first
// while it is up); a target that refuses or fails is skipped. Established
// connections end with their target. Loopback only.
import net from 'node:net';

export interface TcpBalancer {
  port: number;
  /** How many connections each target has carried, by target port. */
  connections: Map<number, number>;
  close(): Promise<void>;
}

export async function startTcpBalancer(targets: { host: string; port: number }[], connectTimeoutMs = 2000): Promise<TcpBalancer> {
  const sockets = new Set<net.Socket>();
  const connections = new Map<number, number>();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.pause();
    client.on('error', () => client.destroy()).on('close', () => sockets.delete(client));
    const attempt = (i: number) => {
      if (client.destroyed) return;
      const target = targets[i];
      if (!target) {
        client.destroy();
        return;
      }
      const upstream = net.connect({ host: target.host, port: target.port });
      const timer = setTimeout(() => upstream.destroy(new Error('connect timeout')), connectTimeoutMs);
      // Refused or timed out before connecting: the next target.
      const skip = () => {
        clearTimeout(timer);
        upstream.destroy();
        attempt(i + 1);
      };
      upstream.once('error', skip);
      upstream.once('connect', () => {
        clearTimeout(timer);
        upstream.off('error', skip);
        sockets.add(upstream);
        connections.set(target.port, (connections.get(target.port) ?? 0) + 1);
        const close = () => { client.destroy(); upstream.destroy(); sockets.delete(upstream); };
        upstream.on('error', close).on('close', close);
        client.on('close', close);
        client.pipe(upstream).pipe(client);
        client.resume();
      });
    };
    attempt(0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    connections,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
