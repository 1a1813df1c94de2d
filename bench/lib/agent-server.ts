// The edge agent as the benchmark runs it: one process, cache in memory, logging
// off, the endpoints of edge-bench-config.ts; with an HTTPS port and a
// certificate, its HTTPS listener too (HTTP/1.1 and HTTP/2 by ALPN).
// Run: node bench/lib/agent-server.ts <port> <origin port> <data dir> [<https port> <cert file> <key file>]
import { readFileSync } from 'node:fs';
import { EdgeAgent } from '../../edge-agent/src/agent.ts';
import { readCertificateFiles } from '../../edge-agent/src/tls/certificates.ts';
import { benchSnapshot } from './edge-bench-config.ts';

const [port, originPort, dataDir, httpsPort, certFile, keyFile] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4], process.argv[5], process.argv[6], process.argv[7]];
const agent = new EdgeAgent({ dataDir, memoryBytes: 256 * 1024 * 1024, maxObjectBytes: 32 * 1024 * 1024, persist: false, healthProbes: false });
agent.applyConfig(benchSnapshot(originPort));
await agent.listen(port, '127.0.0.1');
if (httpsPort !== undefined && certFile !== undefined && keyFile !== undefined) {
  agent.setDefaultCertificate(readCertificateFiles(certFile, keyFile, (f) => readFileSync(f, 'utf8')));
  await agent.listenHttps(Number(httpsPort), '127.0.0.1');
}
// Exit normally on a signal so --cpu-prof can write its profile.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
