// Helpers for the CDN policy contract tests: the rows of every CDN table
// (working configuration and policies) to show a refused request changed nothing.
import type { TestControlPlane } from './control-plane.ts';
import { query } from './auth.ts';
import { cdnState } from './cdn.ts';
import { createLogger } from '../../control-plane/src/http/logger.ts';

export async function policiesState(cp: TestControlPlane) {
  const rows = async (table: string) => query(cp, `select * from ${table} order by id`);
  return {
    ...(await cdnState(cp)),
    header_policies: await rows('cdn_response_headers_policy'), signing_keys: await rows('cdn_signing_key'), ip_rules: await rows('cdn_ip_rule'),
    log_drains: await rows('cdn_log_drain'),
  };
}

/** A logger at the most verbose level whose lines the test reads (the product's redaction rules apply). */
export function collectingLogger() {
  const lines: string[] = [];
  const log = createLogger('trace', 'control-plane', { write: (line: string) => { lines.push(line); } });
  return { log, lines };
}
