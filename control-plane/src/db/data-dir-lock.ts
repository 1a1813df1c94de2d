// The embedded database has one owner: the process that opens PGlite holds an
// exclusive OS-level lock on `<pg dir>.lock` (fcntl OFD lock on Linux, flock on
// macOS, LockFileEx on Windows, through fs-native-extensions). The kernel drops
// the lock when the holder exits in any way, kill -9 included, so a stale lock
// cannot exist. The file itself is never deleted (deleting a lock file lets two
// processes lock two different inodes); its content only names the holder in
// messages.
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const native = require('fs-native-extensions') as { tryLock(fd: number): boolean; unlock(fd: number): void };

export interface LockHolder {
  pid: number;
  /** What holds it: `control-plane`, `admin:create`, `migrate`... */
  role: string;
  since: string;
}

export interface DataDirLock {
  readonly path: string;
  release(): void;
}

export class DataDirBusyError extends Error {
  readonly holder: LockHolder | undefined;
  readonly lockPath: string;
  constructor(lockPath: string, holder: LockHolder | undefined) {
    super(`${lockPath} is held by ${holder ? `${holder.role} (pid ${holder.pid})` : 'another process'}`);
    this.lockPath = lockPath;
    this.holder = holder;
  }
}

export function readLockHolder(lockPath: string): LockHolder | undefined {
  try {
    const parsed = JSON.parse(fs.readFileSync(lockPath, 'utf8')) as LockHolder;
    return typeof parsed.pid === 'number' ? parsed : undefined;
  } catch {
    return undefined; // empty while its holder is writing it, or never written
  }
}

/** Takes the lock or throws DataDirBusyError naming the holder. */
export function lockDataDir(lockPath: string, role: string): DataDirLock {
  const fd = fs.openSync(lockPath, 'a+', 0o600);
  let locked = false;
  try {
    locked = native.tryLock(fd);
  } finally {
    if (!locked) fs.closeSync(fd);
  }
  if (!locked) throw new DataDirBusyError(lockPath, readLockHolder(lockPath));
  const holder: LockHolder = { pid: process.pid, role, since: new Date().toISOString() };
  const text = Buffer.from(JSON.stringify(holder) + '\n');
  fs.ftruncateSync(fd, 0);
  fs.writeSync(fd, text, 0, text.length, 0);
  let released = false;
  return {
    path: lockPath,
    release() {
      if (released) return;
      released = true;
      try {
        fs.ftruncateSync(fd, 0);
        native.unlock(fd);
      } finally {
        fs.closeSync(fd);
      }
    },
  };
}
