// The edge-certificate command, run by `npm start` (scripts/dev.ts) through the
// running control plane's command socket: the internal CA (certificate-issuer.ts,
// the one that issues managed certificates offline) issues the edge agents'
// default certificate, the wildcard `*.<CDN_DOMAIN>` (and `<CDN_DOMAIN>`
// itself), valid 90 days. Development only: in production the operator gives
// the agents the zone's wildcard from a public CA as files (TLS_CERT_FILE,
// TLS_KEY_FILE). Prints one JSON line {certificate_pem (leaf and CA),
// private_key_pem, ca_pem, expires_at, fingerprint}, for the caller only: the
// command channel never logs what a command prints.
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { systemContext } from '../core/request-context.ts';
import { CommandError, defineCommand } from '../db/command-channel.ts';
import { createLogger } from '../http/logger.ts';
import { issueFromInternalCa } from './certificate-issuer.ts';

export const edgeCertificateCommand = defineCommand({
  name: 'cdn:edge-certificate',
  args: z.strictObject({}),
  async run({ db, io, services }) {
    if (!services) throw new CommandError('needs the platform services (run it through runCommand)');
    const zone = services.config.CDN_DOMAIN;
    const rc = systemContext({ db, log: createLogger('silent') }, { requestId: `cli-${randomUUID()}` });
    const issued = await issueFromInternalCa(rc, await services.secretBox(), [`*.${zone}`, zone], new Date());
    io.out(JSON.stringify({
      certificate_pem: issued.chainPem, private_key_pem: issued.keyPem, ca_pem: issued.caPem,
      expires_at: issued.expiresAt.toISOString(), fingerprint: issued.fingerprint,
    }));
  },
});
