// The edge agent as the benchmark runs it: one process, cache in memory, logging
// off, the endpoints of edge-bench-config.ts.
import { EdgeAgent } from '../../edge-agent/src/agent.ts';
import { benchSnapshot } from './edge-bench-config.ts';

const [port, originPort, dataDir] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]];
const agent = new EdgeAgent({ dataDir, memoryBytes: 256 * 1024 * 1024, maxObjectBytes: 32 * 1024 * 1024, persist: false, healthProbes: false });
agent.applyConfig(benchSnapshot(originPort));
await agent.listen(port, '127.0.0.1');
// Exit normally on a signal so --cpu-prof can write its profile.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
