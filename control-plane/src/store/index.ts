import { MemoryStore } from './memory-store.ts';
import { RedisStore } from './redis-store.ts';
import type { KeyValueStore } from './store.ts';

export type { KeyValueStore } from './store.ts';

export function createStore(redisUrl: string | undefined, keyPrefix = ''): KeyValueStore {
  return redisUrl ? new RedisStore(redisUrl, { keyPrefix }) : new MemoryStore();
}

/** The key and channel prefix of a deployment's namespace (db/deployment.ts). */
export function namespacePrefix(namespace: string): string {
  return `${namespace}:`;
}
