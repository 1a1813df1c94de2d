// The whole system as separate processes (issue 26 item 4): one control-plane
// process on PostgreSQL and Redis, three edge-agent processes connected to
// it over the control channel, and an origin. A user signs up, verifies the
// address from the e-mail, subscribes to a plan and pays with a card; an
// admin builds an endpoint through the API (origin, route, cache rule,
// response-headers policy, signing key with token authentication),
// publishes, and viewers' signed requests flow through every agent; a purge
// lands on all three; a signing-key rotation keeps links signed with the old
// secret working through its grace period, and the agents refuse them once
// their clock has passed its end (the agents' wall clock is moved two hours
// on: test/support/clock-shift.ts) while the new secret's links still work.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { clockShiftEnv, setClockOffset } from '../support/clock-shift.ts';
import { startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { detectServices } from '../support/services.ts';
import { publishAndWait, signUpAndSubscribe, versionedOrigin } from '../support/system.ts';

const services = await detectServices();
if (!(services.postgresUrl && services.redisUrl)) {
  t.pass('skipped: needs PostgreSQL and Redis');
} else {
  const { postgresUrl, redisUrl } = services;
  await t.test('the whole system', { timeout: 180_000 }, (t) => wholeSystem(t, postgresUrl, redisUrl));
}

async function wholeSystem(t: Test, postgresUrl: string, redisUrl: string) {
  const dir = mkdtempSync(join(tmpdir(), 'sp-system-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const clockFile = join(dir, 'agents-clock-offset');
  setClockOffset(clockFile, 0);

  const origin = await versionedOrigin(t);
  const deployment = await startDeployment(t, { postgresUrl, env: { REDIS_URL: redisUrl, DATA_DIR: join(dir, 'control-plane') } });
  const agents = await Promise.all(['edge-1', 'edge-2', 'edge-3'].map((name) => startEdgeAgent(t, deployment, deployment.grpcPort, name, clockShiftEnv(clockFile))));
  await eventually(async () => (await deployment.must('GET', '/v1/cdn/edge-nodes?status=online')).data.length === 3, 'three agents online');

  await t.test('a user signs up, verifies the address, subscribes and pays', async (t) => {
    const account = await signUpAndSubscribe(deployment, join(dir, 'control-plane', 'outbox'));
    t.equal(account.subscription.status, 'active', 'the subscription is active');
    t.match(account.invoices, [{ status: 'paid', billing_reason: 'subscription_create', amount_paid: 9.99, currency: 'EUR' }], 'its first invoice is paid with the card');
    t.equal(account.me.email_verified, true, 'the address is verified');
  });

  // The endpoint as an admin builds it through the API.
  const o = await deployment.must('POST', '/v1/cdn/origins', { name: 'media origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 });
  const endpoint = await deployment.must('POST', '/v1/cdn/endpoints', { name: 'media', default_origin_id: o.id }) as { id: string; hostname: string };
  const route = await deployment.must('POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: 'videos', origin_id: o.id, match: { paths: ['/videos/*'] } });
  const rule = await deployment.must('POST', `/v1/cdn/distributions/${endpoint.id}/cache-rules`, { name: 'videos for ten minutes', match: { paths: ['/videos/*'] }, ttl_seconds: 600 });
  const policy = await deployment.must('POST', `/v1/cdn/distributions/${endpoint.id}/response-headers-policies`, {
    name: 'media headers', custom_response_headers: [{ name: 'X-Served-By', value: 'system-test' }],
    security_headers: { x_content_type_options: { enabled: true } },
  });
  const key = await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/signing-keys`, { name: 'player' });
  await deployment.must('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { token_auth_enabled: true });
  const firstSecret = key.secret as string;
  t.ok(route.id && rule.id && policy.id && key.id, 'origin, route, cache rule, header policy and signing key made through the API');
  await publishAndWait(deployment, 'media endpoint', 3);

  // Links valid for two days of the agents' clock (which the rotation test moves two hours on).
  const link = (path: string, secret: string) => signPath({ path, expires: Math.floor(Date.now() / 1000) + 2 * 86_400, secret });

  await t.test('traffic flows through every agent: the route to the origin, the cache rule\'s TTL, the header policy, signed URLs only', async (t) => {
    for (const [i, agent] of agents.entries()) {
      const path = `/videos/${i}.mp4`;
      const first = await viewerGet(agent.port, endpoint.hostname, link(path, firstSecret));
      t.equal(first.status, 200, `edge-${i + 1}: served`);
      t.equal(first.body, `${path} v1`, 'the origin\'s content');
      t.equal(first.headers['x-served-by'], 'system-test', 'the header policy\'s custom header');
      t.equal(first.headers['x-content-type-options'], 'nosniff', 'and its security header');
      const second = await viewerGet(agent.port, endpoint.hostname, link(path, firstSecret));
      t.equal(second.headers['x-cache-status'], 'HIT', 'the second request is a hit');
      t.match(second.headers['cache-status'], /ttl=(5\d\d|600)\b/, 'cached for the cache rule\'s 600 s (the origin gives no freshness)');
      t.equal((await viewerGet(agent.port, endpoint.hostname, path)).status, 403, 'an unsigned URL is refused');
    }
    t.equal(origin.asked(`/videos/0.mp4`), 1, 'the origin saw each object once per agent that asked');
  });

  await t.test('a purge lands on all three agents', async (t) => {
    for (const agent of agents) await viewerGet(agent.port, endpoint.hostname, link('/videos/shared.mp4', firstSecret));
    for (const agent of agents) t.equal((await viewerGet(agent.port, endpoint.hostname, link('/videos/shared.mp4', firstSecret))).headers['x-cache-status'], 'HIT', 'cached on each');
    origin.bump();
    const purge = await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/videos/shared.mp4'] });
    t.equal(purge.edge_nodes_total, 3, 'aimed at the three nodes');
    await eventually(async () => (await deployment.must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', 'the purge completed');
    t.match(await deployment.must('GET', `/v1/cdn/purge/${purge.id}`), { edge_nodes_completed: 3 });
    for (const [i, agent] of agents.entries()) {
      t.equal((await viewerGet(agent.port, endpoint.hostname, link('/videos/shared.mp4', firstSecret))).body, '/videos/shared.mp4 v2', `edge-${i + 1} serves the new content`);
    }
  });

  await t.test('a rotation: the old secret works through the grace period and is refused after it; the new one keeps working', async (t) => {
    const rotated = await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/signing-keys/${key.id}/rotate`, { grace_period_hours: 1 });
    const newSecret = rotated.secret as string;
    t.not(newSecret, firstSecret);
    t.ok(rotated.grace_period_ends_at, 'the reply says when the grace period ends');
    await publishAndWait(deployment, 'rotation', 3);
    const oldLink = link('/videos/rotated.mp4', firstSecret);
    const newLink = link('/videos/rotated.mp4', newSecret);
    for (const [i, agent] of agents.entries()) {
      t.equal((await viewerGet(agent.port, endpoint.hostname, oldLink)).status, 200, `edge-${i + 1}: the old secret, inside the grace period`);
      t.equal((await viewerGet(agent.port, endpoint.hostname, newLink)).status, 200, `edge-${i + 1}: the new secret`);
    }
    // An hour and a half later for the agents: past the end of the grace period.
    setClockOffset(clockFile, 90 * 60_000);
    for (const [i, agent] of agents.entries()) {
      await eventually(async () => (await viewerGet(agent.port, endpoint.hostname, oldLink)).status === 403, `edge-${i + 1} refuses the old secret after the grace period`);
      t.pass(`edge-${i + 1}: the old secret is refused after the grace period`);
      const fresh = await viewerGet(agent.port, endpoint.hostname, newLink);
      t.equal(fresh.status, 200, `edge-${i + 1}: the new secret still works`);
    }
  });
}
