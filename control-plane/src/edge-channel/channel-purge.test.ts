// Purge and prefetch fan-out through the real channel (DESIGN.md §5, §7;
// issue 12 item 5): purges submitted through the API reach every online agent
// (one encoding for all), in sequence order; status pending → in_progress →
// completed or failed from the agents' acks, a node online when it was stored
// that goes offline keeps it in progress until it applies it or times out; an agent that reconnects gets every purge it missed, in
// order, before live ones (pages beyond one database read included); prefetch
// jobs go to the nodes that hold the endpoint and their counts come from the
// agents' answers.
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { RELAXED_LIMITS, query } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { ChannelWriter, TestConfigSource, agentConnector, announceConfig, endpointResource, testTokens, type TestAgent } from '../../../test/support/edge-channel.ts';
import { PurgeType, type Purge } from '../../../shared/gen/edge/v1/control_pb.ts';
import { PURGE_SUBMITTED_CHANNEL } from '../cdn/index.ts';
import { executeBound } from '../db/bulk.ts';
import { purgeAckRetentionJob } from './channel-jobs.ts';
import { announcedPurge } from './channel-purge-feed.ts';
import { PURGE_PAGE, PURGE_REPLAY_LIMIT, PurgeRing as PurgeFeed, evaluatePurges, failLatePurges, recordPurgeAcks } from './channel-purges.ts';
import { NO_TARGET_REASON } from './channel-prefetch.ts';
import type { AgentStream } from './channel-stream.ts';

const source = new TestConfigSource();
const cp = await startTestControlPlane(t, {
  env: { ...RELAXED_LIMITS, CDN_PUBLISH_MODE: 'manual', CDN_DOMAIN: 'edge.example.net' },
  services: { edgeConfig: source, edgeAgentTokens: testTokens({ agt_good: randomUUID() }) },
});
const port = cp.app.edgeChannel!.port;
const hub = cp.app.edgeChannel!.hub;
await hub.subscribed;
const send = caller(cp);
const { admin, operator } = await cdnCallers(cp);
const { endpoint } = await makeEndpoint(cp, admin);
const { connect, agents } = agentConnector(t, port, 'agt_good');
const purgeRow = async (id: string) => (await query<Record<string, any>>(cp, `select * from cdn_purge_request where id = ?`, [id]))[0]!;
const submit = async (body: Record<string, unknown> = { purge_type: 'path', paths: ['/videos/a.mp4'] }) => {
  const res = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, body);
  if (res.status !== 202) throw new Error(`purge: ${res.status} ${res.text}`);
  return res.body as { id: string; sequence: number };
};
const apiPurge = async (id: string) => (await send(operator, 'GET', `/v1/cdn/purge/${id}`)).body;
const nodeSequence = async (id: string) => Number((await query<{ s: string }>(cp, `select purge_sequence as s from cdn_edge_node where id = ?`, [id]))[0]!.s);

let a: TestAgent;
let b: TestAgent;

t.test('a purge reaches every online agent, encoded once; pending → in_progress at the first ack → completed when every online node acked', async (t) => {
  ({ agent: a } = await connect({ hostname: 'edge-a' }));
  ({ agent: b } = await connect({ hostname: 'edge-b' }));
  const submitted = await submit({ purge_type: 'wildcard', paths: ['/videos/*'] });
  const [toA, toB] = await Promise.all([a.next('purge'), b.next('purge')]);
  for (const purge of [toA, toB]) {
    t.match(purge, { sequence: BigInt(submitted.sequence), purgeId: submitted.id, endpointId: endpoint.id, type: PurgeType.WILDCARD, paths: ['/videos/*'], tags: [] });
  }
  t.equal(toA.nonce, toB.nonce, 'the same encoded message for both');
  await eventually(async () => (await purgeRow(submitted.id)).edge_nodes_total === 2, 'edge_nodes_total = the online nodes at fan-out');
  t.equal((await apiPurge(submitted.id)).status, 'pending', 'pending until the first ack');

  a.ackPurge(toA);
  await eventually(async () => (await apiPurge(submitted.id)).status === 'in_progress', 'in_progress');
  t.match(await apiPurge(submitted.id), { edge_nodes_total: 2, edge_nodes_completed: 1, completed_at: null });
  b.ackPurge(toB);
  await eventually(async () => (await apiPurge(submitted.id)).status === 'completed', 'completed');
  const done = await apiPurge(submitted.id);
  t.match(done, { edge_nodes_total: 2, edge_nodes_completed: 2 });
  t.ok(done.completed_at);
  const acks = await query<{ node_id: string; ok: boolean }>(cp, `select node_id, ok from cdn_purge_ack where purge_id = ? order by node_id`, [submitted.id]);
  t.same(acks.map((r) => r.node_id).sort(), [a.nodeId, b.nodeId].sort());
  await eventually(async () => (await nodeSequence(a.nodeId)) === submitted.sequence, 'the node\'s purge_sequence follows its acks');
});

