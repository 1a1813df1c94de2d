// PUT /v1/users/me/avatar and the public avatar files (document 1 §4.1, §8):
// the bytes decide the type, metadata is stripped by re-encoding, and every
// refusal keeps the previous avatar (record and file).
import fs from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import sharp from 'sharp';
import t from 'tap';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createLoggedInUser, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const avatarsDir = path.join(cp.config.dataDir, 'avatars');

// ---- images, made with sharp itself -------------------------------------------

/** A landscape JPEG (1200×800) that says "rotate 90°" (EXIF Orientation 6), with GPS position, camera make, XMP and an ICC profile. */
async function jpegWithGps(): Promise<Buffer> {
  return sharp({ create: { width: 1200, height: 800, channels: 3, background: '#aa3344' } })
    .withMetadata({ orientation: 6 })
    .withExifMerge({
      IFD0: { Make: 'SecretCam' },
      IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 24/1', GPSLongitudeRef: 'E', GPSLongitude: '2/1 21/1 7/1' },
    })
    .withXmp('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:GPSLatitude="48,51.4N"/></rdf:RDF></x:xmpmeta>')
    .jpeg()
    .toBuffer();
}

async function png(width = 300, height = 200): Promise<Buffer> {
  return sharp({ create: { width, height, channels: 4, background: { r: 0, g: 90, b: 255, alpha: 0.5 } } })
    .withExif({ IFD0: { Make: 'SecretCam' } })
    .png()
    .toBuffer();
}

/** A small PNG whose header claims width × height pixels (IHDR rewritten, CRC fixed): a decompression bomb's shape. */
async function pngClaiming(width: number, height: number): Promise<Buffer> {
  const bytes = Buffer.from(await png(8, 8));
  // Signature (8), IHDR length (4), "IHDR" (4), width, height, ... CRC over type and data (13 bytes).
  bytes.writeUInt32BE(width, 16);
  bytes.writeUInt32BE(height, 20);
  bytes.writeUInt32BE(zlib.crc32(bytes.subarray(12, 29)), 29);
  return bytes;
}

/** The tags of IFD0 in an EXIF block as sharp's metadata() returns it ("Exif\0\0" + TIFF). */
function exifIfd0Tags(exif: Buffer): number[] {
  const tiff = exif.subarray(6);
  const little = tiff.toString('latin1', 0, 2) === 'II';
  const u16 = (at: number) => (little ? tiff.readUInt16LE(at) : tiff.readUInt16BE(at));
  const u32 = (at: number) => (little ? tiff.readUInt32LE(at) : tiff.readUInt32BE(at));
  const ifd = u32(4);
  return Array.from({ length: u16(ifd) }, (_, i) => u16(ifd + 2 + i * 12));
}
const GPS_INFO_TAG = 0x8825;

// ---- requests ----------------------------------------------------------------

function upload(account: TestAccount, bytes: Buffer, filename: string, type: string, extra: Record<string, string> = {}) {
  const form = new FormData();
  form.append('file', new Blob([new Uint8Array(bytes)], { type }), filename);
  return cp.request('PUT', '/v1/users/me/avatar', { headers: bearer(account.accessToken, extra), body: form });
}

/** The avatar file behind a URL of ours, fetched through the API (path only: PUBLIC_URL names no listening port in tests). */
function fetchAvatar(url: string) {
  return fetch(cp.url + new URL(url).pathname);
}

const storedUrl = async (cp: TestControlPlane, id: string) =>
  (await query<{ avatar_url: string | null }>(cp, 'select avatar_url from app_user where id = ?', [id]))[0]!.avatar_url;

const filesOnDisk = async () => (await fs.readdir(avatarsDir).catch(() => [] as string[])).sort();

t.test('PUT /v1/users/me/avatar: an uploaded JPEG with GPS EXIF comes back without it, upright and within 512×512', async (t) => {
  const me = await createLoggedInUser(cp);
  const original = await jpegWithGps();
  const before = await sharp(original).metadata();
  t.ok(exifIfd0Tags(before.exif!).includes(GPS_INFO_TAG), 'the upload carries a GPS position');
  t.equal(before.orientation, 6);
  t.ok(before.xmp && before.icc, 'and XMP and an ICC profile');

  const res = await upload(me, original, 'holiday.jpg', 'image/jpeg');
  t.equal(res.status, 200, res.text);
  const url: string = res.body.data.avatar_url;
  t.match(url, /\/v1\/avatars\/[0-9a-f]{32}\.jpg$/);
  t.equal(res.body.data.id, me.id);
  t.match(res.headers.get('etag'), /^"/, 'the user record carries its ETag');
  t.equal(await storedUrl(cp, me.id), url, 'stored on the user');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(me.accessToken) })).body.data.avatar_url, url);

  const served = await fetchAvatar(url);
  t.equal(served.status, 200);
  t.equal(served.headers.get('content-type'), 'image/jpeg');
  t.equal(served.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  t.equal(served.headers.get('cross-origin-resource-policy'), 'cross-origin', 'front ends on other origins may show it');
  t.equal(served.headers.get('x-content-type-options'), 'nosniff');
  const bytes = Buffer.from(await served.arrayBuffer());
  const after = await sharp(bytes).metadata();
  t.equal(after.format, 'jpeg');
  t.equal(after.exif, undefined, 'no EXIF: no GPS position, no camera');
  t.equal(after.xmp, undefined, 'no XMP');
  t.equal(after.iptc, undefined, 'no IPTC');
  t.equal(after.icc, undefined, 'no ICC profile');
  t.equal(bytes.indexOf(Buffer.from('Exif\0\0')), -1, 'no EXIF block in the bytes');
  t.notOk(bytes.includes('SecretCam') || bytes.includes('GPSLatitude'), 'nothing of the metadata in the bytes');
  t.same([after.width, after.height], [341, 512], 'turned upright (EXIF orientation applied) and fitted inside 512×512');
  t.equal(after.orientation, undefined);
  t.same(await filesOnDisk(), [url.slice(url.lastIndexOf('/') + 1)], 'one file stored under DATA_DIR/avatars');
});

