import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createWidgetTable, Widget, widgetRoutes } from '../../../test/support/widgets-fixture.ts';
import { paginate, TOTAL_EXACT_UP_TO, type Sort } from './paging.ts';

const cp = await startTestControlPlane(t, { extraEntities: [Widget], extraRoutes: widgetRoutes, env: { RATE_LIMIT_PER_MINUTE: '0' } });
await createWidgetTable(cp.database.db);

// 250 widgets with many equal names and sizes, so ties are broken by id.
const em = cp.database.db.orm.em.fork();
const base = Date.UTC(2026, 0, 1);
for (let i = 0; i < 250; i++) {
  em.create(Widget, { name: `w-${i % 7}`, size: (i % 3) + 1, created_at: new Date(base + Math.floor(i / 2) * 1000) } as never);
}
await em.flush();

async function walk(query: string, direction: 'next' | 'prev', start?: string) {
  const seen: any[] = [];
  let cursor = start;
  let pages = 0;
  for (;;) {
    const res = await cp.request('GET', `/v1/test/widgets?${query}${cursor ? `&cursor=${cursor}` : ''}`);
    if (res.status !== 200) throw new Error(`status ${res.status}: ${res.text}`);
    pages++;
    seen.push(...(direction === 'next' ? res.body.data : [...res.body.data].reverse()));
    cursor = direction === 'next' ? res.body.meta.next_cursor : res.body.meta.prev_cursor;
    if (!cursor || pages > 300) return { seen, pages, last: res.body.meta };
  }
}

function expectedOrder(rows: any[], field: string, desc: boolean) {
  return [...rows].sort((a, b) => {
    const av = a[field], bv = b[field];
    const c = av < bv ? -1 : av > bv ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
    return desc ? -c : c;
  });
}

const all = (await cp.database.db.orm.em.fork().find(Widget, {})).map((w) => ({ id: w.id, name: w.name, size: w.size, created_at: w.created_at.toISOString() }));

for (const sort of ['created_at', '-created_at', 'name', '-size']) {
  for (const limit of [1, 7, 20, 100]) {
    t.test(`GET list pages through 250 records with sort=${sort} limit=${limit}`, async (t) => {
      const field = sort.replace('-', '');
      const { seen, pages, last } = await walk(`limit=${limit}&sort=${sort}`, 'next');
      t.equal(seen.length, 250, 'every record once');
      t.equal(new Set(seen.map((w) => w.id)).size, 250, 'no duplicates');
      t.equal(pages, Math.ceil(250 / limit), 'page count');
      t.same(seen.map((w) => w.id), expectedOrder(all, field, sort.startsWith('-')).map((w) => w.id), 'in sort order, ties by id');
      t.equal(last.has_more, false);
      t.equal(last.next_cursor, null);
      t.equal(last.total, 250);
    });
  }
}

t.test('prev_cursor walks back over the same records', async (t) => {
  const forward = await walk('limit=30&sort=name', 'next');
  // Reach the last page, then walk backwards from it.
  let cursor: string | undefined;
  let lastPage: any;
  for (;;) {
    const res = await cp.request('GET', `/v1/test/widgets?limit=30&sort=name${cursor ? `&cursor=${cursor}` : ''}`);
    lastPage = res.body;
    if (!res.body.meta.next_cursor) break;
    cursor = res.body.meta.next_cursor;
  }
  const back = await walk('limit=30&sort=name', 'prev', lastPage.meta.prev_cursor);
  const backIds = [...lastPage.data].reverse().map((w: any) => w.id).concat(back.seen.map((w: any) => w.id));
  t.same(backIds.reverse(), forward.seen.map((w: any) => w.id), 'backwards is the exact reverse of forwards');
  const first = await cp.request('GET', '/v1/test/widgets?limit=30&sort=name');
  t.equal(first.body.meta.prev_cursor, null, 'no prev_cursor on the first page');
});

t.test('meta has exactly the documented members', async (t) => {
  const res = await cp.request('GET', '/v1/test/widgets?limit=5');
  t.same(Object.keys(res.body.meta).sort(), ['count', 'has_more', 'limit', 'next_cursor', 'prev_cursor', 'total']);
  t.equal(res.body.meta.count, 5);
  t.equal(res.body.meta.limit, 5);
  t.equal(res.body.meta.has_more, true);
});

t.test('default limit is 20 and filters narrow total', async (t) => {
  const res = await cp.request('GET', '/v1/test/widgets');
  t.equal(res.body.data.length, 20);
  const filtered = await cp.request('GET', '/v1/test/widgets?name=w-0&limit=100');
  t.equal(filtered.body.meta.total, all.filter((w) => w.name === 'w-0').length);
  t.ok(filtered.body.data.every((w: any) => w.name === 'w-0'));
});