t.test('a node reporting a failure fails the purge (with completed_at); its error is kept per node', async (t) => {
  const submitted = await submit();
  const [toA, toB] = await Promise.all([a.next('purge'), b.next('purge')]);
  a.ackPurge(toA);
  b.ackPurge(toB, false, 'cache index\u0007 unavailable');
  await eventually(async () => (await apiPurge(submitted.id)).status === 'failed', 'failed');
  const failed = await apiPurge(submitted.id);
  t.match(failed, { edge_nodes_total: 2, edge_nodes_completed: 1 });
  t.ok(failed.completed_at);
  const [ack] = await query<{ ok: boolean; error: string }>(cp, `select ok, error from cdn_purge_ack where purge_id = ? and node_id = ?`, [submitted.id, b.nodeId]);
  t.same(ack, { ok: false, error: 'cache index  unavailable' });
});

t.test('a purge of every endpoint (top level, no distribution, no URL) reaches the agents with no endpoint named', async (t) => {
  const res = await send(operator, 'POST', '/v1/cdn/cache/purge', { purge_type: 'tag', tags: ['everywhere'] });
  t.equal(res.status, 202, res.text);
  t.equal(res.body.distribution_id, null);
  const [toA, toB] = await Promise.all([a.next('purge'), b.next('purge')]);
  for (const purge of [toA, toB]) t.match(purge, { purgeId: res.body.id, endpointId: '', type: PurgeType.TAG, tags: ['everywhere'] });
  a.ackPurge(toA);
  b.ackPurge(toB);
  await eventually(async () => (await apiPurge(res.body.id)).status === 'completed', 'completed');
});

let missedFrom = 0;
let heldBack = '';

t.test('regression: a node that goes offline before acknowledging keeps the purge in progress (it used to read completed without it)', async (t) => {
  const submitted = await submit();
  heldBack = submitted.id;
  const [toA] = await Promise.all([a.next('purge'), b.next('purge')]);
  missedFrom = await nodeSequence(b.nodeId);
  a.ackPurge(toA);
  await eventually(async () => (await apiPurge(submitted.id)).status === 'in_progress', 'in progress, waiting on B');
  b.close();
  await eventually(async () => (await query<{ s: string }>(cp, `select status as s from cdn_edge_node where id = ?`, [b.nodeId]))[0]!.s === 'offline', 'B offline');
  await hub.flush();
  await hub.poll();
  t.match(await apiPurge(submitted.id), { status: 'in_progress', edge_nodes_total: 2, edge_nodes_completed: 1, completed_at: null }, 'B, online when it was stored, has not applied it');
});

t.test('a target that stays away longer than EDGE_PURGE_TIMEOUT_MS is counted failed, naming why; applying it later completes the purge', async (t) => {
  const em = cp.app.db.orm.em.fork();
  // The timeout as if it had run out: every purge stored before a second from now is late.
  const failed = await failLatePurges(em as never, new Date(Date.now() + 1_000), new Date(), '5 minutes');
  t.same(failed, [heldBack]);
  t.match(await apiPurge(heldBack), { status: 'failed', edge_nodes_completed: 1 });
  t.match(await purgeRow(heldBack), { edge_nodes_failed: 1 });
  t.ok((await apiPurge(heldBack)).completed_at);
  const [ack] = await query<{ ok: boolean; error: string }>(cp, `select ok, error from cdn_purge_ack where purge_id = ? and node_id = ?`, [heldBack, b.nodeId]);
  t.match(ack, { ok: false, error: /^offline since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: did not apply it within 5 minutes$/ });
  t.same(await failLatePurges(em as never, new Date(Date.now() + 1_000), new Date(), '5 minutes'), [], 'recorded once');
});

t.test('purges reach agents in sequence order; a reconnecting agent gets every purge it missed, in order, before live ones', async (t) => {
  const missed = [];
  for (let i = 0; i < 3; i++) missed.push(await submit({ purge_type: 'tag', tags: [`tag-${i}`] }));
  const toA = [await a.next('purge'), await a.next('purge'), await a.next('purge')];
  t.same(toA.map((p) => p.purgeId), missed.map((p) => p.id), 'the live agent got them in order');
  for (const p of toA) a.ackPurge(p);

  const latest = missed[missed.length - 1]!.sequence;
  const { agent: back, welcome } = await connect({ nodeId: b.nodeId, hostname: 'edge-b', purgeSequence: missedFrom });
  b = back;
  t.equal(welcome.purgeSequence, BigInt(latest), 'Welcome names the latest purge: the agent serves no cached object until it has applied it');
  const expected = (await query<{ id: string; sequence: string }>(cp, `select id, sequence from cdn_purge_request where sequence > ? order by sequence`, [missedFrom]));
  const caughtUp: Purge[] = [];
  for (let i = 0; i < expected.length; i++) caughtUp.push(await b.next('purge'));
  t.same(caughtUp.map((p) => p.purgeId), expected.map((r) => r.id), 'every missed purge, in sequence order');
  t.same(b.kinds().slice(0, 1), ['welcome'], 'Welcome first');
  const live = await submit();
  const next = await b.next('purge');
  t.equal(next.purgeId, live.id, 'then live purges');
  for (const p of [...caughtUp, next]) b.ackPurge(p);
  a.ackPurge(await a.next('purge'));
  await eventually(async () => (await apiPurge(live.id)).status === 'completed', 'the live purge completes');
  await eventually(async () => (await apiPurge(heldBack)).status === 'completed', 'the purge B was away for completes once B applied it');
  t.match(await purgeRow(heldBack), { edge_nodes_total: 2, edge_nodes_completed: 2, edge_nodes_failed: 0 });
});

