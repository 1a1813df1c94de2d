// Gift cards and the account balance through the real server on PostgreSQL
// and Redis (document 1 §2, §4.5; DESIGN.md §5): administrators create (the
// code shown once, stored only as a hash), list, read and disable cards;
// subscribers look one up (rate-limited) and redeem it once into their
// balance, under concurrency and with Idempotency-Key; the engine's debits.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, createUserDirect, login, query, RELAXED_LIMITS, type TestAccount,
} from '../../../test/support/auth.ts';
import { systemContext } from '../core/request-context.ts';
import { balanceOf, creditBalance, debitBalance } from './balance-service.ts';

let offsetMs = 0;
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock: { now: () => new Date(Date.now() + offsetMs) } });
const admin = await createAdmin(cp);
const subscriber = await createLoggedInUser(cp);

const send = (who: TestAccount | null, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: who ? bearer(who.accessToken, headers) : headers, json });

const CODE = /^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$/;

async function createCard(json: Record<string, unknown> = {}): Promise<Record<string, any> & { id: string; code: string }> {
  const res = await send(admin, 'POST', '/v1/admin/gift-cards', { initial_value: 25, currency: 'EUR', ...json });
  if (res.status !== 201) throw new Error(`create gift card: ${res.status} ${res.text}`);
  return res.body.data;
}

const cardRow = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_gift_card where id = ?', [id]))[0];
const entriesOf = (userId: string) =>
  query<{ kind: string; amount_minor: string; balance_after_minor: string; currency: string; source: string; reference_id: string }>(cp,
    'select kind, amount_minor, balance_after_minor, currency, source, reference_id from billing_balance_entry where user_id = ? order by created_at, id', [userId]);
const lookUp = (who: TestAccount, code: string) => send(who, 'GET', `/v1/gift-cards/${encodeURIComponent(code)}`);
const redeem = (who: TestAccount, code: string, headers: Record<string, string> = {}) => send(who, 'POST', '/v1/gift-cards/redeem', { code }, headers);
const balances = async (who: TestAccount) => (await send(who, 'GET', '/v1/users/me/balance')).body.data as { currency: string; balance: number }[];
const freshUser = () => createLoggedInUser(cp);

t.test('POST /v1/admin/gift-cards makes a card with a server-made code shown once, stored only as a hash, audit-logged with the admin', async (t) => {
  const res = await send(admin, 'POST', '/v1/admin/gift-cards', { initial_value: 25, currency: 'eur', note: 'Winter campaign' });
  t.equal(res.status, 201, res.text);
  const card = res.body.data;
  t.equal(res.headers.get('location'), `/v1/admin/gift-cards/${card.id}`);
  t.ok(res.headers.get('etag'));
  t.match(card.code, CODE, 'XXXX-XXXX-XXXX-XXXX in Crockford base32');
  t.match(card, { initial_value: 25, remaining_value: 25, currency: 'EUR', status: 'active', redeemed_by: null, redeemed_at: null, expires_at: null, note: 'Winter campaign' });
  const row = await cardRow(card.id);
  const bare = card.code.replace(/-/g, '');
  t.match(row.code_hash, /^[0-9a-f]{64}$/);
  t.equal(row.code_last4, bare.slice(-4));
  t.equal(Number(row.initial_value_minor), 2500);
  const everything = JSON.stringify(await query(cp, 'select * from billing_gift_card where id = ?', [card.id]));
  t.notOk(everything.includes(bare) || everything.includes(card.code), 'the code is stored nowhere in the card row');
  const [audit] = await query<{ actor_id: string; metadata: unknown }>(cp, `select actor_id, metadata from audit_log where action = 'gift_card.created' and resource_id = ?`, [card.id]);
  t.equal(audit?.actor_id, admin.id);
  t.notOk(JSON.stringify(audit?.metadata).includes(bare), 'nor in the audit trail');
  const read = await send(admin, 'GET', `/v1/admin/gift-cards/${card.id}`);
  t.equal(read.body.data.code, `****-****-****-${bare.slice(-4)}`, 'masked afterwards');
});

