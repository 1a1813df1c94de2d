// LISTEN on a PostgreSQL notification channel over a connection of its own
// (a pooled connection cannot hold a LISTEN: it goes back to the pool). The
// listener says when it is live — subscribed and answering — and when it is
// not: notifications sent while it was down are lost, so whoever mirrors
// state from it must distrust the mirror until it is live again.
//
// Liveness is checked, not assumed: a connection whose peer vanished without
// a FIN looks open for as long as TCP keepalive takes, and behind a pooler in
// transaction mode (PgBouncer) LISTEN succeeds yet nothing is ever delivered.
// So every `probeMs` the listener notifies its own channel with a fresh probe
// payload and must receive it back before the statement's answer, within a
// timeout; on a miss it starts over. A probe that came back also proves every
// notification committed before it has been received (PostgreSQL delivers a
// session's pending notifications before it answers). Probe payloads
// (`probe:` + a nonce) are not passed on; other replicas ignore them too.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';

export interface ListenerHandlers {
  /** A notification's payload, probes excepted (notifications of one transaction arrive once per distinct payload). */
  message(payload: string): void;
  /** Live: subscribed and answering. Called on every change, first with true once subscribed. */
  state(live: boolean): void;
}

export interface ListenerOptions {
  /** Wait between attempts after a failure (default 1 s). */
  retryMs?: number;
  /** Connect and probe timeout (default 3 s). */
  timeoutMs?: number;
  /** How often the connection is probed (default 3 s: a connection lost without a word is noticed within 6 s). */
  probeMs?: number;
  log?: Logger;
}

export interface ChannelListener {
  readonly live: boolean;
  close(): Promise<void>;
}

const CHANNEL_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
const PROBE = 'probe:';

/** Listens on `channel` at `url` until closed, reconnecting after failures. Resolves once the first attempt has ended (live or not). */
export async function listen(url: string, channel: string, handlers: ListenerHandlers, options: ListenerOptions = {}): Promise<ChannelListener> {
  if (!CHANNEL_NAME.test(channel)) throw new Error(`not a channel name: ${channel}`);
  const retryMs = options.retryMs ?? 1_000;
  const timeoutMs = options.timeoutMs ?? 3_000;
  const probeMs = options.probeMs ?? 3_000;
  let client: pg.Client | undefined;
  let live = false;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let probe: NodeJS.Timeout | undefined;

  const setLive = (value: boolean) => {
    if (live === value) return;
    live = value;
    handlers.state(value);
  };
  /** Drops the connection (if it is still the current one) and tries again later. */
  const fail = (failed: pg.Client, error?: Error) => {
    if (failed !== client) return;
    client = undefined;
    clearInterval(probe);
    setLive(false);
    failed.removeAllListeners('notification');
    failed.on('error', () => {});
    failed.end().catch(() => {});
    if (closed) return;
    if (error) options.log?.warn({ err: error, channel }, 'database notification listener lost; retrying');
    retry = setTimeout(() => void attempt(), retryMs);
    retry.unref();
  };
  const attempt = async () => {
    const current = new pg.Client({
      connectionString: url, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs, keepAlive: true, application_name: `listen:${channel}`,
    });
    client = current;
    current.on('error', (error) => fail(current, error));
    current.on('end', () => fail(current, new Error('connection ended')));
    let echoed: string | undefined;
    current.on('notification', (n) => {
      if (n.channel !== channel) return;
      const payload = n.payload ?? '';
      if (payload.startsWith(PROBE)) echoed = payload;
      else handlers.message(payload);
    });
    /** Notifies the channel and checks the notification came back before the answer. */
    const probeOnce = async () => {
      const payload = PROBE + randomUUID();
      await current.query('select pg_notify($1, $2)', [channel, payload]);
      if (echoed !== payload) throw new Error('a notification sent on the listening connection did not come back');
    };
    try {
      await current.connect();
      await current.query(`listen ${channel}`);
      await probeOnce();
    } catch (error) {
      fail(current, error as Error);
      return;
    }
    if (current !== client || closed) return;
    setLive(true);
    let probing = false;
    probe = setInterval(() => {
      if (probing) return;
      probing = true;
      probeOnce().catch((error: Error) => fail(current, error)).finally(() => { probing = false; });
    }, probeMs);
    probe.unref();
  };

  await attempt();
  return {
    get live() {
      return live;
    },
    async close() {
      closed = true;
      clearTimeout(retry);
      clearInterval(probe);
      const current = client;
      client = undefined;
      setLive(false);
      if (current) {
        current.removeAllListeners('notification');
        current.on('error', () => {});
        await current.end().catch(() => {});
      }
    },
  };
}
