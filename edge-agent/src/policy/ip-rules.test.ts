// IP access rules: first match by priority over IPv4 and IPv6 ranges through
// the prefix tree, checked against a plain scan of the rules in priority order
// on random rule sets; the default action; ranges the edge cannot use refuse
// the configuration; the cost of 1,000 rules.
import t from 'tap';
import type { IpRuleSnapshot } from '../../../shared/src/config/snapshot.ts';
import { inRange, parseClientAddress, parseRange } from './client-address.ts';
import { IpRuleTable } from './ip-rules.ts';

const rule = (id: string, action: IpRuleSnapshot['action'], cidr: string, priority = 100): IpRuleSnapshot => ({ id, action, cidr, priority });
const addr = (text: string) => parseClientAddress(text);

t.test('the lowest priority value wins among the rules holding the address, whatever their specificity', async (t) => {
  const table = new IpRuleTable([
    rule('wide-allow', 'allow', '10.0.0.0/8', 10),
    rule('narrow-block', 'block', '10.1.0.0/16', 20),
    rule('host-challenge', 'challenge', '10.1.2.3', 5),
    rule('v6-block', 'block', '2001:db8::/32', 1),
    rule('v6-allow', 'allow', '2001:db8:1::/48', 2),
  ], 'allow');
  t.same(table.decide(addr('10.1.2.3')), { action: 'challenge', rule: 'host-challenge' });
  t.same(table.decide(addr('10.1.2.4')), { action: 'allow', rule: 'wide-allow' }, 'the /8 allow comes first (10 < 20) though the /16 is narrower');
  t.same(table.decide(addr('2001:db8:1::5')), { action: 'block', rule: 'v6-block' });
  t.same(table.decide(addr('192.0.2.1')), { action: 'allow', rule: null }, 'no rule: the default action');
  t.same(table.decide(addr('::ffff:10.1.2.3')), { action: 'challenge', rule: 'host-challenge' }, 'an IPv4-mapped IPv6 peer is its IPv4 address');
});

t.test('equal priorities: the earlier rule in the snapshot (the control plane sends the oldest first)', async (t) => {
  const a = new IpRuleTable([rule('first', 'block', '10.0.0.0/8'), rule('second', 'allow', '10.1.0.0/16')], 'allow');
  t.equal(a.decide(addr('10.1.1.1')).rule, 'first');
  const b = new IpRuleTable([rule('first', 'allow', '10.1.0.0/16'), rule('second', 'block', '10.0.0.0/8')], 'allow');
  t.equal(b.decide(addr('10.1.1.1')).rule, 'first');
});

t.test('ip_default_action deny: what no rule holds is refused; an unknown address matches no rule', async (t) => {
  const table = new IpRuleTable([rule('office', 'allow', '203.0.113.0/24')], 'deny');
  t.same(table.decide(addr('203.0.113.9')), { action: 'allow', rule: 'office' });
  t.same(table.decide(addr('198.51.100.1')), { action: 'deny', rule: null });
  t.same(table.decide(null), { action: 'deny', rule: null });
  t.same(new IpRuleTable([], 'deny').decide(addr('::1')), { action: 'deny', rule: null });
});

t.test('whole-family ranges (0.0.0.0/0, ::/0) and host ranges (/32, /128)', async (t) => {
  const table = new IpRuleTable([rule('all4', 'block', '0.0.0.0/0', 50), rule('all6', 'challenge', '::/0', 50), rule('me', 'allow', '::1/128', 1)], 'allow');
  t.equal(table.decide(addr('8.8.8.8')).rule, 'all4');
  t.equal(table.decide(addr('2606:4700::1111')).rule, 'all6');
  t.equal(table.decide(addr('::1')).rule, 'me');
});

t.test('a range the edge cannot use refuses the configuration, naming the rule (the control plane refuses it with the same check)', async (t) => {
  for (const cidr of ['10.0.0.5/8', '10.0.0.0/33', 'not-an-address', '010.0.0.1', '2001:db8::1/32']) {
    t.throws(() => new IpRuleTable([rule('bad-rule', 'block', cidr)], 'allow'), /IP rule bad-rule/, cidr);
  }
});

/** A deterministic generator, so a failure can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let x = Math.imul(s ^ (s >>> 15), 1 | s);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = <T>(rnd: () => number, xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;

/** A random address in a small space (10-11.0-3.0-3.x, 2001:0-3:0-3::x) so that random ranges overlap often. */
function randomAddress(rnd: () => number, v6: boolean): string {
  if (!v6) return `${pick(rnd, [10, 11])}.${pick(rnd, [0, 1, 2, 3])}.${pick(rnd, [0, 1, 2, 3])}.${Math.floor(rnd() * 256)}`;
  return `2001:${pick(rnd, [0, 1, 2, 3])}:${pick(rnd, [0, 1, 2, 3])}::${Math.floor(rnd() * 65536).toString(16)}`;
}

