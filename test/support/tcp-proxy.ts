// A TCP pass-through whose `cut()` drops every connection and refuses new
// ones: how tests make a dependency unreachable mid-run. `refuseNew(true)`
// drops only new connections while the established ones carry on: a client
// that loses one connection cannot reconnect until `refuseNew(false)`;
// `drop()` ends the established ones.
import net from 'node:net';

export interface TcpProxy {
  port: number;
  cut(): Promise<void>;
  refuseNew(refuse: boolean): void;
  /** Drops every established connection; new ones are accepted unless refuseNew(true). */
  drop(): void;
  /** Stops (true) or resumes (false) carrying bytes on every connection, without closing any: a peer that went silent. */
  freeze(frozen: boolean): void;
  /** Stops (true) or resumes (false) carrying the target's bytes to the client only: what the client sends still arrives, answers are lost. */
  freezeDownstream(frozen: boolean): void;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let refusing = false;
  let frozen = false;
  let downFrozen = false;
  const pairs = new Set<[net.Socket, net.Socket]>();
  const server = net.createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    sockets.add(client).add(upstream);
    pairs.add([client, upstream]);
    if (!frozen) {
      client.pipe(upstream);
      if (!downFrozen) upstream.pipe(client);
    }
    const close = () => { client.destroy(); upstream.destroy(); sockets.delete(client); sockets.delete(upstream); pairs.forEach((p) => p[0] === client && pairs.delete(p)); };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    refuseNew(refuse: boolean) {
      refusing = refuse;
    },
    drop() {
      for (const socket of sockets) socket.destroy();
    },
    freeze(value: boolean) {
      if (frozen === value) return;
      frozen = value;
      // Unpiped, a socket stops reading (its bytes wait in the kernel); piped again, they flow on.
      for (const [client, upstream] of pairs) {
        if (value) { client.unpipe(upstream); upstream.unpipe(client); } else client.pipe(upstream).pipe(client);
      }
    },
    freezeDownstream(value: boolean) {
      if (downFrozen === value) return;
      downFrozen = value;
      for (const [client, upstream] of pairs) {
        if (value) upstream.unpipe(client);
        else upstream.pipe(client);
      }
    },
    async cut() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
