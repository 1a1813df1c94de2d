// `npm run sign-url -- --url https://<endpoint host>/videos/a.mp4 --secret-file key.txt --expires-in 3600`
// prints the URL signed for an endpoint with token authentication, with the
// very function the documentation describes (shared/src/signing/signed-url.ts),
// so a customer can sign without reading the source. With `--acl '/videos/123/*'`
// it signs a prefix token (shared/src/signing/prefix-token.ts) and prints it in
// each form the edge reads: a query URL, a Cookie header (with the Set-Cookie a
// back end sends) and a path-segment URL. A bad argument stops it with one line
// (exit 1); the secret never appears in what it prints.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { normalizePath } from '../../../shared/src/match/path.ts';
import { aclCovers, aclProblem, pathWithToken, prefixTokenCookie, signPrefixToken } from '../../../shared/src/signing/prefix-token.ts';
import { SIGNING_ALGORITHMS, signPath, type SigningAlgorithm } from '../../../shared/src/signing/signed-url.ts';

const HELP = `Usage: npm run sign-url -- --url <url or path> (--secret-file <file> | SIGNING_SECRET=<secret>) [options]

Prints the URL signed with an endpoint's signing key (HMAC over path, expiry and,
with --ip, the viewer's address; see "Signed URLs" in docs/guides/protecting-endpoints.md).

  --url <url>            https://<endpoint host>/path?query, or just /path?query
  --secret-file <file>   a file holding the key's secret (shown once when the key was created or rotated)
                         (or the SIGNING_SECRET environment variable; --secret <secret> works too, but stays in shell history)
  --expires-in <s>       seconds from now until the URL stops working (default 3600)
  --expires <unix time>  or an absolute expiry, in seconds since 1970
  --algorithm <name>     HMAC-SHA256 (default) or HMAC-SHA512: the key's algorithm
  --token-param <name>   the key's token_param (default token)
  --expires-param <name> the key's expires_param (default expires)
  --ip <address>         the viewer's address, for a key with ip_binding_enabled
  --acl <pattern>        sign a prefix token for a path pattern instead ('/videos/123/*', or one exact path),
                         good for every URL under it; --url is then the one printed in each form (a query URL,
                         a Cookie header and its Set-Cookie, a path-segment URL)
  --start <unix time>    with --acl: the first second the token is accepted
`;

class UsageError extends Error {}

