// E-mail templates: plain text plus simple HTML, as pure functions.
export type EmailContent = { subject: string; text: string; html: string };

export type TemplateContext = {
  /** Base of every link (may carry a path prefix): APP_URL when a front end is configured, else PUBLIC_URL, where the control plane serves its own pages (config.linkBaseUrl). */
  publicUrl: string;
  productName?: string;
};

const DEFAULT_PRODUCT = 'Streaming Platform';

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** PUBLIC_URL + path + query, keeping any path prefix of PUBLIC_URL; tokens are URL-encoded. */
export function appLink(publicUrl: string, pathname: string, query: Record<string, string> = {}): string {
  const base = new URL(publicUrl);
  if (base.protocol !== 'https:' && base.protocol !== 'http:') throw new TypeError('PUBLIC_URL must be http(s)');
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  const url = new URL(pathname.replace(/^\/+/, ''), base);
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
  return url.toString();
}

function greeting(name: string | undefined): string {
  return name ? `Hello ${name},` : 'Hello,';
}

/** Text and HTML from the same paragraphs; one optional call-to-action link. */
function render(
  subject: string,
  paragraphs: string[],
  action?: { label: string; url: string },
  footer?: string,
): EmailContent {
  const [first, ...rest] = paragraphs;
  const textParts = [first!, ...(action ? [`${action.label}: ${action.url}`] : []), ...rest];
  if (footer) textParts.push(`--\n${footer}`);
  const p = (s: string) => `<p>${escapeHtml(s).replace(/\n/g, '<br>')}</p>`;
  const button = action
    ? `<p><a href="${escapeHtml(action.url)}">${escapeHtml(action.label)}</a></p>\n<p style="font-size:12px;color:#666">If the link does not work, copy this address into your browser:<br>${escapeHtml(action.url)}</p>`
    : '';
  const html = [
    '<!doctype html>',
    `<html><head><meta charset="utf-8"><title>${escapeHtml(subject)}</title></head>`,
    '<body style="font-family:sans-serif;line-height:1.5">',
    p(first!),
    button,
    ...rest.map(p),
    footer ? `<hr><p style="font-size:12px;color:#666">${escapeHtml(footer)}</p>` : '',
    '</body></html>',
  ]
    .filter(Boolean)
    .join('\n');
  return { subject, text: textParts.join('\n\n') + '\n', html };
}

/** What the owner of an address who did not sign up should do, in the mails of a registration (no link: the verification link stays the message's only one). */
const NOT_YOU_BEFORE_CONFIRMING = 'If you did not create this account, do not confirm it: whoever did chose its password. '
  + 'If you already confirmed it, reset the password ("Forgot your password?" on the sign-in page): that signs out every session and makes the account yours.';

/**
 * The verification link. `repeated`: sent again because someone registered an
 * address already awaiting verification, which changed nothing.
 */
export function verificationEmail(ctx: TemplateContext & { token: string; displayName?: string; repeated?: boolean }): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  return render(
    `Confirm your e-mail address for ${product}`,
    [
      `${greeting(ctx.displayName)}\n\nPlease confirm your e-mail address to finish setting up your ${product} account.`,
      ...(ctx.repeated
        ? ['Someone registered this address again. It already has an account waiting for this confirmation, so nothing new was created: '
          + 'the account keeps the password chosen when the address was first registered.']
        : []),
      NOT_YOU_BEFORE_CONFIRMING,
    ],
    { label: 'Confirm e-mail address', url: appLink(ctx.publicUrl, '/verify-email', { token: ctx.token }) },
    product,
  );
}

/** Sent once an address is confirmed: what to do if the owner did not sign up, and that every earlier session ended. */
export function addressConfirmedNotice(ctx: TemplateContext & { displayName?: string }): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  return render(
    `Your e-mail address for ${product} is confirmed`,
    [
      `${greeting(ctx.displayName)}\n\nYour e-mail address is confirmed and your ${product} account is active.\n\n`
        + 'If you did not create this account, someone else chose its password and can sign in with it. '
        + 'Reset the password now: that signs out every session, and only your new password works from then on.',
      `Every session opened before the confirmation was signed out: sign in again at ${appLink(ctx.publicUrl, '/login')}.`,
    ],
    { label: 'Reset the password', url: appLink(ctx.publicUrl, '/forgot-password') },
    product,
  );
}