t.test('POST /v1/admin/gift-cards keeps values exactly in minor units (EUR, JPY, KWD)', async (t) => {
  for (const [value, currency, minor] of [[10.5, 'EUR', 1050], [5000, 'JPY', 5000], [10.125, 'KWD', 10125]] as const) {
    const card = await createCard({ initial_value: value, currency });
    t.equal(card.initial_value, value);
    t.equal(Number((await cardRow(card.id)).initial_value_minor), minor, `${value} ${currency} → ${minor}`);
  }
});

t.test('POST /v1/admin/gift-cards refuses bad input with 400 naming the field, and stores nothing', async (t) => {
  const before = await countRows(cp, 'billing_gift_card');
  const cases: [Record<string, unknown>, string][] = [
    [{ initial_value: 0 }, 'initial_value'], [{ initial_value: -5 }, 'initial_value'], [{ initial_value: 9.999 }, 'initial_value'],
    [{ initial_value: 1.5, currency: 'JPY' }, 'initial_value'], [{ initial_value: '25' }, 'initial_value'], [{ initial_value: 1e13 }, 'initial_value'],
    [{ currency: 'ABC' }, 'currency'], [{ currency: undefined }, 'currency'],
    [{ expires_at: new Date(Date.now() + offsetMs - 60_000).toISOString() }, 'expires_at'], [{ expires_at: 'next year' }, 'expires_at'],
    [{ note: 'x'.repeat(501) }, 'note'], [{ note: 'two\nlines' }, 'note'],
    [{ code: 'AAAA-BBBB-CCCC-DDDD' }, 'code'], [{ remaining_value: 5 }, 'remaining_value'],
  ];
  for (const [overrides, field] of cases) {
    const res = await send(admin, 'POST', '/v1/admin/gift-cards', { initial_value: 25, currency: 'EUR', ...overrides });
    t.equal(res.status, 400, `${field}: ${JSON.stringify(overrides)}`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await countRows(cp, 'billing_gift_card'), before);
});

t.test('gift-card administration needs an administrator: a subscriber gets 403, anonymous 401, and nothing changes', async (t) => {
  const card = await createCard();
  const before = await cardRow(card.id);
  const count = await countRows(cp, 'billing_gift_card');
  for (const who of [subscriber, null]) {
    const expected = who ? 403 : 401;
    t.equal((await send(who, 'GET', '/v1/admin/gift-cards')).status, expected);
    t.equal((await send(who, 'POST', '/v1/admin/gift-cards', { initial_value: 1000, currency: 'EUR' })).status, expected);
    t.equal((await send(who, 'GET', `/v1/admin/gift-cards/${card.id}`)).status, expected);
    t.equal((await send(who, 'DELETE', `/v1/admin/gift-cards/${card.id}`)).status, expected);
  }
  t.same(await cardRow(card.id), before);
  t.equal(await countRows(cp, 'billing_gift_card'), count);
});

t.test('GET /v1/gift-cards/{code} shows a card to a subscriber however the code is typed; anything else is 404, an overlong code 400', async (t) => {
  const card = await createCard({ initial_value: 40, currency: 'GBP', note: 'internal' });
  const bare = card.code.replace(/-/g, '');
  const typings = [card.code, card.code.toLowerCase(), bare, ` ${bare.match(/.{4}/g)!.join(' ')} `, card.code.replace(/0/g, 'O').replace(/1/g, 'l')];
  for (const typed of typings) {
    const res = await lookUp(subscriber, typed);
    t.equal(res.status, 200, `typed as ${typed}`);
    t.match(res.body.data, { id: card.id, code: card.code, initial_value: 40, remaining_value: 40, currency: 'GBP', status: 'active', redeemed_by: null });
  }
  const keys = Object.keys((await lookUp(subscriber, card.code)).body.data).sort();
  t.same(keys, ['code', 'created_at', 'currency', 'expires_at', 'id', 'initial_value', 'redeemed_at', 'redeemed_by', 'remaining_value', 'status']);
  t.equal((await lookUp(subscriber, `${bare.slice(0, 15)}${bare[15] === 'A' ? 'B' : 'A'}`)).status, 404, 'one symbol off');
  t.equal((await lookUp(subscriber, 'NOT-A-CODE')).status, 404);
  t.equal((await lookUp(subscriber, 'x'.repeat(65))).status, 400);
  t.equal((await send(null, 'GET', `/v1/gift-cards/${card.code}`)).status, 401);
});

t.test('POST /v1/gift-cards/redeem moves the whole value into the caller\'s balance once, recorded in the ledger and the audit trail', async (t) => {
  const user = await freshUser();
  const card = await createCard({ initial_value: 25, currency: 'EUR' });
  const res = await redeem(user, card.code.toLowerCase());
  t.equal(res.status, 200, res.text);
  t.match(res.body.data, { id: card.id, code: card.code, status: 'redeemed', initial_value: 25, remaining_value: 0, redeemed_by: user.id });
  t.ok(res.body.data.redeemed_at);
  t.same((await balances(user)).map(({ currency, balance }) => ({ currency, balance })), [{ currency: 'EUR', balance: 25 }]);
  t.same(await entriesOf(user.id), [{ kind: 'credit', amount_minor: '2500', balance_after_minor: '2500', currency: 'EUR', source: 'gift_card', reference_id: card.id }]);
  t.equal(await countRows(cp, 'audit_log', `action = 'gift_card.redeemed' and resource_id = ? and actor_id = ?`, [card.id, user.id]), 1);

  const again = await redeem(user, card.code);
  t.equal(again.status, 409);
  t.equal(again.body.code, 'CONFLICT');
  t.equal(again.body.error_code, 'already_redeemed');
  const other = await lookUp(subscriber, card.code);
  t.match(other.body.data, { status: 'redeemed', remaining_value: 0, redeemed_by: null }, 'another user does not learn who redeemed it');
  const admins = await send(admin, 'GET', `/v1/admin/gift-cards/${card.id}`);
  t.equal(admins.body.data.redeemed_by, user.id, 'an administrator does');
  t.equal((await entriesOf(user.id)).length, 1, 'credited once');
});

t.test('POST /v1/gift-cards/redeem keeps one balance per currency and adds up cards of one currency', async (t) => {
  const user = await freshUser();
  for (const [value, currency] of [[10, 'EUR'], [5.55, 'EUR'], [2.5, 'KWD'], [1000, 'JPY']] as const) {
    const card = await createCard({ initial_value: value, currency });
    t.equal((await redeem(user, card.code)).status, 200);
  }
  t.same((await balances(user)).map((b) => [b.currency, b.balance]), [['EUR', 15.55], ['JPY', 1000], ['KWD', 2.5]]);
  const [eur] = await query<{ balance_minor: string; sum: string }>(cp, `select b.balance_minor, (select sum(amount_minor) from billing_balance_entry e
    where e.user_id = b.user_id and e.currency = b.currency and e.kind = 'credit') as sum from billing_account_balance b where b.user_id = ? and b.currency = 'EUR'`, [user.id]);
  t.equal(eur?.balance_minor, '1555');
  t.equal(eur?.sum, '1555', 'the balance is the sum of the ledger');
});

t.test('POST /v1/gift-cards/redeem with an Idempotency-Key replays the first answer and credits once', async (t) => {
  const user = await freshUser();
  const card = await createCard({ initial_value: 30 });
  const first = await redeem(user, card.code, { 'idempotency-key': 'redeem-once' });
  t.equal(first.status, 200);
  const replay = await redeem(user, card.code, { 'idempotency-key': 'redeem-once' });
  t.equal(replay.status, 200);
  t.equal(replay.headers.get('idempotent-replayed'), 'true');
  t.same(replay.body, first.body);
  t.equal((await entriesOf(user.id)).length, 1, 'one credit');
  const otherBody = await send(user, 'POST', '/v1/gift-cards/redeem', { code: (await createCard()).code }, { 'idempotency-key': 'redeem-once' });
  t.equal(otherBody.status, 422, 'the key with another body');
  t.equal(otherBody.body.code, 'IDEMPOTENCY_KEY_REUSED');
});

t.test('race: 20 users redeeming one card at once give exactly one redemption and one credit', async (t) => {
  const card = await createCard({ initial_value: 50 });
  const users = await Promise.all(Array.from({ length: 20 }, () => freshUser()));
  const results = await Promise.all(users.map((u) => redeem(u, card.code)));
  const won = results.filter((r) => r.status === 200);
  t.equal(won.length, 1, `one 200 (${results.map((r) => r.status).join(',')})`);
  t.ok(results.filter((r) => r.status !== 200).every((r) => r.status === 409 && r.body.error_code === 'already_redeemed'), 'the others: 409 already_redeemed');
  const winner = won[0]!.body.data.redeemed_by;
  t.equal(await countRows(cp, 'billing_balance_entry', 'reference_id = ?', [card.id]), 1, 'one ledger entry');
  t.equal(await countRows(cp, 'billing_account_balance', `user_id in (${users.map(() => '?').join(', ')})`, users.map((u) => u.id)), 1, 'one balance');
  t.equal(await balanceOf(cp.database.db.orm.em.fork(), winner, 'EUR'), 5000);
  const row = await cardRow(card.id);
  t.match(row, { status: 'redeemed', redeemed_by_id: winner });
  t.equal(Number(row.remaining_value_minor), 0);
});

t.test('POST /v1/gift-cards/redeem refuses bad input with 400 and unknown codes with 404, changing nothing', async (t) => {
  const user = await freshUser();
  for (const body of [{}, { code: '' }, { code: 'x'.repeat(65) }, { code: 1234 }, { code: 'ABCD', user_id: admin.id }]) {
    const res = await send(user, 'POST', '/v1/gift-cards/redeem', body);
    t.equal(res.status, 400, JSON.stringify(body));
  }
  t.equal((await redeem(user, 'AAAA-BBBB-CCCC-DDDD')).status, 404);
  t.equal((await redeem(user, 'hello')).status, 404);
  t.same(await entriesOf(user.id), []);
  t.same(await balances(user), []);
});

t.test('DELETE /v1/admin/gift-cards/{gift_card_id} disables a card: redemption then 409 disabled; a redeemed card cannot be disabled', async (t) => {
  const card = await createCard();
  const res = await send(admin, 'DELETE', `/v1/admin/gift-cards/${card.id}`);
  t.equal(res.status, 200);
  t.match(res.body.data, { status: 'disabled', code: `****-****-****-${card.code.slice(-4)}` });
  t.ok(res.body.data.disabled_at);
  const user = await freshUser();
  const refused = await redeem(user, card.code);
  t.equal(refused.status, 409);
  t.equal(refused.body.error_code, 'disabled');
  t.same(await entriesOf(user.id), []);
  t.equal((await lookUp(user, card.code)).body.data.status, 'disabled');
  t.equal((await send(admin, 'DELETE', `/v1/admin/gift-cards/${card.id}`)).status, 200, 'again: unchanged');
  t.equal(await countRows(cp, 'audit_log', `action = 'gift_card.disabled' and resource_id = ? and actor_id = ?`, [card.id, admin.id]), 1);

  const spent = await createCard();
  t.equal((await redeem(user, spent.code)).status, 200);
  const before = await cardRow(spent.id);
  const late = await send(admin, 'DELETE', `/v1/admin/gift-cards/${spent.id}`);
  t.equal(late.status, 409);
  t.equal(late.body.error_code, 'already_redeemed');
  t.same(await cardRow(spent.id), before);
  t.equal((await send(admin, 'DELETE', `/v1/admin/gift-cards/${crypto.randomUUID()}`)).status, 404);
});

t.test('GET /v1/admin/gift-cards lists newest first with masked codes, filtered by status, currency, full code and redeemer', async (t) => {
  const a = await createCard({ currency: 'DKK', initial_value: 100 });
  const b = await createCard({ currency: 'DKK', initial_value: 200 });
  const c = await createCard({ currency: 'DKK', initial_value: 300 });
  const user = await freshUser();
  t.equal((await redeem(user, b.code)).status, 200);
  t.equal((await send(admin, 'DELETE', `/v1/admin/gift-cards/${c.id}`)).status, 200);
  const all = await send(admin, 'GET', '/v1/admin/gift-cards?currency=dkk');
  t.equal(all.status, 200);
  t.same(all.body.data.map((x: { id: string }) => x.id), [c.id, b.id, a.id]);
  t.ok(all.body.data.every((x: { code: string }) => x.code.startsWith('****-****-****-')), 'codes masked');
  t.same((await send(admin, 'GET', '/v1/admin/gift-cards?currency=DKK&status=active')).body.data.map((x: { id: string }) => x.id), [a.id]);
  t.same((await send(admin, 'GET', '/v1/admin/gift-cards?currency=DKK&status=redeemed')).body.data.map((x: { id: string }) => x.id), [b.id]);
  t.same((await send(admin, 'GET', '/v1/admin/gift-cards?currency=DKK&status=disabled')).body.data.map((x: { id: string }) => x.id), [c.id]);
  t.same((await send(admin, 'GET', `/v1/admin/gift-cards?code=${a.code.toLowerCase()}`)).body.data.map((x: { id: string }) => x.id), [a.id]);
  t.same((await send(admin, 'GET', `/v1/admin/gift-cards?redeemed_by=${user.id}`)).body.data.map((x: { id: string }) => x.id), [b.id]);
  const paged = await send(admin, 'GET', '/v1/admin/gift-cards?currency=DKK&limit=2');
  const rest = await send(admin, 'GET', `/v1/admin/gift-cards?currency=DKK&limit=2&cursor=${paged.body.meta.next_cursor}`);
  t.same([...paged.body.data, ...rest.body.data].map((x: { id: string }) => x.id), [c.id, b.id, a.id]);
  for (const bad of ['status=spent', 'code=ABCD', 'currency=XYZ', 'redeemed_by=me', 'sort=code']) {
    t.equal((await send(admin, 'GET', `/v1/admin/gift-cards?${bad}`)).status, 400, `${bad} → 400`);
  }
  const read = await send(admin, 'GET', `/v1/admin/gift-cards/${a.id}`);
  t.equal((await send(admin, 'GET', `/v1/admin/gift-cards/${a.id}`, undefined, { 'if-none-match': read.headers.get('etag')! })).status, 304);
  t.equal((await send(admin, 'GET', `/v1/admin/gift-cards/${crypto.randomUUID()}`)).status, 404);
});

t.test('looking up and redeeming codes share a per-caller budget against guessing (429 with Retry-After)', async (t) => {
  const user = await freshUser();
  for (let i = 0; i < 10; i++) if ((await lookUp(user, `GUESS-${i}`)).status !== 404) t.fail(`look-up ${i}`);
  for (let i = 10; i < 20; i++) if ((await redeem(user, `GUESS-${i}`)).status !== 404) t.fail(`redeem ${i}`);
  const card = await createCard();
  const limited = await lookUp(user, card.code);
  t.equal(limited.status, 429, 'even a right code, once the budget is spent');
  t.ok(Number(limited.headers.get('retry-after')) > 0);
  t.equal((await redeem(user, card.code)).status, 429);
  t.equal((await cardRow(card.id)).status, 'active', 'nothing redeemed');
  t.equal((await lookUp(subscriber, card.code)).status, 200, 'other callers keep their budget');
});

t.test('debitBalance spends up to what is there, in turns under concurrency, and the ledger always adds up', async (t) => {
  const user = await createUserDirect(cp);
  const context = () => systemContext(cp.app);
  t.equal(await debitBalance(context(), { userId: user.id, currency: 'EUR', maxMinor: 500, source: 'invoice' }), 0, 'no balance: nothing applied');
  t.equal(await countRows(cp, 'billing_balance_entry', 'user_id = ?', [user.id]), 0, 'and nothing recorded');
  t.equal(await creditBalance(context(), { userId: user.id, currency: 'EUR', amountMinor: 2500, source: 'adjustment' }), 2500);
  t.equal(await debitBalance(context(), { userId: user.id, currency: 'EUR', maxMinor: 999, source: 'invoice', referenceId: crypto.randomUUID() }), 999);
  t.equal(await debitBalance(context(), { userId: user.id, currency: 'USD', maxMinor: 999, source: 'invoice' }), 0, 'another currency is another balance');
  const results = await Promise.all(Array.from({ length: 20 }, () =>
    debitBalance(context(), { userId: user.id, currency: 'EUR', maxMinor: 300, source: 'invoice' })));
  t.equal(results.reduce((a, b) => a + b, 0), 1501, 'together they spent exactly what was left');
  t.ok(results.every((r) => r === 300 || r === 0 || r === 1501 % 300), `each took 300, the rest, or nothing (${results})`);
  t.equal(await balanceOf(cp.database.db.orm.em.fork(), user.id, 'EUR'), 0);
  const [sums] = await query<{ credits: string; debits: string; last: string }>(cp, `select
    sum(amount_minor) filter (where kind = 'credit') as credits, sum(amount_minor) filter (where kind = 'debit') as debits,
    (select balance_after_minor from billing_balance_entry where user_id = ? order by balance_after_minor limit 1) as last
    from billing_balance_entry where user_id = ?`, [user.id, user.id]);
  t.same(sums, { credits: '2500', debits: '2500', last: '0' });
  await t.rejects(debitBalance(context(), { userId: user.id, currency: 'EUR', maxMinor: -1, source: 'invoice' }), { name: 'MoneyError' });
  await t.rejects(creditBalance(context(), { userId: user.id, currency: 'EUR', amountMinor: 1.5, source: 'adjustment' }), { name: 'MoneyError' });
});

t.test('an expired card shows as expired and cannot be redeemed', async (t) => {
  const card = await createCard({ expires_at: new Date(Date.now() + offsetMs + 3_600_000).toISOString() });
  const user = await createUserDirect(cp);
  offsetMs += 2 * 3_600_000; // two hours later: tokens issued before have expired, so log in again
  const later = { ...user, ...(await login(cp, user.email, user.password)) } as TestAccount;
  t.equal((await lookUp(later, card.code)).body.data.status, 'expired');
  const res = await redeem(later, card.code);
  t.equal(res.status, 409);
  t.equal(res.body.error_code, 'expired');
  t.same(await entriesOf(user.id), []);
  const relogged = { ...admin, ...(await login(cp, admin.email, admin.password)) } as TestAccount;
  t.same((await send(relogged, 'GET', `/v1/admin/gift-cards?status=expired&code=${card.code}`)).body.data.map((c: { id: string }) => c.id), [card.id]);
});

t.test('the OpenAPI document shows the gift-card and balance operations', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  t.ok(doc.paths['/v1/gift-cards/{code}']?.get);
  t.ok(doc.paths['/v1/gift-cards/redeem']?.post?.parameters?.some((p: { name: string }) => p.name.toLowerCase() === 'idempotency-key'), 'redeem takes Idempotency-Key');
  t.match(doc.paths['/v1/gift-cards/redeem'].post.responses['409'].description, /CONFLICT/);
  t.ok(doc.paths['/v1/users/me/balance']?.get);
  t.ok(doc.paths['/v1/admin/gift-cards']?.get && doc.paths['/v1/admin/gift-cards']?.post);
  t.ok(doc.paths['/v1/admin/gift-cards/{gift_card_id}']?.get && doc.paths['/v1/admin/gift-cards/{gift_card_id}']?.delete);
});
