// The edge agent of the log-drain benchmark: the cache-hit benchmark's
// configuration plus two endpoints like bench.local whose access records go to
// one ndjson http drain each at the receiver: logged.local with the spec's
// sample fields (timestamp, client_ip, method, url, status, bytes_sent,
// cache_status, edge_node), full.local with every field.
import { EdgeAgent } from '../../edge-agent/src/agent.ts';
import { benchSnapshot } from './edge-bench-config.ts';

const [port, originPort, receiverPort, dataDir] = [Number(process.argv[2]), Number(process.argv[3]), Number(process.argv[4]), process.argv[5]];
const snapshot = benchSnapshot(originPort) as { endpoints: unknown[]; log_drains?: unknown[] };
const drain = (n: number, endpoint: string, fields: string[]) => ({
  id: `6f1c0000-0000-4000-8000-00000000000${n}`, name: endpoint, destination_type: 'http', log_format: 'ndjson', fields, endpoint_ids: [endpoint],
  destination_config: { url: `http://127.0.0.1:${receiverPort}/ingest`, allow_private_network: true },
});
for (const id of ['logged', 'full']) {
  snapshot.endpoints.push({ id, hostname: `${id}.local`, default_origin_id: `o-${id}`, origins: [{ id: `o-${id}`, scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true }] });
}
snapshot.log_drains = [drain(1, 'logged', ['timestamp', 'client_ip', 'method', 'url', 'status', 'bytes_sent', 'cache_status', 'edge_node']), drain(2, 'full', [])];
const agent = new EdgeAgent({ dataDir, memoryBytes: 256 * 1024 * 1024, maxObjectBytes: 32 * 1024 * 1024, persist: false, healthProbes: false, nodeName: 'bench-edge' });
agent.applyConfig(snapshot);
await agent.listen(port, '127.0.0.1');
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
