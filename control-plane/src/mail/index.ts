export * from './mailer.ts';
export * from './outbox.ts';
export * from './templates.ts';