t.test('bad paging input is refused with 400 and a field error', async (t) => {
  const cases: [string, string][] = [
    ['limit=0', 'limit'],
    ['limit=101', 'limit'],
    ['limit=abc', 'limit'],
    ['limit=2.5', 'limit'],
    ['cursor=not-a-cursor', 'cursor'],
    [`cursor=${Buffer.from('{"s":"name","v":"x","id":"y","d":"n"}').toString('base64url')}`, 'cursor'], // made for another sort
    ['sort=color', 'sort'],
    ['unknown=1', 'unknown'],
  ];
  for (const [query, field] of cases) {
    const res = await cp.request('GET', `/v1/test/widgets?${query}`);
    t.equal(res.status, 400, query);
    t.equal(res.body.code, 'VALIDATION_ERROR', query);
    t.ok(res.body.errors.some((e: any) => e.field === field), `${query} names ${field}`);
    t.equal(res.body.request_id, res.headers.get('x-request-id'));
  }
});

t.test('a misestimated filter picks its page among the matching rows: the same pages, both ways', async (t) => {
  const pages = async (sort: Sort, where: object, misestimated: boolean, limit: number) => {
    const seen: string[][] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await paginate(cp.database.db.orm.em.fork(), Widget, { where, sort, limit, cursor, misestimated });
      seen.push(page.items.map((w) => w.id));
      if (!page.meta.next_cursor) break;
      cursor = page.meta.next_cursor;
    }
    // and back from the last page
    const back: string[][] = [];
    for (let prev = (await paginate(cp.database.db.orm.em.fork(), Widget, { where, sort, limit, cursor, misestimated })).meta.prev_cursor; prev;) {
      const page = await paginate(cp.database.db.orm.em.fork(), Widget, { where, sort, limit, cursor: prev, misestimated });
      back.unshift(page.items.map((w) => w.id));
      prev = page.meta.prev_cursor;
    }
    return { seen, back };
  };
  for (const [sort, where] of [[{ field: 'name', direction: 'asc' }, {}], [{ field: 'size', direction: 'desc' }, { name: { $in: ['w-1', 'w-2'] } }], [{ field: 'created_at', direction: 'desc' }, { size: 2 }]] as [Sort, object][]) {
    const plain = await pages(sort, where, false, 7);
    const picked = await pages(sort, where, true, 7);
    t.same(picked, plain, `${sort.direction} ${sort.field} ${JSON.stringify(where)}`);
    t.same(picked.back, picked.seen.slice(0, -1), 'walking back gives the pages before the last');
  }
});

// Last: it adds rows the tests above do not expect.
t.test('meta.total is exact up to 1,000 matching rows, beyond that an estimate above 1,000; paging stays exact', async (t) => {
  t.equal(TOTAL_EXACT_UP_TO, 1000);
  const fork = cp.database.db.orm.em.fork();
  for (let i = 0; i < TOTAL_EXACT_UP_TO; i++) fork.create(Widget, { name: 'bulk', size: (i % 10) + 1 } as never);
  await fork.flush();
  const exact = await cp.request('GET', '/v1/test/widgets?name=bulk&limit=100');
  t.equal(exact.body.meta.total, 1000, '1,000 matching rows are counted');

  fork.create(Widget, { name: 'bulk', size: 1 } as never);
  await fork.flush();
  const over = await cp.request('GET', '/v1/test/widgets?name=bulk&limit=100');
  t.ok(over.body.meta.total > 1000, `1,001 matching rows: more than 1,000 (${over.body.meta.total})`);
  t.same([over.body.meta.count, over.body.meta.has_more], [100, true]);
  await fork.execute('analyze test_widget');
  const estimated = (await cp.request('GET', '/v1/test/widgets?name=bulk&limit=100')).body.meta.total;
  t.ok(estimated > 1000 && estimated <= 1251, `with statistics, the estimate is near the truth (${estimated})`);
  t.equal((await cp.request('GET', '/v1/test/widgets?name=w-0')).body.meta.total, all.filter((w) => w.name === 'w-0').length, 'small filters stay exact');

  const { seen, pages } = await walk('name=bulk&limit=100&sort=-size', 'next');
  t.equal(seen.length, 1001, 'every matching row is reached by paging');
  t.equal(new Set(seen.map((w) => w.id)).size, 1001, 'once each');
  t.equal(pages, 11);
});
