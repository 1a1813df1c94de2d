// Preloaded into every Node process of the test run (scripts/test.ts puts it in
// NODE_OPTIONS, so tap's test processes and every control plane, agent, CLI and
// worker they start carry it): nothing a test does may leave this machine.
// A TCP, TLS, HTTP/2 or undici connection, a UDP datagram, or a DNS question
// for anything but loopback is refused on the spot (the caller sees an error,
// as for an unreachable host) and written down; the test file whose process
// tree tried it then fails with the list. Plain JavaScript, not TypeScript:
// npm itself runs on the machine's older Node, which strips no types.
//
// Allowed: 127.0.0.0/8, ::1, ::ffff:127.x, 0.0.0.0 and :: (this host), Unix
// sockets, the name `localhost` (/etc/hosts answers it; `*.localhost` goes
// to the machine's resolver, so it is refused like any other name), and DNS
// questions to a resolver whose servers are all on loopback (the ACME tests'
// pebble-challtestsrv). A name under `.invalid` is answered "not found" at
// once, as RFC 6761 §6.4 asks of resolver libraries: asking for it is no fault.
import dgram from 'node:dgram';
import dns from 'node:dns';
import dnsPromises from 'node:dns/promises';
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const LOG_VARIABLE = 'LOOPBACK_GUARD_LOG';
const isTestFile = /\.test\.[cm]?[jt]s$/.test(process.argv[1] ?? '');
if (isTestFile) {
  // The root of a test file's process tree: its children inherit the log and write to it.
  process.env[LOG_VARIABLE] = path.join(os.tmpdir(), `loopback-guard-${process.pid}-${Date.now().toString(36)}.log`);
}
const log = process.env[LOG_VARIABLE];

function loopbackAddress(address) {
  const text = String(address).toLowerCase().replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  if (text === '::1' || text === '::' || text === '0.0.0.0' || text === '0:0:0:0:0:0:0:1') return true;
  const v4 = text.startsWith('::ffff:') ? text.slice(7) : text;
  return net.isIPv4(v4) && (v4.startsWith('127.') || v4 === '0.0.0.0');
}

function localName(name) {
  const text = String(name).toLowerCase().replace(/\.$/, '');
  return text === 'localhost' || (net.isIP(text) !== 0 && loopbackAddress(text));
}

function refuse(what) {
  const line = `${what} (pid ${process.pid}: ${process.argv.slice(1).join(' ').slice(0, 200)})`;
  if (log) {
    try { fs.appendFileSync(log, `${line}\n`); } catch { /* the report below still says it */ }
  }
  process.stderr.write(`loopback guard: refused ${line}\n`);
  const err = new Error(`loopback guard: ${what} would leave this machine`);
  err.code = 'ECONNREFUSED';
  return err;
}

// ---- DNS: getaddrinfo (lookup) and the resolvers ----
/** RFC 6761 §6.4: a name under .invalid has no answer, and a resolver library should say so without asking anyone. */
const invalidName = (name) => /(^|\.)invalid\.?$/i.test(String(name));
function notFound(hostname) {
  const err = new Error(`getaddrinfo ENOTFOUND ${hostname}`);
  err.code = 'ENOTFOUND';
  err.hostname = hostname;
  return err;
}
/** null: the lookup may go ahead; otherwise the error it fails with (a refusal is written down, .invalid is not). */
function lookupRefusal(hostname) {
  if (!hostname || localName(hostname) || net.isIP(hostname) !== 0) return null;
  if (invalidName(hostname)) return notFound(hostname);
  const err = refuse(`DNS lookup of ${hostname}`);
  err.code = 'ENOTFOUND';
  return err;
}
const originalLookup = dns.lookup;
dns.lookup = function lookup(hostname, options, callback) {
  const err = lookupRefusal(hostname);
  if (err === null) return originalLookup.call(dns, hostname, options, callback);
  process.nextTick(typeof options === 'function' ? options : callback, err);
  return {};
};
const originalPromiseLookup = dnsPromises.lookup;
dnsPromises.lookup = function lookup(hostname, options) {
  const err = lookupRefusal(hostname);
  return err === null ? originalPromiseLookup.call(dnsPromises, hostname, options) : Promise.reject(err);
};

const RESOLVE_METHODS = ['resolve', 'resolve4', 'resolve6', 'resolveAny', 'resolveCaa', 'resolveCname', 'resolveMx', 'resolveNaptr',
  'resolveNs', 'resolvePtr', 'resolveSoa', 'resolveSrv', 'resolveTlsa', 'resolveTxt', 'reverse'];
