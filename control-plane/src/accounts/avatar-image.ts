// What an uploaded avatar may be and what is kept of it (document 1 §4.1, §8):
// JPEG or PNG as the bytes say (file-type), never as the name or declared type
// say — and a file whose name or declared type contradicts its bytes is
// refused as mislabelled. Accepted images are decoded and re-encoded (sharp):
// turned upright from their EXIF orientation, fitted inside 512×512, and
// written without any metadata (EXIF with GPS, XMP, IPTC, ICC, text chunks).
import { lazy } from '../core/lazy.ts';
import { ApiError } from '../http/errors.ts';
import type { UploadedFile } from '../http/route.ts';

/** Document 1 §8: "JPEG or PNG, max 5 MB" (5 MiB). */
export const AVATAR_MAX_BYTES = 5 * 1024 * 1024;
/** Stored avatars fit inside this square (larger ones are scaled down, smaller ones kept). */
export const AVATAR_MAX_SIDE = 512;
/** Larger pictures are refused before decoding (a small PNG can claim a huge canvas). */
export const AVATAR_MAX_INPUT_PIXELS = 100_000_000;

export type AvatarFormat = 'jpeg' | 'png';

export const AVATAR_FORMATS: Record<AvatarFormat, { mime: string; extension: 'jpg' | 'png'; names: string[]; declared: string[] }> = {
  jpeg: { mime: 'image/jpeg', extension: 'jpg', names: ['jpg', 'jpeg', 'jpe', 'jfif'], declared: ['image/jpeg', 'image/jpg', 'image/pjpeg'] },
  png: { mime: 'image/png', extension: 'png', names: ['png'], declared: ['image/png', 'image/apng'] },
};

export interface AvatarImage {
  format: AvatarFormat;
  bytes: Buffer;
  width: number;
  height: number;
}

const fileType = lazy(() => import('file-type'));
const sharpModule = lazy(() => import('sharp'));

const fileError = (message: string) => new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'file', message }] });

/** The format the bytes are, when it is one we take. */
async function sniff(bytes: Buffer): Promise<AvatarFormat | undefined> {
  const type = await (await fileType()).fileTypeFromBuffer(bytes);
  if (type?.mime === 'image/jpeg') return 'jpeg';
  // An animated PNG is a PNG whose first frame is the picture.
  if (type?.mime === 'image/png' || type?.mime === 'image/apng') return 'png';
  return undefined;
}

/** What the client said the file is, where it said anything: the name's extension and the part's Content-Type. */
function contradiction(file: UploadedFile, format: AvatarFormat): string | undefined {
  const { names, declared } = AVATAR_FORMATS[format];
  const what = format === 'jpeg' ? 'a JPEG' : 'a PNG';
  const dot = file.filename.lastIndexOf('.');
  const extension = dot > 0 ? file.filename.slice(dot + 1).toLowerCase() : '';
  if (extension && !names.includes(extension)) return `The file is ${what} image but is named .${extension.slice(0, 16)}; upload it under its own type`;
  const type = file.declaredType.split(';')[0]!.trim().toLowerCase();
  if (type && type !== 'application/octet-stream' && !declared.includes(type)) return `The file is ${what} image but was sent as ${type.slice(0, 64)}; upload it under its own type`;
  return undefined;
}

/**
 * Checks an upload and re-encodes it. Not JPEG or PNG bytes → 415; bytes that
 * contradict the file's name or declared type, or that do not decode → 400
 * on `file`.
 */
export async function reencodeAvatar(file: UploadedFile): Promise<AvatarImage> {
  const format = await sniff(file.bytes);
  if (!format) {
    throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'The avatar must be a JPEG or PNG image', { errors: [{ field: 'file', message: 'Must be a JPEG or PNG image (judged by its content)' }] });
  }
  const mislabelled = contradiction(file, format);
  if (mislabelled) throw fileError(mislabelled);
  const sharp = (await sharpModule()).default;
  const pipeline = sharp(file.bytes, { autoOrient: true, limitInputPixels: AVATAR_MAX_INPUT_PIXELS, failOn: 'warning' })
    .resize({ width: AVATAR_MAX_SIDE, height: AVATAR_MAX_SIDE, fit: 'inside', withoutEnlargement: true });
  // sharp writes no metadata unless asked (keepMetadata/withExif...): what leaves is pixels only.
  const encoder = format === 'jpeg' ? pipeline.jpeg({ quality: 85, mozjpeg: true }) : pipeline.png({ compressionLevel: 9 });
  try {
    const { data, info } = await encoder.toBuffer({ resolveWithObject: true });
    return { format, bytes: data, width: info.width, height: info.height };
  } catch (error) {
    const message = String((error as Error)?.message ?? '');
    if (/pixel limit/i.test(message)) throw fileError(`The image is too large: at most ${AVATAR_MAX_INPUT_PIXELS} pixels`);
    throw fileError('The image could not be read (damaged or incomplete file)');
  }
}