t.test('more purges than one database read: live agents and a fresh agent get them all, in order', async (t) => {
  const before = Number((await query<{ s: string }>(cp, `select coalesce(max(sequence), 0) as s from cdn_purge_request`))[0]!.s);
  const count = PURGE_PAGE * 2 + 37;
  await query(cp, `
    insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, submitted_by, completed_at, created_at, updated_at)
    select gen_random_uuid(), ?, nextval('cdn_purge_sequence'), 'path', jsonb_build_array('/bulk/' || i), '[]'::jsonb, 'pending', 0, 0, null, null, now(), now()
    from generate_series(1, ?) i`, [endpoint.id, count]);
  await cp.app.store.publish(PURGE_SUBMITTED_CHANNEL, JSON.stringify({ sequence: before + count }));
  const sequences: number[] = [];
  for (let i = 0; i < count; i++) sequences.push(Number((await a.next('purge')).sequence));
  t.equal(sequences.length, count);
  t.ok(sequences.every((s, i) => s > before && (i === 0 || s > sequences[i - 1]!)), 'the live agent: all of them, increasing');
  const { agent: fresh } = await connect({ hostname: 'edge-fresh', purgeSequence: 0 });
  const all = (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_purge_request`))[0]!.n;
  const got: number[] = [];
  for (let i = 0; i < all; i++) got.push(Number((await fresh.next('purge')).sequence));
  t.ok(got.every((s, i) => i === 0 || s > got[i - 1]!), 'the fresh agent: every purge since the first, increasing');
  t.equal(got.length, all);
  fresh.close();
  await eventually(async () => (await query<{ s: string }>(cp, `select status as s from cdn_edge_node where id = ?`, [fresh.nodeId]))[0]!.s === 'offline', 'fresh offline');
});

t.test('with no node online a purge stays pending; the first node to connect catches up, acks, and completes it', async (t) => {
  a.close();
  b.close();
  await eventually(async () => (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_edge_node where status <> 'offline'`))[0]!.n === 0, 'no node online');
  const submitted = await submit();
  await hub.poll();
  t.match(await apiPurge(submitted.id), { status: 'pending', edge_nodes_total: 0, edge_nodes_completed: 0 });
  const { agent: c } = await connect({ hostname: 'edge-c', purgeSequence: submitted.sequence - 1 });
  const purge = await c.next('purge');
  t.equal(purge.purgeId, submitted.id);
  c.ackPurge(purge);
  await eventually(async () => (await apiPurge(submitted.id)).status === 'completed', 'completed');
  t.match(await apiPurge(submitted.id), { edge_nodes_total: 1, edge_nodes_completed: 1 });
  // The old purges that were still open complete as well once this node has acknowledged them all.
});

t.test('prefetch: sent to the online nodes holding the endpoint; counts and failed_urls from their answers', async (t) => {
  const v1 = source.publish([endpointResource(endpoint.id)]);
  await announceConfig(cp.app.store, v1);
  const { agent: p } = await connect({ hostname: 'edge-p', configVersion: v1.version });
  const { agent: q } = await connect({ hostname: 'edge-q', configVersion: v1.version });
  const { agent: r } = await connect({ hostname: 'edge-r', configVersion: 0 });
  await r.next('configUpdate'); // not acknowledged: r does not hold the endpoint yet
  const host = endpoint.hostname as string;
  const urls = [`https://${host}/a.mp4`, `https://${host}/b.mp4`, `https://${host}/c.mp4`];
  const job = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls, priority: 'high' })).body;
  const read = async (id = job.id) => (await send(operator, 'GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/${id}`)).body;
  const [toP, toQ] = await Promise.all([p.next('prefetchJob'), q.next('prefetchJob')]);
  t.match(toP, { jobId: job.id, endpointId: endpoint.id, urls, priority: 'high' });
  t.equal(toP.nonce, toQ.nonce, 'one encoding');
  p.ackPrefetch(toP);
  await eventually(async () => (await read()).status === 'in_progress', 'in progress after the first answer');
  q.ackPrefetch(toQ, { failedUrls: [{ url: urls[1]!, reason: 'origin answered 503' }, { url: 'https://elsewhere.example/x', reason: 'not in the job' }] });
  await eventually(async () => (await read()).status === 'completed', 'completed');
  const done = await read();
  t.match(done, { total: 3, fetched: 2, failed: 1, failed_urls: [{ url: urls[1], reason: 'origin answered 503 (node edge-q)' }] });
  t.ok(done.completed_at);
  t.notOk(r.kinds().includes('prefetchJob'), 'a node without the endpoint gets no job');

  const all = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: urls.slice(0, 2) })).body;
  const [allP, allQ] = await Promise.all([p.next('prefetchJob'), q.next('prefetchJob')]);
  p.ackPrefetch(allP, { ok: false, error: 'origin unreachable' });
  q.ackPrefetch(allQ, { ok: false, error: 'origin unreachable' });
  await eventually(async () => (await read(all.id)).status === 'failed', 'failed when every URL failed');
  t.match(await read(all.id), { fetched: 0, failed: 2 });
  t.match((await read(all.id)).failed_urls[0].reason, /origin unreachable \(node edge-p\); origin unreachable \(node edge-q\)/);

  const third = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: urls.slice(0, 1) })).body;
  const [thirdP] = await Promise.all([p.next('prefetchJob'), q.next('prefetchJob')]);
  p.ackPrefetch(thirdP);
  q.close();
  await eventually(async () => (await read(third.id)).status === 'completed', 'a node going offline no longer holds the job back');
  t.match(await read(third.id), { fetched: 1, failed: 0 });
});

