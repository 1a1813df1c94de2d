// encodePurge writes what toBinary writes for the same ConnectResponse, byte
// for byte (its nonce aside, which is random: the decoded nonce is read back
// and put into the reference message).
import t from 'tap';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectResponseSchema, PurgeType } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodePurge, type PurgeRow } from './channel-purges.ts';

const TYPES = { path: PurgeType.PATH, wildcard: PurgeType.WILDCARD, tag: PurgeType.TAG, all: PurgeType.ALL } as const;

const rows: PurgeRow[] = [
  { id: 'b0a7c1de-0000-4000-8000-000000000001', sequence: '1', distribution_id: null, purge_type: 'all', paths: [], tags: [] },
  { id: 'b0a7c1de-0000-4000-8000-000000000002', sequence: 300, distribution_id: '6f1d2c3b-0000-4000-8000-00000000000a', purge_type: 'path', paths: ['/a', '/b?x=1', '/é/ü'], tags: [] },
  { id: 'b0a7c1de-0000-4000-8000-000000000003', sequence: String(2 ** 53 - 1), distribution_id: null, purge_type: 'tag', paths: [], tags: ['t1', 'x'.repeat(256)] },
  { id: 'b0a7c1de-0000-4000-8000-000000000004', sequence: '4294967296', distribution_id: 'e', purge_type: 'wildcard', paths: ['/videos/*', '/'.repeat(2048)], tags: [] },
  { id: 'b0a7c1de-0000-4000-8000-000000000005', sequence: 5, distribution_id: 'e', purge_type: 'tag', paths: [], tags: ['show-7'], soft: true },
  { id: 'b0a7c1de-0000-4000-8000-000000000006', sequence: 6, distribution_id: null, purge_type: 'all', paths: [], tags: [], soft: false },
];

t.test('encodePurge: the bytes toBinary writes for the same message', async (t) => {
  for (const row of rows) {
    const encoded = encodePurge(row);
    const decoded = fromBinary(ConnectResponseSchema, encoded.bytes);
    t.equal(decoded.message.case, 'purge');
    const nonce = decoded.message.case === 'purge' ? decoded.message.value.nonce : '';
    t.match(nonce, /^[0-9a-f-]{36}$/, 'a fresh nonce');
    const reference = toBinary(ConnectResponseSchema, create(ConnectResponseSchema, {
      message: {
        case: 'purge',
        value: { sequence: BigInt(row.sequence), purgeId: row.id, endpointId: row.distribution_id ?? '', type: TYPES[row.purge_type], paths: row.paths, tags: row.tags, nonce, soft: row.soft === true },
      },
    }));
    t.same(Buffer.from(encoded.bytes), Buffer.from(reference), `${row.soft === true ? 'soft ' : ''}${row.purge_type} purge ${row.sequence}`);
    if (decoded.message.case === 'purge') t.equal(decoded.message.value.soft, row.soft === true, 'soft as the row says');
    t.equal(encoded.sequence, Number(row.sequence));
    t.equal(encoded.id, row.id);
  }
  const nonceOf = (bytes: Uint8Array) => { const m = fromBinary(ConnectResponseSchema, bytes).message; return m.case === 'purge' ? m.value.nonce : ''; };
  t.not(nonceOf(encodePurge(rows[0]!).bytes), nonceOf(encodePurge(rows[0]!).bytes), 'each encoding has its own nonce');
});