t.test('PUT /v1/users/me/avatar: a PNG renamed .jpg, a 6 MB file and a text file are refused with the old avatar kept', async (t) => {
  const me = await createLoggedInUser(cp);
  const first = await upload(me, await jpegWithGps(), 'me.jpg', 'image/jpeg');
  t.equal(first.status, 200);
  const kept: string = first.body.data.avatar_url;
  const keptBytes = Buffer.from(await (await fetchAvatar(kept)).arrayBuffer());
  const filesBefore = await filesOnDisk();

  const keptEverything = async (what: string) => {
    t.equal(await storedUrl(cp, me.id), kept, `${what}: avatar_url unchanged`);
    const served = await fetchAvatar(kept);
    t.equal(served.status, 200, `${what}: the old avatar is still served`);
    t.same(Buffer.from(await served.arrayBuffer()), keptBytes, `${what}: the same bytes`);
    t.same(await filesOnDisk(), filesBefore, `${what}: no file added or removed`);
  };

  const renamed = await upload(me, await png(), 'me.jpg', 'image/jpeg');
  t.equal(renamed.status, 400, 'a PNG named and declared as JPEG is refused as mislabelled');
  t.equal(renamed.body.code, 'VALIDATION_ERROR');
  t.match(renamed.body.errors, [{ field: 'file', message: /PNG.*\.jpg/ }]);
  await keptEverything('PNG renamed .jpg');

  const renamedOnly = await upload(me, await png(), 'me.jpg', 'application/octet-stream');
  t.equal(renamedOnly.status, 400, 'the name alone contradicting the bytes is enough');
  const declaredOnly = await upload(me, await png(), 'me', 'image/jpeg');
  t.equal(declaredOnly.status, 400, 'so is the declared type alone');
  await keptEverything('mislabelled');

  const sixMegabytes = Buffer.concat([(await jpegWithGps()), Buffer.alloc(6_000_000)]);
  const large = await upload(me, sixMegabytes, 'big.jpg', 'image/jpeg');
  t.equal(large.status, 413);
  t.equal(large.body.code, 'PAYLOAD_TOO_LARGE');
  t.match(large.body.message, /5242880 bytes/);
  await keptEverything('6 MB');

  const text = await upload(me, Buffer.from('name,email\nGrace,grace@example.com\n'), 'notes.txt', 'text/plain');
  t.equal(text.status, 415);
  t.equal(text.body.code, 'UNSUPPORTED_MEDIA_TYPE');
  t.match(text.body.errors, [{ field: 'file', message: /JPEG or PNG/ }]);
  const textAsJpeg = await upload(me, Buffer.from('not an image at all'), 'photo.jpg', 'image/jpeg');
  t.equal(textAsJpeg.status, 415, 'a name and a declared type do not make text an image');
  await keptEverything('text file');

  const damaged = Buffer.concat([(await jpegWithGps()).subarray(0, 400), Buffer.alloc(2000, 0x55)]);
  const broken = await upload(me, damaged, 'cut.jpg', 'image/jpeg');
  t.equal(broken.status, 400, 'JPEG bytes that do not decode');
  t.match(broken.body.errors, [{ field: 'file', message: /could not be read/ }]);
  await keptEverything('damaged JPEG');

  const bomb = await upload(me, await pngClaiming(15_000, 15_000), 'huge.png', 'image/png');
  t.equal(bomb.status, 400, 'a picture over 100 megapixels is refused before decoding');
  t.match(bomb.body.errors, [{ field: 'file', message: /too large: at most 100000000 pixels/ }]);
  await keptEverything('225-megapixel PNG');
});