t.test('prefetch: a node that reconnects before answering gets the job again, and its answer on the new stream counts', async (t) => {
  const version = source.activeVersion;
  const { agent: s } = await connect({ hostname: 'edge-s', configVersion: version });
  const host = endpoint.hostname as string;
  const job = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: [`https://${host}/again.mp4`] })).body;
  const first = await s.next('prefetchJob');
  t.equal(first.jobId, job.id);
  const { agent: again } = await connect({ nodeId: s.nodeId, hostname: 'edge-s', configVersion: version });
  const resent = await again.next('prefetchJob');
  t.equal(resent.jobId, job.id, 'the job comes again on the new stream');
  again.ackPrefetch(resent);
  const read = async () => (await send(operator, 'GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/${job.id}`)).body;
  // Other nodes still online from earlier tests (edge-p) answer too.
  for (const other of agents.filter((x) => !x.ended && x !== s && x !== again && x.received.some((m) => m.message.case === 'prefetchJob' && m.message.value.jobId === job.id))) {
    other.ackPrefetch((await other.next('prefetchJob')));
  }
  await eventually(async () => (await read()).status === 'completed', 'completed');
  t.match(await read(), { fetched: 1, failed: 0 });
});

t.test('prefetch with no node holding the endpoint waits, then fails naming why', async (t) => {
  const { endpoint: unpublished } = await makeEndpoint(cp, admin);
  const job = (await send(operator, 'POST', `/v1/cdn/endpoints/${unpublished.id}/prefetch`, { urls: [`https://${unpublished.hostname}/x`] })).body;
  await hub.poll();
  const read = async () => (await send(operator, 'GET', `/v1/cdn/endpoints/${unpublished.id}/prefetch/${job.id}`)).body;
  t.equal((await read()).status, 'pending', 'it waits for a node that holds the endpoint');
  await query(cp, `update cdn_prefetch_job set created_at = created_at - interval '2 hours' where id = ?`, [job.id]);
  await hub.poll();
  t.match(await read(), { status: 'failed', fetched: 0, failed: 1, failed_urls: [{ reason: NO_TARGET_REASON }] });
});

t.test('the purge feed takes an announced purge that is next in sequence without reading the database; after a gap it reads', async (t) => {
  let reads = 0;
  const em = () => {
    const fork = cp.app.db.orm.em.fork();
    const execute = fork.execute.bind(fork);
    return Object.assign(fork, { execute: (...args: Parameters<typeof execute>) => { reads++; return execute(...args); } }) as typeof fork;
  };
  const feed = new PurgeFeed(em as never);
  t.equal(feed.offer({ id: randomUUID(), sequence: 1, distribution_id: endpoint.id, purge_type: 'all', paths: [], tags: [] }), null, 'not started: read first');
  await feed.load();
  const start = feed.cursor;
  const readsBefore = reads;
  const next = { id: randomUUID(), sequence: start + 1, distribution_id: endpoint.id, purge_type: 'path' as const, paths: ['/x'], tags: [] };
  const taken = feed.offer(next);
  t.equal(taken?.length, 1);
  t.equal(taken![0]!.sequence, start + 1);
  t.equal(reads, readsBefore, 'no statement');
  t.same(feed.after(start)?.map((p) => p.id), [next.id], 'held in memory for the streams');
  t.same(feed.offer(next), [], 'announced twice (its echo from another replica): nothing new');
  t.equal(feed.offer({ ...next, id: randomUUID(), sequence: start + 3 }), null, 'a gap: purges in between must be read');
  t.equal(reads, readsBefore);
});

t.test('announcedPurge: only a well-formed purge is taken from an announcement', async (t) => {
  const good = { id: randomUUID(), sequence: 7, distribution_id: randomUUID(), purge_type: 'tag', paths: [], tags: ['a'], soft: true };
  t.same(announcedPurge(good), good);
  const { soft: _soft, ...hard } = good;
  t.same(announcedPurge(hard), { ...hard, soft: false }, 'an announcement without soft (an older replica\'s) is a hard purge');
  t.same(announcedPurge({ ...good, soft: 'yes' }), { ...good, soft: false }, 'only soft: true is soft');
  for (const bad of [null, 'x', { ...good, id: 'not-a-uuid' }, { ...good, sequence: 0 }, { ...good, sequence: 1.5 }, { ...good, sequence: '7' },
    { ...good, purge_type: 'everything' }, { ...good, paths: [1] }, { ...good, tags: 'a' }, { ...good, distribution_id: undefined }]) {
    t.equal(announcedPurge(bad), null, JSON.stringify(bad));
  }
});

