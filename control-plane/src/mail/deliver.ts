// Sending from a request: a mail outage must not fail the operation that
// triggered the message (the user can ask again: resend, forgot password),
// so failures are logged rather than thrown.
import type { Logger } from 'pino';
import type { EmailContent } from './templates.ts';
import type { Mailer } from './mailer.ts';

export async function deliver(services: { mailer: Mailer; log: Logger }, to: string, content: EmailContent): Promise<void> {
  try {
    await services.mailer.send({ to, ...content });
  } catch (error) {
    services.log.error({ err: error, subject: content.subject }, 'sending e-mail failed');
  }
}