function main(argv: string[], env: NodeJS.ProcessEnv, now: number): string {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' }, secret: { type: 'string' }, 'secret-file': { type: 'string' }, 'expires-in': { type: 'string' },
      expires: { type: 'string' }, algorithm: { type: 'string' }, 'token-param': { type: 'string' }, 'expires-param': { type: 'string' },
      ip: { type: 'string' }, acl: { type: 'string' }, start: { type: 'string' }, help: { type: 'boolean' },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return HELP;
  if (!values.url) throw new UsageError('--url is required (a URL or a path)');
  const sources = [values.secret, values['secret-file'], env.SIGNING_SECRET].filter((s) => s !== undefined && s !== '');
  if (sources.length !== 1) throw new UsageError('give the secret once: --secret-file <file>, SIGNING_SECRET, or --secret');
  let secret = values.secret ?? env.SIGNING_SECRET ?? '';
  if (values['secret-file']) {
    try {
      secret = readFileSync(values['secret-file'], 'utf8').trim();
    } catch (err) {
      throw new UsageError(`--secret-file: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  if (secret.length < 32) throw new UsageError('the secret has fewer than 32 characters: is it the whole secret?');
  const algorithm = (values.algorithm ?? 'HMAC-SHA256').toUpperCase() as SigningAlgorithm;
  if (!SIGNING_ALGORITHMS.includes(algorithm)) throw new UsageError(`--algorithm must be ${SIGNING_ALGORITHMS.join(' or ')}`);
  if (values.expires !== undefined && values['expires-in'] !== undefined) throw new UsageError('give --expires or --expires-in, not both');
  let expires: number;
  if (values.expires !== undefined) {
    if (!/^\d{1,12}$/.test(values.expires)) throw new UsageError('--expires must be a Unix time in seconds');
    expires = Number(values.expires);
  } else {
    const text = values['expires-in'] ?? '3600';
    if (!/^\d{1,9}$/.test(text)) throw new UsageError('--expires-in must be a number of seconds');
    expires = Math.floor(now / 1000) + Number(text);
  }
  let prefix = '';
  let pathAndQuery = values.url;
  if (/^https?:\/\//i.test(values.url)) {
    const url = URL.parse(values.url);
    if (url === null) throw new UsageError(`--url: not a URL: ${values.url}`);
    if (url.hash) throw new UsageError('--url: a fragment (#...) never reaches the edge; leave it out');
    prefix = url.origin;
    // The path and query as written (URL would re-encode them); signPath normalises the path as the edge does.
    const start = values.url.indexOf('//') + 2;
    const end = values.url.slice(start).search(/[/?]/);
    const rest = end === -1 ? '' : values.url.slice(start + end);
    pathAndQuery = rest.startsWith('/') ? rest : `/${rest}`;
  } else if (!values.url.startsWith('/')) {
    throw new UsageError('--url must be an http(s) URL or a path starting with "/"');
  }
  if (values.acl !== undefined) return prefixForms(values.acl, values.start, prefix, pathAndQuery, { expires, secret, algorithm, ip: values.ip, tokenParam: values['token-param'] });
  if (values.start !== undefined) throw new UsageError('--start is for prefix tokens (--acl)');
  try {
    return prefix + signPath({
      path: pathAndQuery, expires, secret, algorithm, clientIp: values.ip ?? null,
      tokenParam: values['token-param'], expiresParam: values['expires-param'],
    }) + '\n';
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** A prefix token for the pattern, and the URL (which it must cover) in each form the edge reads it from. */
function prefixForms(
  aclText: string, startText: string | undefined, origin: string, pathAndQuery: string,
  o: { expires: number; secret: string; algorithm: SigningAlgorithm; ip: string | undefined; tokenParam: string | undefined },
): string {
  // The pattern as the edge normalises paths (its "*" kept), so "/videos/./123/*" signs "/videos/123/*".
  const star = aclText.endsWith('*');
  const acl = normalizePath(star ? aclText.slice(0, -1) : aclText);
  if (acl === null) throw new UsageError(`--acl: not a path the edge accepts: ${aclText}`);
  if (startText !== undefined && !/^\d{1,12}$/.test(startText)) throw new UsageError('--start must be a Unix time in seconds');
  const q = pathAndQuery.indexOf('?');
  const path = normalizePath(q === -1 ? pathAndQuery : pathAndQuery.slice(0, q));
  const query = q === -1 ? '' : pathAndQuery.slice(q + 1);
  const pattern = star ? `${acl}*` : acl;
  const problem = aclProblem(pattern);
  if (problem !== null) throw new UsageError(`--acl: ${problem}`);
  if (path === null || !aclCovers(pattern, path)) throw new UsageError(`--url: the pattern ${pattern} does not cover ${pathAndQuery}`);
  let token: string;
  try {
    token = signPrefixToken({ secret: o.secret, algorithm: o.algorithm, acl: pattern, expires: o.expires, start: startText === undefined ? undefined : Number(startText), ip: o.ip });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const name = o.tokenParam ?? 'token';
  return [
    `token: ${token}`,
    `query URL: ${origin}${path}?${query === '' ? '' : `${query}&`}${encodeURIComponent(name)}=${token}`,
    `Cookie: ${name}=${token}`,
    `Set-Cookie: ${prefixTokenCookie(name, token, pattern, o.expires)}`,
    `path URL: ${origin}${pathWithToken(path, name, token)}${query === '' ? '' : `?${query}`}`,
    '',
  ].join('\n');
}

try {
  process.stdout.write(main(process.argv.slice(2), process.env, Date.now()));
} catch (err) {
  if (!(err instanceof UsageError) && (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS') !== true) throw err;
  process.stderr.write(`sign-url: ${(err as Error).message}\n`);
  process.exit(1);
}