/** A random range over the same space, host bits cleared, of a prefix length from the whole family to one host. */
function randomCidr(rnd: () => number, v6: boolean): string {
  const address = parseClientAddress(randomAddress(rnd, v6))!;
  const bits = v6 ? pick(rnd, [40, 48, 120, 128]) : pick(rnd, [22, 24, 30, 32]);
  const words = Uint32Array.from(address.words);
  for (let i = bits; i < words.length * 32; i++) words[i >>> 5] = (words[i >>> 5]! & ~(1 << (31 - (i & 31)))) >>> 0;
  if (!v6) return `${words[0]! >>> 24}.${(words[0]! >>> 16) & 255}.${(words[0]! >>> 8) & 255}.${words[0]! & 255}/${bits}`;
  const groups = Array.from({ length: 8 }, (_, i) => ((words[i >> 1]! >>> (i % 2 === 0 ? 16 : 0)) & 0xffff).toString(16));
  return `${groups.join(':')}/${bits}`;
}

t.test('the prefix tree agrees with a plain scan in priority order on random overlapping rule sets', async (t) => {
  const rnd = random(22);
  for (let round = 0; round < 30; round++) {
    const seen = new Set<string>();
    const rules: IpRuleSnapshot[] = [];
    for (let i = 0; i < 60; i++) {
      const cidr = randomCidr(rnd, rnd() < 0.5);
      if (seen.has(cidr)) continue;
      seen.add(cidr);
      rules.push(rule(`r${i}`, (['allow', 'block', 'challenge'] as const)[Math.floor(rnd() * 3)]!, cidr, 1 + Math.floor(rnd() * 20)));
    }
    const table = new IpRuleTable(rules, round % 2 === 0 ? 'allow' : 'deny');
    const ordered = rules.map((r, i) => ({ r, i, range: parseRange(r.cidr) })).sort((a, b) => a.r.priority - b.r.priority || a.i - b.i);
    let mismatches = 0;
    let matched = 0;
    for (let i = 0; i < 500; i++) {
      const a = parseClientAddress(randomAddress(rnd, rnd() < 0.5))!;
      const scan = ordered.find((x) => inRange(a, x.range));
      if (scan) matched++;
      const expected = scan ? { action: scan.r.action, rule: scan.r.id } : { action: round % 2 === 0 ? 'allow' : 'deny', rule: null };
      const got = table.decide(a);
      if (got.action !== expected.action || got.rule !== expected.rule) mismatches++;
    }
    t.equal(mismatches, 0, `round ${round}: ${rules.length} rules, 500 addresses, ${matched} inside some rule`);
    t.ok(matched > 100 && matched < 500, 'many addresses fall in some rule (overlaps are exercised), some in none (the default)');
  }
});

t.test('1,000 rules: one decision walks at most 32 or 128 nodes (cost printed, not asserted)', async (t) => {
  const rnd = random(1000);
  const rules: IpRuleSnapshot[] = [];
  for (let i = 0; i < 1000; i++) rules.push(rule(`r${i}`, 'block', i % 2 === 0 ? `198.${18 + (i >> 8) % 2}.${i & 255}.0/24` : `2001:db8:${i.toString(16)}::/48`, 1 + (i % 1000)));
  const t0 = performance.now();
  const table = new IpRuleTable(rules, 'allow');
  const compileMs = performance.now() - t0;
  // Half inside a rule (a full walk), half outside.
  const addresses = Array.from({ length: 1000 }, (_, i) => parseClientAddress(
    i % 4 === 0 ? `198.18.${i & 255}.7` : i % 4 === 1 ? `2001:db8:${i.toString(16)}::7` : randomAddress(rnd, i % 4 === 3),
  )!);
  let n = 0;
  for (let i = 0; i < 200_000; i++) if (table.decide(addresses[i % 1000]!).rule !== null) n++; // warm
  const t1 = performance.now();
  const runs = 1_000_000;
  for (let i = 0; i < runs; i++) if (table.decide(addresses[i % 1000]!).rule !== null) n++;
  const perDecisionNs = ((performance.now() - t1) / runs) * 1e6;
  t.comment(`1,000 rules: compiled in ${compileMs.toFixed(1)} ms; ${perDecisionNs.toFixed(0)} ns per decision (mixed IPv4/IPv6; ${n} matched)`);
  t.equal(table.decide(parseClientAddress('198.18.14.9')).rule, 'r14');
  t.equal(table.decide(parseClientAddress('2001:db8:1f::1')).rule, 'r31');
});
