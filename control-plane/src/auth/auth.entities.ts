import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';

/** A login: one refresh-token family. Revoking it ends the refresh chain and its access tokens. */
export const SessionSchema = defineEntity({
  name: 'Session',
  tableName: 'auth_session',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    device_type: p.string().length(30),
    platform: p.string().length(50).nullable(),
    ip_address_hint: p.string().length(64).nullable(),
    user_agent: p.string().length(512).nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    last_active_at: p.datetime().onCreate(() => new Date()),
    expires_at: p.datetime(),
    revoked_at: p.datetime().nullable(),
    revoked_reason: p.string().length(50).nullable(),
  },
  indexes: [{ name: 'auth_session_user_idx', properties: ['user'] }],
});
export class Session extends SessionSchema.class {}
SessionSchema.setClass(Session);

/** Each refresh token ever issued, by hash: single use, and reuse of a spent one is detected. */
export const RefreshTokenSchema = defineEntity({
  name: 'RefreshToken',
  tableName: 'auth_refresh_token',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    session: () => p.manyToOne(Session).deleteRule('cascade'),
    token_hash: p.string().length(128).unique('auth_refresh_token_hash_key'),
    created_at: p.datetime().onCreate(() => new Date()),
    expires_at: p.datetime(),
    used_at: p.datetime().nullable(),
  },
  indexes: [{ name: 'auth_refresh_token_session_idx', properties: ['session'] }],
});
export class RefreshToken extends RefreshTokenSchema.class {}
RefreshTokenSchema.setClass(RefreshToken);

export const ONE_TIME_TOKEN_PURPOSES = ['email_verification', 'password_reset', 'invitation'] as const;
export type OneTimeTokenPurpose = (typeof ONE_TIME_TOKEN_PURPOSES)[number];

/** E-mailed single-use tokens (verification, reset, invitation), stored by hash. */
export const OneTimeTokenSchema = defineEntity({
  name: 'OneTimeToken',
  tableName: 'auth_one_time_token',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    purpose: p.enum(ONE_TIME_TOKEN_PURPOSES),
    token_hash: p.string().length(128).unique('auth_one_time_token_hash_key'),
    created_at: p.datetime().onCreate(() => new Date()),
    expires_at: p.datetime(),
    used_at: p.datetime().nullable(),
  },
  indexes: [{ name: 'auth_one_time_token_user_idx', properties: ['user', 'purpose'] }],
});
export class OneTimeToken extends OneTimeTokenSchema.class {}
OneTimeTokenSchema.setClass(OneTimeToken);

export const RecoveryCodeSchema = defineEntity({
  name: 'RecoveryCode',
  tableName: 'auth_recovery_code',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    code_hash: p.string().length(128),
    // Last two characters, to tell codes apart when listing them (the plaintext is never stored).
    hint: p.string().length(4),
    created_at: p.datetime().onCreate(() => new Date()),
    used_at: p.datetime().nullable(),
  },
  indexes: [{ name: 'auth_recovery_code_user_idx', properties: ['user'] }],
});
export class RecoveryCode extends RecoveryCodeSchema.class {}
RecoveryCodeSchema.setClass(RecoveryCode);

/** Access-token signing keys (primitives/signing-keys.ts StoredSigningKey), sealed with the secret box. */
export const JwtSigningKeySchema = defineEntity({
  name: 'JwtSigningKey',
  tableName: 'auth_jwt_signing_key',
  properties: {
    kid: p.string().length(64).primary(),
    status: p.enum(['active', 'retiring', 'retired'] as const),
    sealed_key: p.text().hidden(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
});
export class JwtSigningKey extends JwtSigningKeySchema.class {}
JwtSigningKeySchema.setClass(JwtSigningKey);
