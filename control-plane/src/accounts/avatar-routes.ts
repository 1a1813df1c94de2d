// Avatar upload for the current user and the public avatar files (document 1
// §4.1; DESIGN.md §6 `PUT /v1/users/me/avatar`).
import { z } from 'zod';
import type { CoreServices } from '../core/services.ts';
import { notFound } from '../http/errors.ts';
import { binary, data, reply, routesFor } from '../http/route.ts';
import { AVATAR_MAX_BYTES, AVATAR_MAX_SIDE } from './avatar-image.ts';
import { AVATAR_FILE_NAME, readAvatar, uploadAvatar } from './avatar-service.ts';
import { userResource, withRoles } from './user-record.ts';
import { currentUser } from './user-service.ts';

const defineRoute = routesFor<CoreServices>();

export const uploadAvatarRoute = defineRoute({
  method: 'put', path: '/v1/users/me/avatar', tags: ['Account'],
  access: { permission: 'users.update', resourceType: 'user' },
  summary: 'Upload the current user\'s avatar',
  description: `multipart/form-data with one file field \`file\`: a JPEG or PNG image of at most ${AVATAR_MAX_BYTES} bytes. `
    + 'The bytes decide the type; a file whose name or declared type says otherwise is refused (400), other content is 415, a larger file 413. '
    + `The image is re-encoded without metadata, upright, within ${AVATAR_MAX_SIDE}×${AVATAR_MAX_SIDE}, and \`avatar_url\` points at it. On any refusal the previous avatar stays.`,
  multipart: {
    maxFileBytes: AVATAR_MAX_BYTES,
    files: { file: { required: true, mediaTypes: ['image/jpeg', 'image/png'], description: 'A JPEG or PNG image.' } },
  },
  ifMatch: ({ rc }) => currentUser(rc),
  responses: { 200: data(userResource) },
  async handler({ files, rc, app }) {
    return withRoles(await uploadAvatar(app, rc, files.file!), rc.actor!.roles);
  },
});

export const readAvatarRoute = defineRoute({
  method: 'get', path: '/v1/avatars/:file', tags: ['Account'],
  access: 'public',
  summary: 'An avatar image (the avatar_url of a User)',
  description: 'Public and immutable: a new avatar gets a new URL.',
  params: z.strictObject({ file: z.string().regex(AVATAR_FILE_NAME, 'Must be an avatar file name') }),
  responses: { 200: binary(['image/jpeg', 'image/png']) },
  async handler({ params, app }) {
    const avatar = await readAvatar(app, params.file);
    if (!avatar) throw notFound('Avatar');
    return reply.with(200, avatar, {
      'cache-control': 'public, max-age=31536000, immutable',
      // Shown by front ends on other origins (APP_URL) as <img>.
      'cross-origin-resource-policy': 'cross-origin',
    });
  },
});

export const avatarRoutes = [uploadAvatarRoute, readAvatarRoute];