t.test('regression: two replicas storing the last acks of a purge at the same moment complete it', async (t) => {
  // Each replica's statement reads the acks committed before it started: storing the last two acks at
  // once, neither saw the other's, and the purge stayed in progress until a node went offline.
  const [one, two] = [randomUUID(), randomUUID()];
  for (const [id, replica] of [[one, 'race-replica-1'], [two, 'race-replica-2']] as const) {
    await query(cp, `insert into cdn_edge_node (id, hostname, region, status, agent_version, config_version, purge_sequence, last_seen_at, connected_at,
      replica_id, cache_objects, cache_bytes, created_at, updated_at) values (?, ?, 'test', 'online', 'test', 0, 0, now(), now() - interval '1 second', ?, 0, 0, now(), now())`,
    [id, `race-${replica}`, replica]);
  }
  t.teardown(() => query(cp, `update cdn_edge_node set status = 'offline' where id in (?, ?)`, [one, two]));
  const submitted = await submit();
  const ack = (node_id: string) => ({ purge_id: submitted.id, sequence: submitted.sequence, node_id, ok: true, error: null });
  const others = (await query<{ id: string }>(cp, `select id from cdn_edge_node where status in ('online', 'draining') and id not in (?, ?)`, [one, two])).map((r) => r.id);
  await recordPurgeAcks(cp.app.db.orm.em.fork(), others.map(ack), new Date());
  t.equal((await purgeRow(submitted.id)).status, others.length ? 'in_progress' : 'pending');

  const first = cp.app.db.orm.em.fork();
  await first.begin();
  await recordPurgeAcks(first, [ack(one)], new Date());
  // The second replica's statement starts before the first commits: it waits on the purge's row, then
  // counts from a snapshot without the first ack.
  let settled = false;
  const second = recordPurgeAcks(cp.app.db.orm.em.fork(), [ack(two)], new Date()).finally(() => { settled = true; });
  await eventually(async () => (await query<{ n: number }>(cp, `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%cdn_purge_ack%'`))[0]!.n > 0, 'the second statement waits');
  t.notOk(settled);
  await first.commit();
  await second;
  t.match(await purgeRow(submitted.id), { status: 'completed', edge_nodes_completed: others.length + 2 });
});

t.test('an agent whose cache is empty is sent the purges still open, not the platform\'s history; an agent with a cache gets every purge after its own', async (t) => {
  // Every fresh agent used to be sent every purge ever made, and acked each: 1,000 new agents after 500
  // purges were 500,000 acks to store while the purges of the moment waited behind them.
  await query(cp, `update cdn_purge_request set status = 'completed', completed_at = now() where status in ('pending', 'in_progress')`);
  const insert = async (status: string) => (await query<{ id: string; sequence: string }>(cp,
    `insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, created_at, updated_at, completed_at)
     values (gen_random_uuid(), ?, nextval('cdn_purge_sequence'), 'all', '[]', '[]', ?, 1, 0, now(), now(), ${status === 'completed' ? 'now()' : 'null'})
     returning id, sequence`, [endpoint.id, status]))[0]!;
  const done = await insert('completed');
  const open = await insert('in_progress');
  const after = await insert('completed');
  t.teardown(() => query(cp, `update cdn_purge_request set status = 'completed', completed_at = now() where id = ?`, [open.id]));
  const purgesOf = (agent: TestAgent) => agent.kinds().filter((k) => k === 'purge').length;

  const { agent: empty, welcome } = await connect({ hostname: 'edge-empty', purgeSequence: 0, cacheEmpty: true });
  t.equal(welcome.purgeSequence, BigInt(after.sequence), 'Welcome names the latest purge');
  t.equal((await empty.next('purge')).purgeId, open.id, 'first the oldest purge still open (it can count this node)');
  t.equal((await empty.next('purge')).purgeId, after.id, 'then those after it');
  await new Promise((r) => setTimeout(r, 200));
  t.equal(purgesOf(empty), 2, 'and nothing before it: the finished purges and the rest of the history are not sent');

  const { agent: cached } = await connect({ hostname: 'edge-cached', purgeSequence: Number(done.sequence) - 1 });
  t.same([(await cached.next('purge')).purgeId, (await cached.next('purge')).purgeId, (await cached.next('purge')).purgeId], [done.id, open.id, after.id],
    'an agent holding cached objects gets every purge after its own, finished or not');

  await query(cp, `update cdn_purge_request set status = 'completed', completed_at = now() where id = ?`, [open.id]);
  const { agent: none, welcome: latest } = await connect({ hostname: 'edge-empty-2', purgeSequence: 0, cacheEmpty: true });
  await new Promise((r) => setTimeout(r, 200));
  t.equal(latest.purgeSequence, BigInt(after.sequence));
  t.equal(purgesOf(none), 0, 'with no purge open, an empty agent is sent none');
  for (const agent of [empty, cached, none]) agent.close();
});

