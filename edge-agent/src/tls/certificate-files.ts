// The default certificate's files (TLS_CERT_FILE, TLS_KEY_FILE): read at start
// (a failure stops the process), and again on reload() (SIGHUP) or when their
// size or modification time changes (checked every 30 s: renewal tools replace
// them). A pair that does not load is logged and the previous one keeps serving.
import { readFileSync, statSync } from 'node:fs';
import type { Logger } from 'pino';
import { readCertificateFiles, type DefaultCertificate } from './certificates.ts';

const CHECK_EVERY_MS = 30_000;

export class CertificateFiles {
  private readonly cert: string;
  private readonly key: string;
  private readonly onLoad: (cert: DefaultCertificate) => void;
  private readonly logger: Logger;
  private stamp = '';
  private timer: NodeJS.Timeout | null = null;

  constructor(files: { cert: string; key: string }, onLoad: (cert: DefaultCertificate) => void, logger: Logger) {
    this.cert = files.cert;
    this.key = files.key;
    this.onLoad = onLoad;
    this.logger = logger;
  }

  private stampNow(): string {
    return [this.cert, this.key].map((f) => {
      const st = statSync(f, { throwIfNoEntry: false });
      return st === undefined ? '-' : `${st.mtimeMs}:${st.size}`;
    }).join('|');
  }

  /** Reads the pair now; throws why it cannot serve. Then watches the files for changes. */
  load(): DefaultCertificate {
    const stamp = this.stampNow();
    const cert = readCertificateFiles(this.cert, this.key, (f) => readFileSync(f, 'utf8'));
    this.stamp = stamp;
    this.onLoad(cert);
    this.logger.info({ fingerprint: cert.fingerprint, subject_alt_names: cert.x509.subjectAltName ?? null, valid_to: cert.x509.validTo }, 'default certificate loaded');
    if (this.timer === null) {
      this.timer = setInterval(() => { if (this.stampNow() !== this.stamp) this.reload(); }, CHECK_EVERY_MS);
      this.timer.unref();
    }
    return cert;
  }

  /** Reads the pair again (SIGHUP); a failure is logged and changes nothing. */
  reload(): void {
    try {
      this.load();
    } catch (err) {
      this.logger.error({ err: (err as Error).message }, 'reading the default certificate failed; the previous one keeps serving');
    }
  }
}
