// Outgoing mail: SMTP when SMTP_URL is set, otherwise the outbox folder.
import path from 'node:path';
import type { Transporter } from 'nodemailer';
import { writeOutboxMessage } from './outbox.ts';

export type MailMessage = { to: string; subject: string; text: string; html?: string };

/** The subset of pino used here. Never given bodies, links or tokens. */
export type MailLogger = {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
};

export type MailerOptions = {
  /** From header, e.g. `"Streaming Platform" <no-reply@example.com>`. */
  from: string;
  /** smtp:// or smtps:// URL; when absent, messages go to `outboxDir`. */
  smtpUrl?: string | undefined;
  outboxDir?: string | undefined;
  logger?: MailLogger;
};

export type SendResult = { messageId: string };

const HEADER_SAFE = /^[^\r\n]*$/;
// One plain address: no display names, lists or header tricks in `to`.
const ADDRESS = /^[^\s@<>,;"]+@[^\s@<>,;"]+\.[^\s@<>,;"]+$/;

function recipientDomain(to: string): string {
  return to.slice(to.lastIndexOf('@') + 1).toLowerCase();
}

export class Mailer {
  readonly transport: 'smtp' | 'outbox';
  readonly outboxDir: string | undefined;
  #from: string;
  #logger: MailLogger | undefined;
  #smtpUrl: string | undefined;
  /** Made with the first message: nodemailer is loaded then (most processes never send one). */
  #transport: Promise<Transporter> | undefined;
  #smtp: Transporter | undefined;

  constructor(opts: MailerOptions) {
    if (!HEADER_SAFE.test(opts.from)) throw new TypeError('invalid from address');
    this.#from = opts.from;
    this.#logger = opts.logger;
    if (opts.smtpUrl) {
      const url = new URL(opts.smtpUrl);
      if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') throw new TypeError('SMTP_URL must be smtp:// or smtps://');
      this.transport = 'smtp';
      this.#smtpUrl = opts.smtpUrl;
    } else {
      if (!opts.outboxDir) throw new TypeError('outboxDir is required without an SMTP URL');
      this.transport = 'outbox';
      this.outboxDir = opts.outboxDir;
    }
  }

  /**
   * SMTP (nodemailer's own logger stays off: its debug output contains message bodies), or a transport that
   * builds the raw message for the outbox and never sends anything. A failed load is tried again next time.
   */
  #transporter(): Promise<Transporter> {
    this.#transport ??= import('nodemailer').then(({ default: mail }) => {
      if (this.#smtpUrl) return (this.#smtp = mail.createTransport(this.#smtpUrl));
      return mail.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
    }, (error: unknown) => {
      this.#transport = undefined;
      throw error;
    });
    return this.#transport;
  }

  async send(msg: MailMessage): Promise<SendResult> {
    if (!ADDRESS.test(msg.to)) throw new TypeError('invalid recipient address');
    if (!HEADER_SAFE.test(msg.subject)) throw new TypeError('subject must be a single line');
    const mail = { from: this.#from, to: msg.to, subject: msg.subject, text: msg.text, html: msg.html };
    const log = { transport: this.transport, to_domain: recipientDomain(msg.to) };
    try {
      let messageId: string;
      const transport = await this.#transporter();
      if (this.transport === 'smtp') {
        messageId = (await transport.sendMail(mail)).messageId;
      } else {
        const info = await transport.sendMail(mail);
        messageId = info.messageId;
        await writeOutboxMessage(this.outboxDir!, info.message as Buffer, {
          messageId,
          to: msg.to,
          subject: msg.subject,
          text: msg.text,
        });
      }
      this.#logger?.info({ ...log, message_id: messageId }, 'mail sent');
      return { messageId };
    } catch (err) {
      // The error's message may quote the SMTP conversation; log only its code.
      this.#logger?.error({ ...log, err_code: (err as { code?: string }).code ?? 'unknown' }, 'mail send failed');
      throw err;
    }
  }

  close(): void {
    this.#smtp?.close();
  }
}

/** The mailer from the environment: SMTP_URL, else DATA_DIR/outbox. */
export function createMailer(opts: {
  smtpUrl?: string | undefined;
  dataDir: string;
  from: string;
  logger?: MailLogger;
}): Mailer {
  return new Mailer({
    from: opts.from,
    smtpUrl: opts.smtpUrl || undefined,
    outboxDir: path.join(opts.dataDir, 'outbox'),
    ...(opts.logger ? { logger: opts.logger } : {}),
  });
}
