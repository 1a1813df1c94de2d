// Route redirect rules (document 3 §2 Route.redirect_rules): one compiler for
// the edge, which answers them, and the control plane, which refuses at write
// time (422) what the edge could not compile. A rule's match_path is a path
// glob whose wildcards capture, in order from the left:
//   `*`  any characters within one segment        → ([^/]*)
//   `**` any characters, "/" included             → (.*)
//   `?`  one character other than "/"             → ([^/])
//   a trailing `/*` covers everything below, as in route and cache-rule globs → /(.*)
// `{a,b}` alternatives and `[…]` classes match without capturing. redirect_to
// (type path) is an absolute path or an http(s) URL in which `$1`…`$9` insert
// the captures; references only in the path part of a URL, so a capture can
// never choose the host.
export const REDIRECT_TYPES = ['http_to_https', 'path'] as const;
export type RedirectType = (typeof REDIRECT_TYPES)[number];
export const REDIRECT_STATUSES = [301, 302, 303, 307, 308] as const;

export interface RedirectRuleText {
  type: string;
  status_code: number;
  match_path: string;
  redirect_to: string;
}

export interface CompiledRedirectPattern {
  /** Anchored regular expression over the normalised path. */
  re: RegExp;
  /** How many capture groups (wildcards) it has. */
  captures: number;
}

const REGEX_SPECIAL = /[\\^$.*+?()[\]{}|/]/g;
const escapeRegex = (s: string) => s.replace(REGEX_SPECIAL, '\\$&');

/** Compiles a redirect rule's match_path, or says why it cannot be used. */
export function compileRedirectPattern(pattern: string): CompiledRedirectPattern | { problem: string } {
  if (pattern === '*' || pattern === '**') return { re: /^(.*)$/s, captures: 1 };
  if (!pattern.startsWith('/')) return { problem: 'must start with "/" (or be "*")' };
  if (/[\s\u0000-\u001f\u007f]/.test(pattern)) return { problem: 'must not contain whitespace or control characters' };
  if (/\*{3,}/.test(pattern)) return { problem: 'has more than two "*" in a row' };
  let source = '';
  let captures = 0;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') {
      const double = pattern[i + 1] === '*';
      if (double) i++;
      // "/videos/*" at the end covers everything below, as the matching path globs do.
      const trailing = !double && i === pattern.length - 1 && pattern[i - 1] === '/';
      source += double || trailing ? '(.*)' : '([^/]*)';
      captures++;
    } else if (c === '?') {
      source += '([^/])';
      captures++;
    } else if (c === '{') {
      const end = pattern.indexOf('}', i);
      if (end === -1) return { problem: 'has an unclosed "{"' };
      const body = pattern.slice(i + 1, end);
      if (/[{*?[\]]/.test(body)) return { problem: 'wildcards, classes and nested "{" inside "{…}" are not supported in a redirect match_path' };
      source += `(?:${body.split(',').map(escapeRegex).join('|')})`;
      i = end;
    } else if (c === '[') {
      const end = pattern.indexOf(']', i + 1);
      if (end === -1) return { problem: 'has an unclosed "["' };
      let body = pattern.slice(i + 1, end);
      const negated = body.startsWith('!') || body.startsWith('^');
      if (negated) body = body.slice(1);
      if (body === '' || body.includes('[') || body.includes('/')) return { problem: 'has an empty "[]" class, or one holding "[" or "/"' };
      source += `[${negated ? '^/' : ''}${body.replace(/[\\\]^]/g, '\\$&')}]`;
      i = end;
    } else if (c === '}' || c === ']') {
      return { problem: `has a "${c}" without its opening bracket` };
    } else {
      source += escapeRegex(c);
    }
  }
  return { re: new RegExp(`^${source}$`, 's'), captures };
}

/** Where `$n` references may appear in redirect_to: after the authority of an absolute URL. */
function pathStart(target: string): number {
  const scheme = /^https?:\/\//i.exec(target);
  if (scheme === null) return 0;
  const slash = target.indexOf('/', scheme[0].length);
  return slash === -1 ? target.length : slash;
}

/**
 * The problems of one redirect rule as {field, message} (field relative to
 * the rule: type, status_code, match_path, redirect_to); [] when the edge can
 * answer it.
 */
export function redirectRuleProblems(rule: RedirectRuleText): { field: string; message: string }[] {
  const problems: { field: string; message: string }[] = [];
  if (!(REDIRECT_TYPES as readonly string[]).includes(rule.type)) problems.push({ field: 'type', message: `must be one of ${REDIRECT_TYPES.join(', ')}` });
  if (!(REDIRECT_STATUSES as readonly number[]).includes(rule.status_code)) problems.push({ field: 'status_code', message: `must be one of ${REDIRECT_STATUSES.join(', ')}` });
  const compiled = compileRedirectPattern(rule.match_path);
  if ('problem' in compiled) problems.push({ field: 'match_path', message: compiled.problem });
  if (rule.type === 'path') {
    if (!/^(\/|https?:\/\/[^/?#\s]+)\S*$/i.test(rule.redirect_to)) {
      problems.push({ field: 'redirect_to', message: 'must be an absolute path or an http(s) URL' });
    } else {
      const start = pathStart(rule.redirect_to);
      for (const ref of rule.redirect_to.matchAll(/\$(\d)/g)) {
        const n = Number(ref[1]);
        const available = 'captures' in compiled ? compiled.captures : 0;
        if (n < 1 || n > available) problems.push({ field: 'redirect_to', message: `$${n} refers to no wildcard of match_path (it has ${available})` });
        else if (ref.index < start) problems.push({ field: 'redirect_to', message: `$${n} must be in the path of the URL, not its scheme or host` });
      }
    }
  } else if (rule.type === 'http_to_https' && rule.redirect_to !== '') {
    problems.push({ field: 'redirect_to', message: 'must be empty for http_to_https' });
  }
  return problems;
}

/** redirect_to with `$n` replaced by the captures; a leading "//" (which would name another host) collapses to "/". */
export function expandRedirectTarget(target: string, match: RegExpExecArray): string {
  const out = target.includes('$') ? target.replace(/\$(\d)/g, (_, n: string) => match[Number(n)] ?? '') : target;
  return out.startsWith('/') ? out.replace(/^\/{2,}/, '/') : out;
}
