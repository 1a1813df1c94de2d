// The Content-Encoding of request bodies (RFC 9110 §8.4). JSON bodies may
// come gzip-, deflate- or br-coded in one coding (koa-body decodes them, its
// size limit counting the decoded bytes); multipart uploads only uncoded.
// An unknown coding, or several stacked, is 415 with the Accept-Encoding the
// route takes (RFC 9110 §15.5.16); bytes that do not decode as the coding
// they claim are the client's fault: 400, never the zlib error's 500.
import { ApiError } from './errors.ts';

/** The codings a JSON body may be sent in, besides identity. */
export const JSON_BODY_CODINGS = ['gzip', 'deflate', 'br'] as const;

/**
 * A body's one content coding, lower-cased (`identity` when none; `x-gzip`
 * is `gzip`, RFC 9110 §8.4.1.3); 415 UNSUPPORTED_MEDIA_TYPE for any other.
 */
export function bodyCoding(header: string | undefined, accepted: readonly string[]): string {
  const coding = (header ?? '').trim().toLowerCase();
  if (coding === '' || coding === 'identity') return 'identity';
  const canonical = coding === 'x-gzip' ? 'gzip' : coding;
  if (accepted.includes(canonical)) return canonical;
  const acceptEncoding = accepted.length ? accepted.join(', ') : 'identity';
  return refuse(`The Content-Encoding ${JSON.stringify(coding.slice(0, 64))} is not accepted: send the body uncoded${accepted.length ? ` or in one of ${acceptEncoding}` : ''}`, acceptEncoding);
}

function refuse(message: string, acceptEncoding: string): never {
  throw new ApiError('UNSUPPORTED_MEDIA_TYPE', message, { headers: { 'accept-encoding': acceptEncoding } });
}

/** A zlib or brotli stream's error (code `Z_DATA_ERROR`, `Z_BUF_ERROR`, `ERR__ERROR_FORMAT_…`), as a 400 on the body. */
export function undecodableBody(error: unknown, coding: string): ApiError | undefined {
  const e = error as { errno?: unknown; code?: unknown; status?: unknown };
  if (typeof e?.errno !== 'number' || typeof e.code !== 'string' || e.status !== undefined || !/^(Z_|ERR_)/.test(e.code)) return undefined;
  return new ApiError('VALIDATION_ERROR', `The request body does not decode as ${coding}`, {
    errors: [{ field: '(body)', message: `Not valid ${coding} data (Content-Encoding: ${coding})` }],
  });
}
