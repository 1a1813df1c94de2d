// The matching and scrubbing that providers use to take a person out of
// copies of their data (audit metadata, job payloads, error texts).
import t from 'tap';
import { ERASED, identifierMatcher, scrubJson, scrubText, usableIdentifiers } from './personal-data.ts';

t.test('usableIdentifiers drops blanks, duplicates (any case) and values too short to match safely', async (t) => {
  t.same(usableIdentifiers(['Ada@Example.com', 'ada@example.com', ' ', null, undefined, 'Al', 'Ada Lovelace']), ['ada@example.com', 'ada lovelace']);
});

t.test('identifierMatcher matches whole words, case-insensitively, and not inside longer words or numbers', async (t) => {
  const m = identifierMatcher(['Ada Lovelace', '203.0.113.7', '+4915112345678'])!;
  t.ok(m.test('Spoke to ada lovelace today'));
  t.ok(m.test('from 203.0.113.7,'));
  t.ok(m.test('+4915112345678'));
  t.notOk(m.test('from 203.0.113.77'), 'another address');
  t.notOk(m.test('Adam Lovelaces'));
  t.notOk(m.test('+49151123456789'));
  t.equal(identifierMatcher([]), null);
  t.equal(identifierMatcher(['Al']), null);
  t.notOk(identifierMatcher(['a.b+c'])!.test('aXb+c'), 'identifiers are literal text, not patterns');
});

t.test('scrubJson replaces values that name the person and values under personal field names, keeping the shape', async (t) => {
  const m = identifierMatcher(['grace@example.com', 'Grace Hopper']);
  const input = {
    reason: 'Refund asked by Grace Hopper',
    user_id: '5e246b69-cfe1-4f41-963f-d6d7b35432f9',
    changes: { display_name: { from: 'G. H.', to: 'Grace H.' }, status: { from: 'active', to: 'suspended' } },
    list: ['grace@example.com', 'other@example.com', 7, true, null],
    email: '',
  };
  t.same(scrubJson(input, m), {
    reason: ERASED,
    user_id: '5e246b69-cfe1-4f41-963f-d6d7b35432f9',
    changes: { display_name: { from: ERASED, to: ERASED }, status: { from: 'active', to: 'suspended' } },
    list: [ERASED, 'other@example.com', 7, true, null],
    email: '',
  });
  t.same(scrubJson({ note: 'nothing here' }, null), { note: 'nothing here' }, 'no identifiers: only personal fields go');
});

t.test('scrubText replaces each occurrence and keeps the rest of the text', async (t) => {
  t.equal(scrubText('mail to GRACE@example.com failed; retry grace@example.com', ['grace@example.com']), `mail to ${ERASED} failed; retry ${ERASED}`);
  t.equal(scrubText('nothing to see', []), 'nothing to see');
});
