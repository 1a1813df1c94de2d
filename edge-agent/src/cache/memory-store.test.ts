// The worker's hot tier passes the store conformance suite.
import t from 'tap';
import { MemoryStore } from './memory-store.ts';
import { storeConformance } from './store-conformance.ts';

storeConformance(t, async (maxBytes) => new MemoryStore(maxBytes));
