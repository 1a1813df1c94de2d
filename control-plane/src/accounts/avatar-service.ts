// The current user's avatar (document 1 §4.1): stored re-encoded under
// DATA_DIR/avatars/ with a random name, served from a stable public URL
// (/v1/avatars/<name>) that the User record carries as avatar_url. A new
// avatar gets a new name, so each URL is immutable and cacheable for good.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { CoreServices } from '../core/services.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { UploadedFile } from '../http/route.ts';
import { AVATAR_FORMATS, reencodeAvatar, type AvatarImage } from './avatar-image.ts';
import { currentUser } from './user-service.ts';
import type { User } from './user.entity.ts';

/** Names the avatar store hands out: 128 random bits and the format; nothing else is ever read or deleted. */
export const AVATAR_FILE_NAME = /^[0-9a-f]{32}\.(jpg|png)$/;

export const avatarDir = (dataDir: string) => path.join(dataDir, 'avatars');

export function avatarUrl(publicUrl: string, name: string): string {
  return `${publicUrl}/v1/avatars/${name}`;
}

/** The stored file name behind an avatar_url of ours, if it is one. */
export function avatarFileName(url: string | null | undefined): string | undefined {
  if (!url) return undefined;
  const name = url.slice(url.lastIndexOf('/') + 1);
  return AVATAR_FILE_NAME.test(name) ? name : undefined;
}

/** Writes the image under a new random name (complete or not at all: written aside, then renamed). */
async function storeAvatar(dataDir: string, image: AvatarImage): Promise<string> {
  const dir = avatarDir(dataDir);
  await fs.mkdir(dir, { recursive: true });
  const name = `${randomBytes(16).toString('hex')}.${AVATAR_FORMATS[image.format].extension}`;
  const partial = path.join(dir, `.${name}.partial`);
  await fs.writeFile(partial, image.bytes, { mode: 0o644 });
  await fs.rename(partial, path.join(dir, name));
  return name;
}

/** Deletes an avatar file of ours (a missing one is fine). */
export async function removeAvatar(dataDir: string, name: string): Promise<void> {
  if (!AVATAR_FILE_NAME.test(name)) return;
  await fs.rm(path.join(avatarDir(dataDir), name), { force: true });
}

/**
 * Replaces the caller's avatar. The upload is checked and re-encoded first
 * (a refused file changes nothing); the new file is stored before the record
 * points at it, and the old one is removed only once the record no longer does.
 */
export async function uploadAvatar(app: CoreServices, rc: RequestContext, file: UploadedFile): Promise<User> {
  const image = await reencodeAvatar(file);
  const user = await currentUser(rc);
  const previous = avatarFileName(user.avatar_url);
  const name = await storeAvatar(app.config.dataDir, image);
  user.avatar_url = avatarUrl(app.config.publicUrl, name);
  try {
    await rc.em.flush();
  } catch (error) {
    await removeAvatar(app.config.dataDir, name);
    throw error;
  }
  if (previous && previous !== name) {
    await removeAvatar(app.config.dataDir, previous).catch((error: unknown) => rc.log.warn({ err: error, file: previous }, 'removing the previous avatar failed'));
  }
  return user;
}

/** An avatar's bytes and media type, or undefined when there is no such file. */
export async function readAvatar(app: CoreServices, name: string): Promise<{ contentType: string; body: Buffer } | undefined> {
  if (!AVATAR_FILE_NAME.test(name)) return undefined;
  try {
    const body = await fs.readFile(path.join(avatarDir(app.config.dataDir), name));
    return { contentType: name.endsWith('.png') ? AVATAR_FORMATS.png.mime : AVATAR_FORMATS.jpeg.mime, body };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}