function resolverOnLoopback(resolver) {
  const servers = resolver.getServers();
  return servers.length > 0 && servers.every((s) => loopbackAddress(s.replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1')) || loopbackAddress(s));
}
function guardResolvers(module, promised) {
  for (const target of [module, module.Resolver.prototype]) {
    for (const method of RESOLVE_METHODS) {
      const original = target[method];
      if (typeof original !== 'function') continue;
      target[method] = function guardedResolve(name, ...rest) {
        const resolver = target === module ? module : this;
        if (localName(name) || resolverOnLoopback(resolver)) return original.call(this, name, ...rest);
        let err;
        if (invalidName(name)) {
          err = new Error(`query${method.slice(7)} ENOTFOUND ${name}`);
          err.code = 'ENOTFOUND';
        } else {
          err = refuse(`DNS ${method} of ${name} through ${resolver.getServers().join(',')}`);
          err.code = 'ECONNREFUSED';
        }
        if (promised) return Promise.reject(err);
        const cb = rest.at(-1);
        if (typeof cb === 'function') process.nextTick(cb, err);
        return undefined;
      };
    }
  }
}
guardResolvers(dns, false);
guardResolvers(dnsPromises, true);

// ---- TCP (net, tls, http, http2, undici): every connection goes through Socket#connect ----
/** A lookup that lets through only loopback answers (names are looked up by the guarded lookup or the caller's own). */
const GUARDED = Symbol('loopback-only lookup');
function loopbackOnlyLookup(inner, host) {
  if (inner[GUARDED]) return inner;
  const guarded = function lookup(hostname, options, callback) {
    const cb = typeof options === 'function' ? options : callback;
    const opts = typeof options === 'function' ? {} : options;
    inner(hostname, opts, (err, address, family) => {
      if (err) return cb(err, address, family);
      const all = Array.isArray(address) ? address : [{ address, family }];
      const outside = all.find((a) => !loopbackAddress(a.address));
      if (outside) return cb(refuse(`connection to ${host} (${outside.address})`));
      return cb(null, address, family);
    });
  };
  guarded[GUARDED] = true;
  return guarded;
}
const originalConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function connect(...args) {
  const first = Array.isArray(args[0]) ? args[0][0] : args[0];
  const options = first !== null && typeof first === 'object' ? first : null;
  if (options !== null && options.path === undefined) {
    const host = options.host ?? 'localhost';
    if (net.isIP(host) !== 0) {
      if (!loopbackAddress(host)) {
        const err = refuse(`connection to ${host}:${options.port}`);
        process.nextTick(() => this.destroy(err));
        return this;
      }
    } else {
      options.lookup = loopbackOnlyLookup(options.lookup ?? dns.lookup, host);
    }
  } else if (options === null && typeof first !== 'string') {
    // connect(port[, host][, cb]): net normalises it into an options object first.
    const host = typeof args[1] === 'string' ? args[1] : 'localhost';
    if (net.isIP(host) !== 0 && !loopbackAddress(host)) {
      const err = refuse(`connection to ${host}:${first}`);
      process.nextTick(() => this.destroy(err));
      return this;
    }
  }
  return originalConnect.apply(this, args);
};

// ---- UDP ----
function guardDatagram(address, what) {
  if (address === undefined || address === null) return null;
  if (net.isIP(address) !== 0 ? loopbackAddress(address) : localName(address)) return null;
  return refuse(`${what} to ${address}`);
}
const originalSend = dgram.Socket.prototype.send;
dgram.Socket.prototype.send = function send(msg, ...rest) {
  const address = rest.find((a) => typeof a === 'string'); // send(msg[, offset, length], port[, address][, cb])
  const err = guardDatagram(address, 'UDP datagram');
  if (err) {
    const cb = rest.at(-1);
    if (typeof cb === 'function') process.nextTick(cb, err);
    return;
  }
  return originalSend.call(this, msg, ...rest);
};
const originalUdpConnect = dgram.Socket.prototype.connect;
dgram.Socket.prototype.connect = function connect(port, address, cb) {
  const err = guardDatagram(typeof address === 'string' ? address : undefined, 'UDP connection');
  if (err) {
    const callback = typeof address === 'function' ? address : cb;
    process.nextTick(() => (callback ? callback(err) : this.emit('error', err)));
    return;
  }
  return originalUdpConnect.call(this, port, address, cb);
};

syncBuiltinESMExports();

if (isTestFile) {
  process.on('exit', () => {
    let lines = '';
    try { lines = fs.readFileSync(log, 'utf8'); fs.rmSync(log, { force: true }); } catch { /* nothing was refused */ }
    if (lines.trim() === '') return;
    process.stderr.write(`\nloopback guard: this test file (or a process it started) tried to reach outside this machine:\n${lines}`);
    process.exitCode = 1;
  });
}
