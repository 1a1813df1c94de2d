// Machine API tokens (`Bearer cdn_...`) go through the same guard as JWTs:
// the CDN module registers a resolver, and the token's role is evaluated
// against the stored role permissions like any other caller's.
import t from 'tap';
import { z } from 'zod';
import { data, routesFor } from '../http/route.ts';
import type { Permission } from '../permissions/catalog.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import type { TokenAccessControl } from './access-control.ts';

const probe = (permission: Permission) => routesFor()({
  method: 'post', path: `/v1/test/${permission.replace(/\./g, '-')}`, summary: `Needs ${permission}`, tags: ['test'],
  access: { permission }, responses: { 200: data(z.object({ caller: z.string() })) },
  async handler({ rc }) {
    return { caller: `${rc.actor!.type}:${rc.actor!.id}` };
  },
});

const cp = await startTestControlPlane(t, { extraRoutes: [probe('cdn.read'), probe('cdn.write')] });
const tokens: Record<string, string> = { cdn_viewer_token: 'viewer', cdn_admin_token: 'admin' };
(cp.access as TokenAccessControl).apiTokenResolver = async (_em, token) =>
  tokens[token] ? { type: 'api_token', id: `tok-${tokens[token]}`, roles: [tokens[token]] } : null;

const call = (path: string, token: string) => cp.request('POST', path, { headers: { authorization: `Bearer ${token}` } });

t.test('a viewer token reads but may not write', async (t) => {
  const read = await call('/v1/test/cdn-read', 'cdn_viewer_token');
  t.equal(read.status, 200);
  t.equal(read.body.data.caller, 'api_token:tok-viewer');
  const write = await call('/v1/test/cdn-write', 'cdn_viewer_token');
  t.equal(write.status, 403);
  t.equal(write.body.code, 'FORBIDDEN');
});

t.test('an admin token writes', async (t) => {
  t.equal((await call('/v1/test/cdn-write', 'cdn_admin_token')).status, 200);
});

t.test('an unknown or revoked token is 401', async (t) => {
  const res = await call('/v1/test/cdn-read', 'cdn_unknown');
  t.equal(res.status, 401);
  t.equal(res.body.code, 'UNAUTHORIZED');
});
