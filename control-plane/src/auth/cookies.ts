// The refresh-token cookie (DESIGN.md §5): HttpOnly, SameSite=Strict, scoped
// to /v1/auth, Secure unless the control plane runs on plain-HTTP development.
import type { Context } from 'koa';
import type { Config } from '../config/config.ts';
import { SESSION_LIFETIME_MS } from './session-service.ts';

export const REFRESH_COOKIE = 'refresh_token';
const PATH = '/v1/auth';

/** Whether auth cookies carry Secure: in production, or whenever the public URL is https. */
export function secureCookies(config: Config): boolean {
  return config.NODE_ENV === 'production' || config.publicUrl.startsWith('https:');
}

export function setRefreshCookie(ctx: Context, config: Config, token: string): void {
  const attributes = [`${REFRESH_COOKIE}=${token}`, `Path=${PATH}`, `Max-Age=${Math.floor(SESSION_LIFETIME_MS / 1000)}`, 'HttpOnly', 'SameSite=Strict'];
  if (secureCookies(config)) attributes.push('Secure');
  ctx.append('set-cookie', attributes.join('; '));
}

export function clearRefreshCookie(ctx: Context, config: Config): void {
  const attributes = [`${REFRESH_COOKIE}=`, `Path=${PATH}`, 'Max-Age=0', 'Expires=Thu, 01 Jan 1970 00:00:00 GMT', 'HttpOnly', 'SameSite=Strict'];
  if (secureCookies(config)) attributes.push('Secure');
  ctx.append('set-cookie', attributes.join('; '));
}

/** The value of a request cookie (the first of that name), or undefined. */
export function readCookie(ctx: Context, name: string): string | undefined {
  const header = ctx.get('cookie');
  for (const part of header.split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=') || undefined;
  }
  return undefined;
}

export function readRefreshCookie(ctx: Context): string | undefined {
  return readCookie(ctx, REFRESH_COOKIE);
}
