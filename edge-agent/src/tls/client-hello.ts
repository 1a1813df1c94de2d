// Reads the server name (SNI, RFC 6066 §3) from a TLS ClientHello before the
// handshake starts, so the HTTPS listener can hand the connection to the TLS
// settings of the name it asks for (minimum version, ciphers, ALPN): OpenSSL
// fixes those when the connection's TLS state is created, and a certificate
// chosen later by SNICallback cannot change them. Pure parsing, no I/O.
//
// Record layer (RFC 8446 §5.1): type 22 (handshake), version, length, then
// fragments; the ClientHello (handshake type 1, 24-bit length) may span
// records. Body: legacy_version, random, session_id, cipher_suites,
// compression_methods, extensions; the server_name extension (type 0) holds a
// list of (name_type 0 = host_name, name).

/** The most bytes read while looking for the ClientHello's end (a real one is a few KiB, post-quantum key shares included). */
export const MAX_CLIENT_HELLO_BYTES = 64 * 1024;

export type ClientHelloRead =
  | { state: 'more' }
  /** Not a TLS handshake at all (plain HTTP on the TLS port, or noise). */
  | { state: 'not-tls' }
  /** A complete ClientHello; servername is null without SNI or when it is not a host name. */
  | { state: 'done'; servername: string | null };

const MORE: ClientHelloRead = { state: 'more' };
const NOT_TLS: ClientHelloRead = { state: 'not-tls' };
const DNS_NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/**
 * Reads what has arrived so far (every byte since the connection opened).
 * `more`: not complete yet; `not-tls`: give up; `done`: the name (lower case,
 * one trailing dot dropped) or null.
 */
export function readClientHello(data: Buffer): ClientHelloRead {
  // Handshake bytes, reassembled from the records' fragments.
  const fragments: Buffer[] = [];
  let handshakeBytes = 0;
  let at = 0;
  let needed = -1;
  while (at + 5 <= data.length) {
    if (data[at] !== 22 || data[at + 1] !== 3) return NOT_TLS;
    const length = data.readUInt16BE(at + 3);
    if (length === 0 || length > 16_384 + 2048) return NOT_TLS;
    if (at + 5 + length > data.length) break;
    fragments.push(data.subarray(at + 5, at + 5 + length));
    handshakeBytes += length;
    at += 5 + length;
    if (needed === -1 && handshakeBytes >= 4) {
      const head = fragments.length === 1 ? fragments[0]! : Buffer.concat(fragments);
      if (head[0] !== 1) return NOT_TLS; // the first handshake message of a client is its ClientHello
      needed = 4 + head.readUIntBE(1, 3);
    }
    if (needed !== -1 && handshakeBytes >= needed) {
      const message = fragments.length === 1 ? fragments[0]! : Buffer.concat(fragments);
      return { state: 'done', servername: serverName(message.subarray(4, needed)) };
    }
  }
  if (at === 0 && data.length > 0 && (data[0] !== 22 || (data.length > 1 && data[1] !== 3))) return NOT_TLS;
  return data.length >= MAX_CLIENT_HELLO_BYTES ? NOT_TLS : MORE;
}

/** The host_name of the server_name extension of a ClientHello body; null when absent or malformed. */
function serverName(body: Buffer): string | null {
  let p = 2 + 32; // legacy_version, random
  if (p + 1 > body.length) return null;
  p += 1 + body[p]!; // session_id
  if (p + 2 > body.length) return null;
  p += 2 + body.readUInt16BE(p); // cipher_suites
  if (p + 1 > body.length) return null;
  p += 1 + body[p]!; // compression_methods
  if (p + 2 > body.length) return null;
  const end = Math.min(body.length, p + 2 + body.readUInt16BE(p));
  p += 2;
  while (p + 4 <= end) {
    const type = body.readUInt16BE(p);
    const length = body.readUInt16BE(p + 2);
    p += 4;
    if (p + length > end) return null;
    if (type === 0) return hostName(body.subarray(p, p + length));
    p += length;
  }
  return null;
}

function hostName(ext: Buffer): string | null {
  if (ext.length < 2) return null;
  const end = Math.min(ext.length, 2 + ext.readUInt16BE(0));
  let p = 2;
  while (p + 3 <= end) {
    const type = ext[p]!;
    const length = ext.readUInt16BE(p + 1);
    p += 3;
    if (p + length > end) return null;
    if (type === 0) {
      let name = ext.toString('latin1', p, p + length).toLowerCase();
      if (name.endsWith('.')) name = name.slice(0, -1);
      return DNS_NAME.test(name) ? name : null;
    }
    p += length;
  }
  return null;
}
