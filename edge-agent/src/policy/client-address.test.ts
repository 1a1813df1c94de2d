// The viewer's address: parsing as sockets and proxy headers write it, and the
// trusted-proxy rule (the header counts only from a trusted peer; the
// rightmost untrusted X-Forwarded-For entry; garbage leaves the peer).
import t from 'tap';
import type { IncomingMessage } from 'node:http';
import ipaddr from 'ipaddr.js';
import { parseClientAddress, resolveViewer, trustedProxy } from './client-address.ts';

t.test('addresses parse to their canonical text; IPv4-mapped IPv6 is IPv4; anything else is null', async (t) => {
  const cases: [string, string | null, boolean?][] = [
    ['192.0.2.1', '192.0.2.1', true], ['::ffff:192.0.2.1', '192.0.2.1', true], ['::FFFF:c000:0201', '192.0.2.1', true],
    ['::1', '::1', false], ['2001:DB8:0:0:0:0:0:1', '2001:db8::1', false], ['[2001:db8::1]', '2001:db8::1', false],
    ['fe80::1%eth0', 'fe80::1', false], ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1', false], ['::', '::', false],
    ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8', false], ['64:ff9b::192.0.2.33', '64:ff9b::c000:221', false],
    ['', null], ['010.0.0.1', null], ['1.2.3', null], ['1.2.3.256', null], ['1.2.3.4.5', null], ['a.b.c.d', null],
    ['1::2::3', null], ['12345::1', null], ['1:2:3:4:5:6:7:8:9', null], ['g::1', null], ['unknown', null], [' 1.2.3.4', null],
  ];
  for (const [input, text, v4] of cases) {
    const a = parseClientAddress(input);
    t.equal(a?.text ?? null, text, JSON.stringify(input));
    if (a !== null) t.equal(a.v4, v4, `${input} family`);
  }
});

t.test('canonical text agrees with ipaddr.js (what the signing side and the control plane use) on random IPv6 addresses', async (t) => {
  let differences = 0;
  for (let i = 0; i < 2000; i++) {
    const groups = Array.from({ length: 8 }, () => (Math.random() < 0.4 ? 0 : Math.floor(Math.random() * 65536)));
    const text = groups.map((g) => g.toString(16)).join(':');
    const ours = parseClientAddress(text);
    const parsed = ipaddr.parse(text) as ipaddr.IPv6;
    const theirs = parsed.isIPv4MappedAddress() ? parsed.toIPv4Address().toString() : parsed.toString();
    if (ours?.text !== theirs) differences++;
  }
  t.equal(differences, 0);
});

const request = (remoteAddress: string, headers: Record<string, string> = {}, encrypted = false) =>
  ({ socket: { remoteAddress, encrypted }, headers }) as unknown as IncomingMessage;

t.test('without a trusted proxy the socket peer is the viewer and headers are ignored', async (t) => {
  const v = resolveViewer(request('::ffff:198.51.100.7', { 'x-forwarded-for': '203.0.113.9', 'x-forwarded-proto': 'https' }), null);
  t.equal(v.address?.text, '198.51.100.7');
  t.equal(v.secure, false);
  t.equal(resolveViewer(request('198.51.100.7', {}, true), null).secure, true, 'a TLS socket is secure');
});

t.test('a trusted proxy: its header names the viewer; an untrusted peer cannot', async (t) => {
  const trust = trustedProxy('X-Forwarded-For', '10.0.0.0/8, ::1')!;
  t.equal(trust.header, 'x-forwarded-for');
  const from = (peer: string, xff?: string, proto?: string) => resolveViewer(request(peer, { ...(xff === undefined ? {} : { 'x-forwarded-for': xff }), ...(proto ? { 'x-forwarded-proto': proto } : {}) }), trust);
  t.equal(from('10.1.1.1', '203.0.113.9').address?.text, '203.0.113.9');
  t.equal(from('::1', '2001:db8::7').address?.text, '2001:db8::7');
  t.equal(from('198.51.100.7', '203.0.113.9').address?.text, '198.51.100.7', 'a peer outside the trusted ranges is taken at its word: none');
  t.equal(from('10.1.1.1', '1.1.1.1, 203.0.113.9, 10.2.2.2').address?.text, '203.0.113.9', 'the rightmost entry that is not a trusted proxy');
  t.equal(from('10.1.1.1', '10.3.3.3, 10.2.2.2').address?.text, '10.3.3.3', 'all trusted: the leftmost');
  t.equal(from('10.1.1.1', 'garbage, 203.0.113.9').address?.text, '203.0.113.9');
  t.equal(from('10.1.1.1', '203.0.113.9, garbage').address?.text, '10.1.1.1', 'an unreadable entry where the viewer should be: the peer');
  t.equal(from('10.1.1.1').address?.text, '10.1.1.1', 'no header: the peer');
  t.equal(from('10.1.1.1', '203.0.113.9', 'https').secure, true, 'X-Forwarded-Proto from a trusted proxy');
  t.equal(from('198.51.100.7', '203.0.113.9', 'https').secure, false, 'but not from anyone else');
});

t.test('trusted proxy settings: the header needs ranges, and a bad range is named', async (t) => {
  t.equal(trustedProxy(undefined, undefined), null);
  t.throws(() => trustedProxy('x-forwarded-for', ''), /TRUSTED_PROXY_CIDRS/);
  t.throws(() => trustedProxy('x-forwarded-for', '10.0.0.0/8, 10.0.0.5/8'), /10\.0\.0\.5\/8.*Host bits/);
});
