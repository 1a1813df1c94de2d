// The audit trail: who, what, why, what changed (secrets masked) and from
// where, committed in one transaction with the change it records.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createAdmin, createLoggedInUser, query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { inTransaction, systemContext } from '../core/request-context.ts';
import { changesOf, MASKED, recordAudit } from './audit.ts';

t.test('changesOf lists changed fields only, old → new, and masks secrets', async (t) => {
  const changes = changesOf(
    { display_name: 'Ada', phone: null, password_hash: 'old-hash', api_token: 'a', roles: ['subscriber'], at: new Date('2026-01-01T00:00:00Z') },
    { display_name: 'Ada L', phone: null, password_hash: 'new-hash', api_token: 'b', roles: ['subscriber', 'admin'], at: new Date('2026-01-01T00:00:00Z') },
  );
  t.same(changes, {
    display_name: { from: 'Ada', to: 'Ada L' },
    password_hash: { from: MASKED, to: MASKED },
    api_token: { from: MASKED, to: MASKED },
    roles: { from: ['subscriber'], to: ['subscriber', 'admin'] },
  });
});

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const entries = (resourceId: string) =>
  query<{ action: string; actor_id: string | null; actor_type: string; actor_role: string | null; ip_address: string | null; user_agent: string | null; request_id: string | null; metadata: Record<string, any> }>(
    cp, 'select action, actor_id, actor_type, actor_role, ip_address, user_agent, request_id, metadata from audit_log where resource_id = ? order by created_at', [resourceId]);

t.test('an audited API operation records actor, role, reason, changes and origin', async (t) => {
  const admin = await createAdmin(cp);
  const target = await createLoggedInUser(cp);
  const res = await cp.request('POST', `/v1/admin/users/${target.id}/suspend`, {
    headers: bearer(admin.accessToken, { 'user-agent': 'audit-test/1.0', 'x-request-id': 'audit-req-1' }),
    json: { reason: 'Chargeback fraud', notify_user: false },
  });
  t.equal(res.status, 200);
  const [entry] = await entries(target.id);
  t.match(entry, {
    action: 'user.suspended', actor_id: admin.id, actor_type: 'user', actor_role: 'admin',
    user_agent: 'audit-test/1.0', request_id: 'audit-req-1',
    metadata: { reason: 'Chargeback fraud', changes: { status: { from: 'active', to: 'suspended' } }, notify_user: false },
  });
  t.match(entry!.ip_address, /127\.0\.0\.1/);
});

t.test('secrets in metadata are masked at any depth', async (t) => {
  const rc = systemContext(cp.app);
  const id = crypto.randomUUID();
  recordAudit(rc, { action: 'test.secret', resource_type: 'test', resource_id: id, metadata: { token: 'cdn_live_secret', nested: { client_secret: 's3cr3t', kept: 'visible' } } });
  await rc.em.flush();
  const [entry] = await entries(id);
  t.same(entry!.metadata, { token: MASKED, nested: { client_secret: MASKED, kept: 'visible' } });
  t.equal(entry!.actor_type, 'system');
  t.equal(entry!.actor_id, null);
});

t.test('the entry commits with its change, or not at all', async (t) => {
  const user = await createLoggedInUser(cp);
  const rc = systemContext(cp.app);
  await t.rejects(inTransaction(rc, async (tx) => {
    await tx.em.execute(`update app_user set display_name = 'Changed' where id = ?`, [user.id]);
    recordAudit(tx, { action: 'user.updated', resource_type: 'user', resource_id: user.id });
    await tx.em.flush();
    throw new Error('the change fails after the entry was written');
  }));
  t.same(await entries(user.id), [], 'no entry without its change');
  t.not((await query<{ display_name: string }>(cp, 'select display_name from app_user where id = ?', [user.id]))[0]!.display_name, 'Changed', 'no change either');

  await inTransaction(systemContext(cp.app), async (tx) => {
    await tx.em.execute(`update app_user set display_name = 'Changed' where id = ?`, [user.id]);
    recordAudit(tx, { action: 'user.updated', resource_type: 'user', resource_id: user.id, changes: { display_name: { from: null, to: 'Changed' } } });
  });
  t.equal((await entries(user.id)).length, 1, 'committed together');
});