t.test('an agent holding a cache that missed more purges than are worth replaying is told to drop its cache and sent the open ones; one that cannot obey gets them all', async (t) => {
  await query(cp, `update cdn_purge_request set status = 'completed', completed_at = now() where status in ('pending', 'in_progress')`);
  const latestBefore = Number((await query<{ s: string }>(cp, `select coalesce(max(sequence), 0) as s from cdn_purge_request`))[0]!.s);
  // PURGE_REPLAY_LIMIT + 5 finished purges, then one still open.
  await query(cp, `
    insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, created_at, updated_at, completed_at)
    select gen_random_uuid(), ?, nextval('cdn_purge_sequence'), 'path', jsonb_build_array('/old/' || i), '[]'::jsonb, 'completed', 1, 1, now(), now(), now()
    from generate_series(1, ?) i`, [endpoint.id, PURGE_REPLAY_LIMIT + 5]);
  const open = (await query<{ id: string; sequence: string }>(cp,
    `insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, created_at, updated_at)
     values (gen_random_uuid(), ?, nextval('cdn_purge_sequence'), 'all', '[]', '[]', 'in_progress', 1, 0, now(), now()) returning id, sequence`, [endpoint.id]))[0]!;
  t.teardown(() => query(cp, `update cdn_purge_request set status = 'completed', completed_at = now() where id = ?`, [open.id]));
  const purgesOf = (agent: TestAgent) => agent.kinds().filter((k) => k === 'purge').length;

  const { agent: away, welcome } = await connect({ hostname: 'edge-away', purgeSequence: latestBefore, acceptsCacheReset: true });
  t.equal(welcome.resetCache, true, 'told to drop its cache');
  t.equal(welcome.purgeSequence, BigInt(open.sequence), 'and to take the latest purge as applied');
  t.equal((await away.next('purge')).purgeId, open.id, 'then sent the purge still open, which must count it');
  await new Promise((r) => setTimeout(r, 200));
  t.equal(purgesOf(away), 1, 'and none of the finished ones');

  const { agent: near, welcome: nearWelcome } = await connect({ hostname: 'edge-near', purgeSequence: Number(open.sequence) - 3, acceptsCacheReset: true });
  t.equal(nearWelcome.resetCache, false, 'an agent a few purges behind replays them');
  t.equal((await near.next('purge')).sequence, BigInt(Number(open.sequence) - 2));

  const { agent: old, welcome: oldWelcome } = await connect({ hostname: 'edge-old', purgeSequence: latestBefore });
  t.equal(oldWelcome.resetCache, false, 'an agent whose Hello does not accept a reset is never told to drop its cache');
  t.equal((await old.next('purge')).sequence, BigInt(latestBefore + 1), 'it is sent every purge it missed, from its own on');
  for (const agent of [away, near, old]) agent.close();
});

/** Two nodes online with no stream (acks recorded directly), offline again after the test; the other online nodes' ids. */
async function syntheticNodes(t: { teardown(fn: () => unknown): void }, prefix: string): Promise<{ one: string; two: string; others: string[] }> {
  const [one, two] = [randomUUID(), randomUUID()];
  for (const id of [one, two]) {
    await query(cp, `insert into cdn_edge_node (id, hostname, region, status, agent_version, config_version, purge_sequence, last_seen_at, connected_at,
      replica_id, cache_objects, cache_bytes, created_at, updated_at)
      values (?, ?, 'test', 'online', 'test', 0, 0, now(), now() - interval '1 second', 'test-replica', 0, 0, now(), now())`,
    [id, `${prefix}-${id.slice(0, 8)}`]);
    // Connected a second ago: online when the test's purges are stored (their targets; the database's clock has microseconds, the API's milliseconds).
  }
  t.teardown(() => query(cp, `update cdn_edge_node set status = 'offline' where id in (?, ?)`, [one, two]));
  const others = (await query<{ id: string }>(cp, `select id from cdn_edge_node where status in ('online', 'draining') and id not in (?, ?)`, [one, two])).map((r) => r.id);
  return { one, two, others };
}

t.test('regression: a flush adds its acks to the purge\'s counts; a repeated ack counts once, a failure that turns ok moves between them', async (t) => {
  // Each flush used to count every stored ack of its purges again: under a backlog one flush read 267,000 acks.
  const { one, two, others } = await syntheticNodes(t, 'counts');
  const submitted = await submit();
  const ack = (node_id: string, ok = true) => ({ purge_id: submitted.id, sequence: submitted.sequence, node_id, ok, error: ok ? null : 'disk full' });
  const record = (acks: ReturnType<typeof ack>[]) => recordPurgeAcks(cp.app.db.orm.em.fork(), acks, new Date());
  await record(others.map((id) => ack(id)));
  await record([ack(one)]);
  await record([ack(one)]);
  t.match(await purgeRow(submitted.id), { status: 'in_progress', edge_nodes_completed: others.length + 1, edge_nodes_failed: 0, completed_at: null }, 'the same ack twice counts once');
  await record([ack(two, false)]);
  const failed = await purgeRow(submitted.id);
  t.match(failed, { status: 'failed', edge_nodes_completed: others.length + 1, edge_nodes_failed: 1, edge_nodes_total: others.length + 2 });
  t.ok(failed.completed_at, 'a failure finishes it');
  await record([ack(two, false)]);
  t.match(await purgeRow(submitted.id), { edge_nodes_failed: 1 }, 'the same failure twice counts once');
  await record([ack(two)]);
  t.match(await purgeRow(submitted.id), { status: 'completed', edge_nodes_completed: others.length + 2, edge_nodes_failed: 0, edge_nodes_total: others.length + 2 },
    'the node that failed then applied it: every online node has, so it is completed');
  t.match(await apiPurge(submitted.id), { status: 'completed', edge_nodes_completed: others.length + 2, edge_nodes_total: others.length + 2 });
});

