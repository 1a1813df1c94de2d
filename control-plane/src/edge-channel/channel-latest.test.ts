// The latest-reading writer part on its own: one reading per key, the later
// one winning, in the buffer and after a failed flush; nodes gone offline
// handed to the write even with nothing buffered.
import t from 'tap';
import type { EntityManager } from '@mikro-orm/postgresql';
import { LatestPerNode } from './channel-latest.ts';
import type { ChannelWriter, WriterPart } from './channel-writer.ts';

interface Reading { thing: string; node: string; value: number }

function setup() {
  const parts: WriterPart[] = [];
  let laters = 0;
  const writer = { add: (p: WriterPart) => parts.push(p), later: () => { laters++; } } as unknown as ChannelWriter;
  const writes: { readings: readonly Reading[]; offline: readonly string[] }[] = [];
  const part = new LatestPerNode<Reading>(writer, (r) => `${r.thing}|${r.node}`, async (_em, readings, offline) => { writes.push({ readings, offline }); });
  return { part, parts, writes, laters: () => laters };
}
const em = {} as EntityManager;
const now = new Date();
const quiet = { changed: false, offline: [] as string[] };

t.test('one reading per thing and node, the latest; nothing to write is no batch', async (t) => {
  const { part, parts, writes, laters } = setup();
  t.equal(parts[0], part, 'joined the writer');
  t.equal(part.take(true, quiet), null);
  part.add({ thing: 'a', node: 'n1', value: 1 });
  part.add({ thing: 'a', node: 'n1', value: 2 });
  part.add({ thing: 'a', node: 'n2', value: 3 });
  t.equal(laters(), 3, 'each reading asks for a flush');
  t.equal(part.urgent, false);
  t.equal(part.routine, true);
  t.equal(part.take(false, quiet), null, 'not at an urgent-only flush');
  await part.take(true, quiet)!.write(em, now);
  t.same(writes[0]!.readings.map((r) => r.value), [2, 3]);
  t.equal(part.routine, false, 'taken');
});

t.test('a failed flush puts its readings back unless a later one came in', async (t) => {
  const { part, writes } = setup();
  part.add({ thing: 'a', node: 'n1', value: 1 });
  part.add({ thing: 'b', node: 'n1', value: 1 });
  const batch = part.take(true, quiet)!;
  part.add({ thing: 'a', node: 'n1', value: 9 });
  batch.putBack();
  await part.take(true, quiet)!.write(em, now);
  t.same(writes[0]!.readings.map((r) => `${r.thing}=${r.value}`).sort(), ['a=9', 'b=1']);
});

t.test('nodes gone offline reach the write with nothing buffered', async (t) => {
  const { part, writes } = setup();
  await part.take(false, { changed: true, offline: ['n1'] })!.write(em, now);
  t.same(writes[0], { readings: [], offline: ['n1'] });
});
