// Prefetch: warming the cache by requesting each URL through the agent's own
// listener, so a prefetch follows exactly the viewer path (routing, rules,
// collapsing, slices), four at a time.
import type { AddressInfo } from 'node:net';
import { Agent as UndiciAgent } from 'undici';

export interface PrefetchResult {
  fetched: number;
  failed: number;
  failed_urls: { url: string; reason: string }[];
}

export interface PrefetcherOptions {
  /** The hostname viewers use for an endpoint of the configuration in force (undefined: not one). */
  hostnameOf: (endpointId: string) => string | undefined;
  /** The agent's own listener to send the requests to (null: it does not listen yet). */
  address: () => AddressInfo | null;
}

const PREFETCH_CONCURRENCY = 4;

export class Prefetcher {
  readonly #o: PrefetcherOptions;
  #client: UndiciAgent | null = null;

  constructor(options: PrefetcherOptions) {
    this.#o = options;
  }

  /** URLs may be absolute (their host is ignored) or paths. */
  async prefetch(endpointId: string, urls: readonly string[]): Promise<PrefetchResult> {
    const host = this.#o.hostnameOf(endpointId);
    const address = this.#o.address();
    if (host === undefined || !address) {
      const reason = host === undefined ? 'unknown endpoint' : 'agent is not listening';
      return { fetched: 0, failed: urls.length, failed_urls: urls.map((url) => ({ url, reason })) };
    }
    this.#client ??= new UndiciAgent({ connections: PREFETCH_CONCURRENCY });
    const client = this.#client;
    const origin = `http://${address.family === 'IPv6' ? '[::1]' : '127.0.0.1'}:${address.port}`;
    const result: PrefetchResult = { fetched: 0, failed: 0, failed_urls: [] };
    const fail = (url: string, reason: string) => {
      result.failed++;
      result.failed_urls.push({ url, reason });
    };
    let next = 0;
    const worker = async () => {
      while (next < urls.length) {
        const url = urls[next++];
        let path: string;
        try {
          const u = new URL(url, `http://${host}`);
          path = u.pathname + u.search;
        } catch {
          fail(url, 'invalid URL');
          continue;
        }
        try {
          const res = await client.request({ origin, path, method: 'GET', headers: { host, 'user-agent': 'edge-agent-prefetch/1' } });
          await res.body.dump();
          if (res.statusCode < 400) result.fetched++;
          else fail(url, `status ${res.statusCode}`);
        } catch (err) {
          fail(url, (err as Error).message);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PREFETCH_CONCURRENCY, urls.length) }, worker));
    return result;
  }

  async close(): Promise<void> {
    await this.#client?.close().catch(() => {});
  }
}