t.test('PUT /v1/users/me/avatar takes a PNG as a PNG and removes the previous file', async (t) => {
  const me = await createLoggedInUser(cp);
  const first = (await upload(me, await jpegWithGps(), 'a.jpg', 'image/jpeg')).body.data.avatar_url as string;
  const res = await upload(me, await png(1024, 2048), 'portrait.png', 'image/png');
  t.equal(res.status, 200, res.text);
  const url: string = res.body.data.avatar_url;
  t.match(url, /\/v1\/avatars\/[0-9a-f]{32}\.png$/);
  const served = await fetchAvatar(url);
  t.equal(served.headers.get('content-type'), 'image/png');
  const meta = await sharp(Buffer.from(await served.arrayBuffer())).metadata();
  t.same([meta.format, meta.width, meta.height, meta.hasAlpha], ['png', 256, 512, true], 'scaled into 512×512, transparency kept');
  t.equal(meta.exif, undefined, 'no EXIF');
  t.equal((await fetchAvatar(first)).status, 404, 'the previous avatar is gone');
  t.notOk((await filesOnDisk()).includes(first.slice(first.lastIndexOf('/') + 1)), 'and its file removed');
  const unnamed = await upload(me, await png(), '', 'application/octet-stream');
  t.equal(unnamed.status, 200, 'a file with no name and no declared type is judged by its bytes alone');
});

t.test('PUT /v1/users/me/avatar refuses malformed uploads with 4xx and changes nothing', async (t) => {
  const me = await createLoggedInUser(cp);
  const image = await png();
  const kept = (await upload(me, image, 'a.png', 'image/png')).body.data.avatar_url as string;
  const filesBefore = await filesOnDisk();
  const put = (body: FormData | string | undefined, headers: Record<string, string> = {}) =>
    cp.request('PUT', '/v1/users/me/avatar', { headers: bearer(me.accessToken, headers), body });

  const noFile = new FormData();
  noFile.append('note', 'hello');
  const missing = await put(noFile);
  t.equal(missing.status, 400);
  t.match(missing.body.errors, [{ field: 'note', message: 'Unknown field' }, { field: 'file', message: /Required/ }]);

  const wrongField = new FormData();
  wrongField.append('avatar', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'a.png');
  const wrong = await put(wrongField);
  t.equal(wrong.status, 400);
  t.match(wrong.body.errors, [{ field: 'avatar', message: 'Unknown field' }, { field: 'file', message: /Required/ }]);

  const two = new FormData();
  two.append('file', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'a.png');
  two.append('file', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'b.png');
  t.equal((await put(two)).status, 400, 'two files in the field');

  const emptyFile = new FormData();
  emptyFile.append('file', new Blob([], { type: 'image/png' }), 'a.png');
  t.equal((await put(emptyFile)).status, 400, 'an empty file');

  t.equal((await put(undefined)).status, 400, 'no body at all');
  t.equal((await put(JSON.stringify({ file: 'x' }), { 'content-type': 'application/json' })).status, 415, 'JSON instead of a form');
  t.equal((await put('--x\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n\r\nabc', { 'content-type': 'multipart/form-data; boundary=zzz' })).status, 400, 'a malformed multipart body');

  const anonymousForm = new FormData();
  anonymousForm.append('file', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'a.png');
  t.equal((await cp.request('PUT', '/v1/users/me/avatar', { body: anonymousForm })).status, 401, 'no token');

  const etag = (await cp.request('GET', '/v1/users/me', { headers: bearer(me.accessToken) })).headers.get('etag')!;
  await query(cp, 'update app_user set version = version + 1 where id = ?', [me.id]);
  const staleForm = new FormData();
  staleForm.append('file', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'a.png');
  t.equal((await put(staleForm, { 'if-match': etag })).status, 412, 'a stale If-Match');

  t.equal(await storedUrl(cp, me.id), kept, 'avatar_url unchanged');
  t.same(await filesOnDisk(), filesBefore, 'no file added or removed');
});

t.test('GET /v1/avatars/{file} serves only avatar names: unknown ones are 404, anything else 400', async (t) => {
  t.equal((await cp.request('GET', `/v1/avatars/${'0'.repeat(32)}.jpg`)).status, 404);
  for (const name of ['..%2f..%2fetc%2fpasswd', '..%2fpg.lock', `${'0'.repeat(32)}.gif`, `${'A'.repeat(32)}.jpg`, `.${'0'.repeat(32)}.jpg.partial`]) {
    const res = await cp.request('GET', `/v1/avatars/${name}`);
    t.equal(res.status, 400, name);
    t.equal(res.body.code, 'VALIDATION_ERROR');
  }
});

t.test('the OpenAPI document shows the upload as multipart with a binary file and the avatar as an image', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  const put = doc.paths['/v1/users/me/avatar'].put;
  const form = put.requestBody.content['multipart/form-data'];
  t.match(form.schema, { type: 'object', required: ['file'], properties: { file: { type: 'string', format: 'binary' } } });
  t.same(form.encoding, { file: { contentType: 'image/jpeg, image/png' } });
  t.ok(put.responses['413'] && put.responses['415'] && put.responses['412'], '413, 415 and 412 documented');
  t.ok(put.responses['200'].content['application/json'].schema.properties.data.properties.avatar_url);
  const get = doc.paths['/v1/avatars/{file}'].get;
  t.same(Object.keys(get.responses['200'].content).sort(), ['image/jpeg', 'image/png']);
  t.same(get.security, [], 'public');
});
