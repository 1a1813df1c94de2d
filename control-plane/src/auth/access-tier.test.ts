// The tier the guard reports for a request (rc.access), which services use
// for ownership: document 1 §4.0.6 lets a holder of a global permission act on
// anyone's resources.
import t from 'tap';
import { z } from 'zod';
import { data, routesFor } from '../http/route.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createAdmin, createLoggedInUser } from '../../../test/support/auth.ts';

const probe = routesFor()({
  method: 'get', path: '/v1/test/access-tier', summary: 'Reports rc.access', tags: ['test'],
  access: { permission: 'payment_methods.read', resourceType: 'user' }, responses: { 200: data(z.object({ access: z.string() })) },
  async handler({ rc }) {
    return { access: String(rc.access) };
  },
});

const cp = await startTestControlPlane(t, { extraRoutes: [probe] });

t.test('an admin who also holds subscriber is reported global, though the user-scoped grant matches first (it was reported type-scoped, so ownership checks never let admins through)', async (t) => {
  const admin = await createAdmin(cp); // roles admin + subscriber, as every admin here
  const res = await cp.request('GET', '/v1/test/access-tier', { headers: bearer(admin.accessToken) });
  t.equal(res.status, 200);
  t.equal(res.body.data.access, 'global');
});

t.test('a subscriber stays type-scoped', async (t) => {
  const subscriber = await createLoggedInUser(cp);
  const res = await cp.request('GET', '/v1/test/access-tier', { headers: bearer(subscriber.accessToken) });
  t.equal(res.body.data.access, 'type');
});
