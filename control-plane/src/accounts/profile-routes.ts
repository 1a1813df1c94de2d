// Viewing profiles of the current user (document 1 §4.2). The PIN check that
// issues profile tokens (verify-pin) is auth's, which holds the signing keys.
import { z } from 'zod';
import { profileTokenHeader } from '../http/headers.ts';
import { data, empty, list, reply } from '../http/route.ts';
import { uuid } from '../http/schemas.ts';
import { profileBody, profileResource } from './profile-record.ts';
import { createProfile, deleteProfile, findProfile, listProfiles, updateProfile } from './profile-service.ts';
import { defineAccountsRoute as defineRoute } from './services.ts';

const tags = ['Profiles'];
const profileParams = z.strictObject({ profile_id: uuid() });
const lockRule = 'A PIN-protected profile is changed or deleted only with its profile token (from verify-pin, in this session) in X-Profile-Token: '
  + 'without one the answer is 403 PROFILE_TOKEN_REQUIRED. An administrator acting on another user\'s profile needs none.';

export const listProfilesRoute = defineRoute({
  method: 'get', path: '/v1/users/me/profiles', tags,
  access: { permission: 'profiles.read', resourceType: 'user' },
  summary: 'List my profiles',
  description: 'Not paged (a plan allows at most 6). The primary profile comes first, then the others in creation order.',
  responses: { 200: list(profileResource) },
  async handler({ rc }) {
    return listProfiles(rc);
  },
});

export const createProfileRoute = defineRoute({
  method: 'post', path: '/v1/users/me/profiles', tags,
  access: { permission: 'profiles.write', resourceType: 'user' },
  summary: 'Create a profile',
  description: 'Refused with 409 PROFILE_LIMIT_REACHED once the account holds as many profiles as its plan allows: the highest max_profiles '
    + 'of its live subscriptions (trialing, active, past_due, paused), 1 without any. The primary profile counts. '
    + 'A pin (4 to 6 digits) locks the profile; it is stored hashed and never returned (pin_protected shows it).',
  body: profileBody,
  responses: { 201: data(profileResource) },
  errors: ['PROFILE_LIMIT_REACHED'],
  async handler({ body, rc, app }) {
    const profile = await createProfile(app, rc, body);
    return reply.created(profile, `/v1/users/me/profiles/${profile.id}`);
  },
});

export const readProfileRoute = defineRoute({
  method: 'get', path: '/v1/users/me/profiles/:profile_id', tags,
  access: { permission: 'profiles.read', resourceType: 'user' },
  summary: 'Read a profile', params: profileParams,
  responses: { 200: data(profileResource) },
  async handler({ params, rc }) {
    return findProfile(rc, params.profile_id);
  },
});

export const updateProfileRoute = defineRoute({
  method: 'put', path: '/v1/users/me/profiles/:profile_id', tags,
  access: { permission: 'profiles.write', resourceType: 'user' },
  summary: 'Update a profile',
  description: 'The same body as create; name is required. Fields left out keep their stored values; null clears avatar_preset_id or language, '
    + 'and `pin: null` removes the PIN. is_primary cannot be changed. ' + lockRule,
  params: profileParams,
  body: profileBody,
  headers: [profileTokenHeader],
  ifMatch: ({ params, rc }) => findProfile(rc, params.profile_id),
  responses: { 200: data(profileResource) },
  errors: ['PROFILE_TOKEN_REQUIRED'],
  async handler({ params, body, rc, app }) {
    return updateProfile(app, rc, params.profile_id, body);
  },
});

export const deleteProfileRoute = defineRoute({
  method: 'delete', path: '/v1/users/me/profiles/:profile_id', tags,
  access: { permission: 'profiles.write', resourceType: 'user' },
  summary: 'Delete a profile',
  description: 'Removes the profile with its watchlist and viewing progress. The primary profile cannot be deleted (409 PRIMARY_PROFILE). ' + lockRule,
  params: profileParams,
  headers: [profileTokenHeader],
  responses: { 204: empty },
  errors: ['PRIMARY_PROFILE', 'PROFILE_TOKEN_REQUIRED'],
  async handler({ params, rc, app }) {
    await deleteProfile(app, rc, params.profile_id);
    return reply.noContent();
  },
});

export const profileRoutes = [listProfilesRoute, createProfileRoute, readProfileRoute, updateProfileRoute, deleteProfileRoute];