export function passwordResetEmail(
  ctx: TemplateContext & { token: string; expiresInMinutes?: number; displayName?: string },
): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  const minutes = ctx.expiresInMinutes ?? 15;
  return render(
    `Reset your ${product} password`,
    [
      `${greeting(ctx.displayName)}\n\nWe received a request to reset your password. The link works once and expires in ${minutes} minutes.`,
      'Resetting your password signs you out on every device.',
      'If you did not ask for this, ignore this message: your password stays unchanged.',
    ],
    { label: 'Choose a new password', url: appLink(ctx.publicUrl, '/reset-password', { token: ctx.token }) },
    product,
  );
}

export function suspensionNotice(
  ctx: Omit<TemplateContext, 'publicUrl'> & { reason: string; displayName?: string; supportAddress?: string },
): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  return render(
    `Your ${product} account has been suspended`,
    [
      `${greeting(ctx.displayName)}\n\nYour ${product} account has been suspended. You cannot sign in or stream until it is reinstated.`,
      `Reason: ${ctx.reason}`,
      ctx.supportAddress
        ? `If you believe this is a mistake, contact ${ctx.supportAddress}.`
        : 'If you believe this is a mistake, reply to this message.',
    ],
    undefined,
    product,
  );
}

/** A notification sent by e-mail as well (notify()): its title as the subject and its text, without a link. */
export function notificationEmail(ctx: Omit<TemplateContext, 'publicUrl'> & { title: string; body: string; displayName?: string }): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  return render(ctx.title, [`${greeting(ctx.displayName)}\n\n${ctx.body}`], undefined, product);
}

export function cdnAdminInvitation(
  ctx: TemplateContext & { token: string; role: string; invitedBy?: string; expiresInHours?: number },
): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  const by = ctx.invitedBy ? `${ctx.invitedBy} has invited you` : 'You have been invited';
  return render(
    `You are invited to the ${product} CDN console`,
    [
      `Hello,\n\n${by} to manage the ${product} CDN with the role "${ctx.role}".`,
      `Set your password to activate the account. The link works once${ctx.expiresInHours ? ` and expires in ${ctx.expiresInHours} hours` : ''}.`,
      'If you did not expect this invitation, ignore this message.',
    ],
    { label: 'Set your password', url: appLink(ctx.publicUrl, '/accept-invitation', { token: ctx.token }) },
    product,
  );
}

export function dataExportReady(
  ctx: Omit<TemplateContext, 'publicUrl'> & { downloadUrl: string; expiresInHours?: number; displayName?: string },
): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  const hours = ctx.expiresInHours ?? 24;
  if (!/^https?:\/\//.test(ctx.downloadUrl)) throw new TypeError('downloadUrl must be an absolute http(s) URL');
  return render(
    `Your ${product} data export is ready`,
    [
      `${greeting(ctx.displayName)}\n\nThe copy of your data you asked for is ready.`,
      `The download link expires in ${hours} hours. After that, request a new export from your account settings.`,
      'If you did not request this export, change your password and contact support.',
    ],
    { label: 'Download your data', url: ctx.downloadUrl },
    product,
  );
}

/** Sent to the owner of an address when someone registers with it (no enumeration: the API answers as for a new address). */
export function registrationAttemptNotice(ctx: TemplateContext): EmailContent {
  const product = ctx.productName ?? DEFAULT_PRODUCT;
  return render(
    `Someone tried to create a ${product} account with your address`,
    [
      `Hello,\n\nSomeone just tried to create a new ${product} account with this e-mail address. You already have an account, so nothing was created.`,
      `If it was you, sign in at ${appLink(ctx.publicUrl, '/login')} instead.`,
      'If it was not you, you can ignore this message; your account is unchanged.',
    ],
    { label: 'Forgot your password? Reset it', url: appLink(ctx.publicUrl, '/forgot-password') },
    product,
  );
}
