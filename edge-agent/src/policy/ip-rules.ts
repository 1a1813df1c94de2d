// IP access rules (document 3 §4.9): evaluated before the cache and the origin,
// lowest priority value first (equal priorities in snapshot order: the control
// plane sends them oldest first), the first rule whose range holds the client
// address decides: allow, block, or challenge (challenge.ts). No rule
// matching: ip_default_action (allow, or deny: refused).
//
// "The first matching rule in priority order" is the matching rule of lowest
// rank, and the rules matching an address are exactly the ranges on its path
// in a binary prefix tree. So the rules are compiled once per configuration
// into one tree per family (one node per prefix bit, each holding the rank of
// the rule for exactly that range), and a request walks at most 32 (IPv4) or
// 128 (IPv6) nodes keeping the lowest rank seen: the cost does not grow with
// the number of rules.
import type { EndpointSnapshot, IpRuleSnapshot } from '../../../shared/src/config/snapshot.ts';
import { forbidden } from './answers.ts';
import { challengeAnswer, challengePassed } from './challenge.ts';
import { parseRange, type ClientAddress } from './client-address.ts';
import type { RequestPolicy } from './index.ts';

export type IpAction = IpRuleSnapshot['action'];

/** What the rules decide for an address; `rule` is null when none matched (the default action decided). */
export interface IpDecision {
  action: IpAction | 'deny';
  rule: string | null;
}

const NONE = 0x7fffffff;

/** A binary prefix tree over one address family, nodes in flat typed arrays. */
class PrefixTree {
  private zero = new Int32Array(64);
  private one = new Int32Array(64);
  private rank = new Int32Array(64).fill(NONE);
  private size = 1;

  insert(words: Uint32Array, bits: number, rank: number): void {
    let node = 0;
    for (let i = 0; i < bits; i++) {
      const bit = (words[i >>> 5]! >>> (31 - (i & 31))) & 1;
      const branch = bit === 0 ? this.zero : this.one;
      let next = branch[node]!;
      if (next === 0) {
        next = this.grow();
        (bit === 0 ? this.zero : this.one)[node] = next;
      }
      node = next;
    }
    if (rank < this.rank[node]!) this.rank[node] = rank;
  }

  /** The lowest rank on the address's path (NONE when no range holds it). */
  lowest(words: Uint32Array, width: number): number {
    const zero = this.zero;
    const one = this.one;
    const rank = this.rank;
    let best = rank[0]!;
    let node = 0;
    for (let i = 0; i < width; i++) {
      node = ((words[i >>> 5]! >>> (31 - (i & 31))) & 1) === 0 ? zero[node]! : one[node]!;
      if (node === 0) break;
      const r = rank[node]!;
      if (r < best) best = r;
    }
    return best;
  }

  private grow(): number {
    if (this.size === this.rank.length) {
      const n = this.size * 2;
      const copy = (a: Int32Array, fill: number) => {
        const b = new Int32Array(n).fill(fill);
        b.set(a);
        return b;
      };
      this.zero = copy(this.zero, 0);
      this.one = copy(this.one, 0);
      this.rank = copy(this.rank, NONE);
    }
    return this.size++;
  }
}

export class IpRuleTable {
  private readonly v4 = new PrefixTree();
  private readonly v6 = new PrefixTree();
  private readonly rules: { id: string; action: IpAction }[];
  readonly defaultAction: 'allow' | 'deny';

  /** Throws naming the rule whose range the edge cannot use (the control plane refuses it at write time with the same check). */
  constructor(rules: readonly IpRuleSnapshot[], defaultAction: 'allow' | 'deny') {
    this.defaultAction = defaultAction;
    // Stable: equal priorities keep the snapshot's order.
    const ordered = rules.map((r, i) => ({ r, i })).sort((a, b) => a.r.priority - b.r.priority || a.i - b.i).map((x) => x.r);
    this.rules = ordered.map((r) => ({ id: r.id, action: r.action }));
    ordered.forEach((rule, rank) => {
      let range;
      try {
        range = parseRange(rule.cidr);
      } catch (err) {
        throw new Error(`IP rule ${rule.id}: ${(err as Error).message}`);
      }
      (range.v4 ? this.v4 : this.v6).insert(range.words, range.bits, rank);
    });
  }

  /** The first rule (by priority) whose range holds the address, or the default action; an unparsable address matches no rule. */
  decide(address: ClientAddress | null): IpDecision {
    if (address !== null) {
      const rank = address.v4 ? this.v4.lowest(address.words, 32) : this.v6.lowest(address.words, 128);
      if (rank !== NONE) {
        const rule = this.rules[rank]!;
        return { action: rule.action, rule: rule.id };
      }
    }
    return { action: this.defaultAction === 'deny' ? 'deny' : 'allow', rule: null };
  }
}

/** The endpoint's IP access rules, or null when it has none and allows by default. */
export function compileIpRules(e: EndpointSnapshot, now: () => number = Date.now): RequestPolicy | null {
  if (e.ip_rules.length === 0 && e.ip_default_action === 'allow') return null;
  const table = new IpRuleTable(e.ip_rules, e.ip_default_action);
  return (ctx) => {
    const decision = table.decide(ctx.client);
    switch (decision.action) {
      case 'allow': return null;
      case 'challenge': {
        const nowMs = now();
        return challengePassed(ctx.req, e.id, ctx.clientIp, nowMs) ? null : challengeAnswer(e.id, ctx.clientIp, nowMs, ctx.secure);
      }
      case 'block': return forbidden({ policy: 'ip_rule', reason: 'blocked' });
      default: return forbidden({ policy: 'ip_rule', reason: 'default_deny' });
    }
  };
}