t.test('the acks of purges finished over an hour ago are deleted by the retention job; their counts stay and later acks are not stored', async (t) => {
  const { one, two } = await syntheticNodes(t, 'retention');
  const insertPurge = async (status: string, finishedAgo: string | null) => (await query<{ id: string; sequence: string }>(cp,
    `insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, created_at, updated_at, completed_at)
     values (gen_random_uuid(), ?, nextval('cdn_purge_sequence'), 'all', '[]', '[]', ?, 2, 2, now(), now(), ${finishedAgo ? `now() - interval '${finishedAgo}'` : 'null'})
     returning id, sequence`, [endpoint.id, status]))[0]!;
  const old = await insertPurge('completed', '2 hours');
  const recent = await insertPurge('completed', '10 minutes');
  const open = await insertPurge('in_progress', null);
  for (const purge of [old, recent, open]) {
    await query(cp, `insert into cdn_purge_ack (purge_id, node_id, ok, acked_at) values (?, ?, true, now()), (?, ?, true, now())`, [purge.id, one, purge.id, two]);
  }
  const acksOf = async (id: string) => (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_purge_ack where purge_id = ?`, [id]))[0]!.n;
  await cp.app.jobs.enqueue(purgeAckRetentionJob, {});
  await cp.app.jobs.runDue();
  t.equal(await acksOf(old.id), 0, 'the purge finished two hours ago: acks deleted');
  t.ok((await purgeRow(old.id)).acks_pruned_at, 'and marked');
  t.equal(await acksOf(recent.id), 2, 'finished ten minutes ago: kept');
  t.equal(await acksOf(open.id), 2, 'still open: kept');
  t.match(await purgeRow(old.id), { status: 'completed', edge_nodes_completed: 2, edge_nodes_total: 2 }, 'the counts stay');

  await recordPurgeAcks(cp.app.db.orm.em.fork(), [{ purge_id: old.id, sequence: Number(old.sequence), node_id: one, ok: false, error: 'late' }], new Date());
  t.equal(await acksOf(old.id), 0, 'a late ack of a pruned purge is not stored');
  t.match(await purgeRow(old.id), { status: 'completed', edge_nodes_completed: 2, edge_nodes_failed: 0 }, 'nor counted');
});

/** A writer on the test control plane's database that records every statement it sends (through em.execute or bound, through the connection's client). */
function recordingWriter(t: Test, ackDelayMs: number, ackMaxDelayMs: number) {
  const statements: string[] = [];
  const em = () => {
    const fork = cp.app.db.orm.em.fork();
    const execute = fork.execute.bind(fork);
    const connection = fork.getConnection();
    const client = connection.getClient();
    const recording = { executeQuery: (query: { sql: string }) => { statements.push(query.sql); return client.executeQuery(query as never); } };
    const recordingConnection = new Proxy(connection, { get: (target, key) => (key === 'getClient' ? () => recording : Reflect.get(target, key)) });
    return Object.assign(fork, {
      execute: (...args: Parameters<typeof execute>) => { statements.push(String(args[0])); return execute(...args); },
      getConnection: () => recordingConnection,
    }) as typeof fork;
  };
  const writer = new ChannelWriter({ em: em as never, clock: { now: () => new Date() } as never, log: pino({ level: 'silent' }), replicaId: 'writer-test', hooks: { configOrFleetChanged: async () => {} }, ackDelayMs, ackMaxDelayMs });
  t.teardown(() => writer.close());
  return { writer, statements, ackStatements: () => statements.filter((s) => s.includes('cdn_purge_ack')).length };
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('the writer: acks arriving closer than the ack delay apart are written together once they pause, at most the longest delay after the first; heartbeats wait for their own flush', async (t) => {
  // Delays twenty times the production ones (ACK_FLUSH_DELAY_MS, ACK_MAX_DELAY_MS), so a busy host's late timers do not split a burst.
  const ackDelayMs = 100;
  const ackMaxDelayMs = 500;
  const { writer, statements, ackStatements } = recordingWriter(t, ackDelayMs, ackMaxDelayMs);
  const stream = { nodeId: randomUUID(), connectedAt: new Date() } as AgentStream;
  const ack = () => writer.purgeAck({ purge_id: randomUUID(), sequence: 1, node_id: stream.nodeId, ok: true, error: null });

  writer.node(stream, { last_seen_at: new Date() }, false);
  for (let i = 0; i < 8; i++) {
    ack();
    await pause(2);
  }
  await eventually(async () => ackStatements() > 0, 'the burst is written');
  await pause(ackDelayMs * 2);
  t.equal(ackStatements(), 1, 'a burst of acks 2 ms apart: one statement');
  t.notOk(statements.some((s) => s.includes('last_seen_at')), 'the heartbeat did not ride with the acks');

  statements.length = 0;
  const started = Date.now();
  while (Date.now() - started < ackMaxDelayMs * 3) {
    ack();
    await pause(5);
  }
  await pause(ackDelayMs * 2);
  t.ok(ackStatements() >= 2 && ackStatements() <= 5, `acks that never pause are still written, about every ${ackMaxDelayMs} ms (${ackStatements()} statements over ${ackMaxDelayMs * 3} ms)`);

  await writer.flush();
  t.ok(statements.some((s) => s.includes('last_seen_at')), 'an explicit flush writes the heartbeat too');
});

t.test('the writer: the acks of a purge awaited by count are written the moment the last one arrives, however they pause; the rest when the longest delay is up', async (t) => {
  // A pause of 50 ms would write acks nobody awaits; the longest delay (20 s) is far beyond this test's waits,
  // so a statement seen within them was written because the last awaited ack came.
  const { writer, ackStatements } = recordingWriter(t, 50, 20_000);
  const nodes = [randomUUID(), randomUUID(), randomUUID()];
  const ack = (purgeId: string, node: string) => writer.purgeAck({ purge_id: purgeId, sequence: 1, node_id: node, ok: true, error: null });
  const purge = randomUUID();
  writer.expectAcks(purge, 3);
  ack(purge, nodes[0]!);
  await pause(300);
  ack(purge, nodes[1]!);
  await pause(300);
  t.equal(ackStatements(), 0, 'pauses six times the ack delay: nothing written while acks are awaited');
  ack(purge, nodes[2]!);
  await eventually(() => ackStatements() === 1, 'written when the last awaited ack arrived', 5_000);
  await pause(100);
  t.equal(ackStatements(), 1, 'in one statement');

  const capped = recordingWriter(t, 50, 300);
  const stalled = randomUUID();
  capped.writer.expectAcks(stalled, 2);
  capped.writer.purgeAck({ purge_id: stalled, sequence: 1, node_id: nodes[0]!, ok: true, error: null });
  await eventually(() => capped.ackStatements() === 1, 'an awaited ack that never comes: the others are written when the longest delay is up', 5_000);
  t.pass('written by the longest delay');
});

t.test('regression: a flush of acks reads the acks of its purges through the index, not every ack ever stored', async (t) => {
  // `purge_id in (select id from touched)` was planned as a sequential scan of cdn_purge_ack: every flush
  // read the whole table, which only grows (300,000 acks after the benchmark's sustained purges: 42 ms of
  // each flush idle, over a second under load, and configuration writes queued behind it).
  const oldNodes = 200;
  const oldPurges = 150;
  await query(cp, `insert into cdn_edge_node (id, hostname, region, status, agent_version, config_version, purge_sequence, created_at, updated_at)
    select gen_random_uuid(), 'plan-' || g, 'test', 'offline', 'test', 0, 0, now(), now() from generate_series(1, ?) g`, [oldNodes]);
  await query(cp, `insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, created_at, updated_at, completed_at)
    select gen_random_uuid(), ?, nextval('cdn_purge_sequence'), 'all', '[]', '[]', 'completed', ?, ?, now(), now(), now() from generate_series(1, ?)`, [endpoint.id, oldNodes, oldNodes, oldPurges]);
  await query(cp, `insert into cdn_purge_ack (purge_id, node_id, ok, acked_at)
    select p.id, n.id, true, now() from cdn_purge_request p cross join cdn_edge_node n where p.status = 'completed' and n.hostname like 'plan-%'`);
  await query(cp, 'analyze cdn_purge_ack');
  t.teardown(async () => {
    await query(cp, `delete from cdn_purge_ack where node_id in (select id from cdn_edge_node where hostname like 'plan-%')`);
    await query(cp, `delete from cdn_edge_node where hostname like 'plan-%'`);
  });

  const submitted = await submit();
  const nodes = (await query<{ id: string }>(cp, `select id from cdn_edge_node where hostname like 'plan-%' limit 50`)).map((r) => r.id);
  const acks = nodes.map((node_id) => ({ purge_id: submitted.id, sequence: submitted.sequence, node_id, ok: true, error: null }));
  // The statements as the channel sends them, captured instead of run, then planned on the real tables.
  const statements: { sql: string; params: unknown[]; bound: boolean }[] = [];
  const capturing = {
    getTransactionContext: () => ({ executeQuery: async (q: { sql: string; parameters: readonly unknown[] }) => { statements.push({ sql: q.sql, params: [...q.parameters], bound: true }); return { rows: [] }; } }),
    execute: async (sql: string, params: unknown[]) => { statements.push({ sql, params, bound: false }); return []; },
  };
  await recordPurgeAcks(capturing as never, acks, new Date());
  await evaluatePurges(capturing as never, [submitted.id], new Date());
  await evaluatePurges(capturing as never, 'open', new Date());
  t.equal(statements.length, 3);

  const em = cp.app.db.orm.em.fork();
  for (const [i, statement] of statements.entries()) {
    await em.begin();
    try {
      const explain = `explain (format json) ${statement.sql}`;
      const [row] = statement.bound ? await executeBound<{ 'QUERY PLAN': unknown }>(em, explain, statement.params) : await em.execute(explain, statement.params);
      const scans: string[] = [];
      const conditions: string[] = [];
      const walk = (node: Record<string, any>) => {
        if (node['Relation Name'] === 'cdn_purge_ack') {
          scans.push(node['Node Type']);
          if (node['Node Type'] !== 'ModifyTable') conditions.push(String(node['Index Cond'] ?? ''));
        }
        for (const child of node.Plans ?? []) walk(child);
      };
      walk((row!['QUERY PLAN'] as { Plan: Record<string, any> }[])[0]!.Plan);
      t.ok(scans.length > 0, `statement ${i + 1} reads cdn_purge_ack`);
      if (i === 0) {
        // It adds to the counts: a stored ack is read only to see whether an online node has acked a purge this
        // flush may complete, one probe of the key (purge, node) each, never the range of a purge's acks.
        t.ok(conditions.every((c) => c.includes('purge_id') && c.includes('node_id')), `the flush reads stored acks by their whole key only (${conditions.join('; ')})`);
      }
      t.notOk(scans.includes('Seq Scan'), `statement ${i + 1} reads it through an index (${scans.join(', ')})`);
    } finally {
      await em.rollback();
    }
  }
});
