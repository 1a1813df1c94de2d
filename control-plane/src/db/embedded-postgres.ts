// Embedded PostgreSQL for `npm start` without DATABASE_URL: PGlite (real
// Postgres compiled to WASM) persisted under DATA_DIR, exposed on a loopback
// port through pglite-socket so MikroORM's ordinary postgresql driver talks to it.
//
// One owner: the process that opens the directory holds its lock
// (data-dir-lock.ts) until it closes it. Other processes either wait for it,
// fail with DataDirBusyError, or send their work to the owner's command socket
// (command-channel.ts).
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PGlite } from '@electric-sql/pglite';
import { DataDirBusyError, lockDataDir, type DataDirLock, type LockHolder } from './data-dir-lock.ts';

export interface EmbeddedPostgres {
  url: string;
  /** The PGlite data directory. */
  dir: string;
  lock: DataDirLock;
  close(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Who opens it, for the lock's description (`control-plane`, `admin:create`...). */
  role?: string;
  /**
   * When another process holds the directory: `fail` (the default) throws
   * DataDirBusyError at once; a function is asked once, with the holder, and
   * returning true waits until the holder lets go.
   */
  whenBusy?: 'fail' | ((holder: LockHolder | undefined) => boolean);
}

/** The directory could not be opened as a database; the message is one line saying what to do. */
export class EmbeddedDatabaseError extends Error {}

export function lockPathFor(dir: string): string {
  return `${path.resolve(dir)}.lock`;
}

/**
 * Where the owner of `dir` listens for commands: `<DATA_DIR>/run/control.sock`
 * (directory mode 0700), or a per-user directory in the temp folder when that
 * path is longer than a Unix socket address allows; a named pipe on Windows.
 */
export function commandSocketPathFor(dir: string): string {
  const resolved = path.resolve(dir);
  const hash = createHash('sha256').update(resolved).digest('hex').slice(0, 16);
  if (process.platform === 'win32') return `\\\\?\\pipe\\streaming-platform-${hash}`;
  const preferred = path.join(path.dirname(resolved), 'run', 'control.sock');
  if (Buffer.byteLength(preferred) <= 100) return preferred;
  return path.join(os.tmpdir(), `streaming-platform-${os.userInfo().uid}`, `${hash}.sock`);
}

export async function startEmbeddedPostgres(dataDir: string, options: EmbeddedOptions = {}): Promise<EmbeddedPostgres> {
  const dir = path.resolve(dataDir);
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  // PGlite is loaded only by the process that opens an embedded database (never with DATABASE_URL).
  const [{ PGlite: Pglite }, { PGLiteSocketServer }] = await Promise.all([import('@electric-sql/pglite'), import('@electric-sql/pglite-socket')]);
  const lock = await acquire(dir, options);
  let db: PGlite;
  try {
    fs.mkdirSync(dir, { recursive: true });
    db = await Pglite.create(dir);
  } catch (error) {
    lock.release();
    throw openFailure(dir, error);
  }
  try {
    // One connection: PGlite is single-session, and the pool is sized to match.
    const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: 1 });
    await server.start();
    const conn = server.getServerConn();
    let closing: Promise<void> | undefined;
    return {
      url: `postgresql://postgres@${conn}/postgres`,
      dir,
      lock,
      close() {
        closing ??= (async () => {
          try {
            await server.stop();
            await db.close();
          } finally {
            lock.release();
          }
        })();
        return closing;
      },
    };
  } catch (error) {
    await db.close().catch(() => {});
    lock.release();
    throw error;
  }
}

async function acquire(dir: string, options: EmbeddedOptions): Promise<DataDirLock> {
  const lockPath = lockPathFor(dir);
  const role = options.role ?? 'control-plane';
  let waiting = false;
  for (;;) {
    try {
      return lockDataDir(lockPath, role);
    } catch (error) {
      if (!(error instanceof DataDirBusyError)) throw error;
      if (!waiting) {
        const decide = options.whenBusy;
        waiting = typeof decide === 'function' && decide(error.holder);
        if (!waiting) throw error;
      }
      // The holder is alive (the kernel would have dropped its lock otherwise): poll until it is done.
      await sleep(200);
    }
  }
}

function openFailure(dir: string, error: unknown): Error {
  const err = error as NodeJS.ErrnoException;
  if (err?.code && typeof err.code === 'string' && err.syscall) {
    return new EmbeddedDatabaseError(`cannot open the embedded database in ${dir} (${err.code}: ${err.message}); check that this user may read and write it, or set DATA_DIR elsewhere`);
  }
  const reason = String(err?.message ?? error).split('\n')[0];
  return new EmbeddedDatabaseError(
    `the embedded database in ${dir} is damaged and cannot be opened (${reason}); ` +
    `stop every process using it, then move it aside to start with an empty database (mv '${dir}' '${dir}.damaged-${new Date().toISOString().slice(0, 10)}') or restore it from a backup`,
  );
}
