// Commands that work on the database (admin:create, migrate, ...) and the way
// they reach it. PGlite is single-session, so only the process holding the
// embedded directory's lock may talk to it. A command therefore:
//   - with DATABASE_URL, connects to PostgreSQL itself;
//   - with the embedded database and nobody holding it, opens it itself
//     (holding the lock while it runs);
//   - while a control plane holds it, sends the command over the owner's
//     command socket (`DATA_DIR/run/control.sock`, only its user may reach
//     it), and the owner runs the same code on its own connection.
// Adding a command is one `defineCommand` and one entry in main.ts's list;
// its CLI (control-plane/src/cli/) passes the entities the command maps.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EntityClass } from '@mikro-orm/core';
import type { Logger } from 'pino';
import { z } from 'zod';
import { ConfigError, type Config } from '../config/config.ts';
import { deriveKey, DEV_KEY_FILE, loadSecretsKey, SecretBox, SecretBoxError, SECRET_BOX_PURPOSE, TOKEN_PEPPER_PURPOSE } from '../crypto/secret-box.ts';
import { createStore, namespacePrefix, type KeyValueStore } from '../store/index.ts';
import { deploymentNamespace } from './deployment.ts';
import { DataDirBusyError } from './data-dir-lock.ts';
import { commandSocketPathFor, EmbeddedDatabaseError } from './embedded-postgres.ts';
import { openDatabase, type Database } from './orm.ts';

export interface CommandIO {
  out(line: string): void;
  err(line: string): void;
}

/** Platform services a command may need beyond the database, made on first use (a command that needs none opens nothing). */
export interface CommandServices {
  /** The configuration of the control plane the command works for: the running one's when run through it, the CLI's own otherwise. */
  config: Config;
  /** The secret box (CoreServices.secretBox) of the control planes on this database, from the same key as the pepper. */
  secretBox(): Promise<SecretBox>;
  /** The token pepper (CoreServices.tokenPepper) of the control planes on this database: SECRETS_KEY's, or DATA_DIR's dev key's. */
  tokenPepper(): Promise<Buffer>;
  /**
   * Publishes on the store running control planes subscribe to: Redis
   * (REDIS_URL), or the owner's own store when run through it. False when
   * this process has no way to reach them (on its own without REDIS_URL).
   */
  publish(channel: string, message: string): Promise<boolean>;
}

export interface CommandContext {
  db: Database;
  /** Base URL of the control plane serving this database (the running one's, when run through it). */
  publicUrl: string;
  io: CommandIO;
  /** Set by runCommand and serveCommands; absent when code calls a command's run directly (tests, benchmarks). */
  services?: CommandServices;
}

export interface Command<A = unknown> {
  name: string;
  /** Validates the arguments again where the command runs (the owner trusts no input). */
  args: z.ZodType<A>;
  /** Whether opening the database for this command applies pending migrations first (default true). */
  migrateOnOpen?: boolean;
  /** Returns the exit code (0 when nothing is returned). */
  run(context: CommandContext, args: A): Promise<number | void>;
}

export function defineCommand<A>(command: Command<A>): Command<A> {
  return command;
}

/** The command failed for a reason the user can act on: printed as one line, exit code 1. */
export class CommandError extends Error {}

const consoleIO: CommandIO = { out: (line) => console.log(line), err: (line) => console.error(line) };

const MAX_REQUEST_BYTES = 64 * 1024;
/** How long a command waits for an owner that holds the directory but does not answer yet (it may be starting). */
const OWNER_WAIT_MS = 120_000;

/**
 * Runs a command from a CLI process. Returns the exit code; failures the user
 * can act on (configuration, a busy or damaged directory) are printed as one
 * line, never as a stack trace.
 */
export async function runCommand<A>(command: Command<A>, args: A, config: Config, options: RunOptions = {}): Promise<number> {
  const io = options.io ?? consoleIO;
  try {
    if (config.DATABASE_URL) return await runLocally(command, args, config, io, options);
    const pgDir = path.join(config.dataDir, 'pg');
    const deadline = Date.now() + OWNER_WAIT_MS;
    let told = false;
    for (;;) {
      try {
        return await runLocally(command, args, config, io, options);
      } catch (error) {
        if (!(error instanceof DataDirBusyError)) throw error;
        const socket = commandSocketPathFor(pgDir);
        const code = await sendToOwner(socket, command.name, args, io);
        if (code !== 'unreachable') return code;
        if (Date.now() > deadline) {
          throw new CommandError(`${pgDir} is held by ${error.holder ? `${error.holder.role} (pid ${error.holder.pid})` : 'another process'}, which does not accept commands; wait until it finishes or stop it`);
        }
        if (!told) {
          told = true;
          io.err(`${pgDir} is in use by ${error.holder ? `${error.holder.role} (pid ${error.holder.pid})` : 'another process'}: waiting for it...`);
        }
        await sleep(250);
      }
    }
  } catch (error) {
    if (error instanceof CommandError || error instanceof EmbeddedDatabaseError || error instanceof ConfigError || error instanceof SecretBoxError) {
      io.err(`${command.name}: ${error.message}`);
      return 1;
    }
    throw error;
  }
}

/** A secret the control planes of a database sealed (with its AAD), which only their secrets key opens. */
export interface SealedSample {
  sealed: string;
  aad: string;
}

export interface RunOptions {
  entities?: readonly EntityClass<object>[];
  io?: CommandIO;
  /**
   * A secret the database's control planes sealed, if any (none before the first start): a command run in its
   * own process uses the secrets key only if it opens this, since what it derives from another (a token's
   * hash under its pepper) would not work on those control planes.
   */
  deploymentSecret?: (db: Database) => Promise<SealedSample | undefined>;
}

async function runLocally<A>(command: Command<A>, args: A, config: Config, io: CommandIO, options: RunOptions): Promise<number> {
  const db = await openDatabase({
    databaseUrl: config.DATABASE_URL,
    dataDir: config.dataDir,
    entities: options.entities ?? [],
    migrate: command.migrateOnOpen !== false,
    embeddedOptions: { role: command.name, whenBusy: 'fail' },
  });
  const services = localServices(config, db, options.deploymentSecret);
  try {
    return (await command.run({ db, publicUrl: config.publicUrl, io, services }, args)) ?? 0;
  } finally {
    await services.close();
    await db.close();
  }
}

/**
 * A command's services when it runs in its own process: the pepper derived from the same key as the control plane's,
 * Redis when configured, in the namespace the control planes on this database use.
 */
function localServices(config: Config, db: Database, deploymentSecret: RunOptions['deploymentSecret']): CommandServices & { close(): Promise<void> } {
  let secretsKey: Promise<Buffer> | undefined;
  const key = () => (secretsKey ??= deploymentKey(config, db, deploymentSecret));
  let store: KeyValueStore | undefined;
  return {
    config,
    async secretBox() {
      return new SecretBox(deriveKey(await key(), SECRET_BOX_PURPOSE));
    },
    async tokenPepper() {
      return deriveKey(await key(), TOKEN_PEPPER_PURPOSE);
    },
    async publish(channel, message) {
      if (!config.REDIS_URL) return false;
      store ??= createStore(config.REDIS_URL, namespacePrefix(await deploymentNamespace(config, db)));
      await store.publish(channel, message);
      return true;
    },
    async close() {
      await store?.close();
    },
  };
}

/**
 * The secrets key of the database's control planes, as a command in its own process finds it: SECRETS_KEY, or
 * DATA_DIR's dev key (made on first use). Where the database already holds a secret they sealed, a key that
 * does not open it is refused, and no dev key is made up: anything the command derived from it would be dead.
 */
async function deploymentKey(config: Config, db: Database, deploymentSecret: RunOptions['deploymentSecret']): Promise<Buffer> {
  const sample = await deploymentSecret?.(db);
  const given = config.SECRETS_KEY !== undefined && config.SECRETS_KEY.trim() !== '';
  const devKey = path.join(config.dataDir, DEV_KEY_FILE);
  const production = config.NODE_ENV === 'production';
  if (sample && !given && !production && !fs.existsSync(devKey)) {
    throw new CommandError(`this database's control planes seal their secrets with a key this command does not have (no SECRETS_KEY, no ${devKey}): `
      + 'run it with their SECRETS_KEY, or with --data-dir naming their data directory');
  }
  const key = await loadSecretsKey({ secretsKey: config.SECRETS_KEY, dataDir: config.dataDir, production });
  if (sample && !opensWith(key, sample)) {
    throw new CommandError(`the secrets key this command has (${given ? 'SECRETS_KEY' : devKey}) is not the one this database's control planes use: `
      + 'run it with their SECRETS_KEY, or with --data-dir naming their data directory');
  }
  return key;
}

function opensWith(key: Buffer, sample: SealedSample): boolean {
  try {
    new SecretBox(deriveKey(key, SECRET_BOX_PURPOSE)).open(sample.sealed, sample.aad);
    return true;
  } catch {
    return false;
  }
}

type Frame = { out: string } | { err: string } | { exit: number };

/** Sends the command to the owner's socket; 'unreachable' when nobody listens there (yet). */
function sendToOwner(socketPath: string, name: string, args: unknown, io: CommandIO): Promise<number | 'unreachable'> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    let connected = false;
    let exit: number | undefined;
    let buffered = '';
    socket.setEncoding('utf8');
    socket.once('connect', () => {
      connected = true;
      socket.write(JSON.stringify({ command: name, args }) + '\n');
    });
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      let newline: number;
      while ((newline = buffered.indexOf('\n')) !== -1) {
        const frame = JSON.parse(buffered.slice(0, newline)) as Frame;
        buffered = buffered.slice(newline + 1);
        if ('out' in frame) io.out(frame.out);
        else if ('err' in frame) io.err(frame.err);
        else exit = frame.exit;
      }
    });
    socket.once('error', (error: NodeJS.ErrnoException) => {
      if (!connected && ['ENOENT', 'ECONNREFUSED', 'ENOTSOCK'].includes(error.code ?? '')) resolve('unreachable');
      else if (exit === undefined) reject(new CommandError(`the control plane's command socket failed: ${error.message}`));
    });
    socket.once('close', () => {
      if (!connected) return;
      if (exit === undefined) reject(new CommandError('the control plane closed its command socket before the command finished (was it stopped?); check the result and run the command again if needed'));
      else resolve(exit);
    });
  });
}

export interface CommandServer {
  path: string;
  close(): Promise<void>;
}

/**
 * Runs commands for other processes while this one owns the embedded
 * database. The socket's directory is created with mode 0700 and the socket
 * chmod 0600: only the same user (or root) may connect.
 */
export async function serveCommands(options: {
  db: Database;
  commands: Command<any>[];
  publicUrl: string;
  log: Logger;
  /** The owner's own configuration, keys and store: a command run here hashes, seals and publishes as the owner does. */
  services: { config: Config; secretBox: SecretBox; tokenPepper: Buffer; store: Pick<KeyValueStore, 'publish'> };
}): Promise<CommandServer | undefined> {
  const { db, log } = options;
  if (!db.embeddedDir) return undefined;
  const socketPath = commandSocketPathFor(db.embeddedDir);
  const byName = new Map(options.commands.map((c) => [c.name, c]));
  const running = new Set<Promise<unknown>>();

  if (process.platform !== 'win32') {
    const dir = path.dirname(socketPath);
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    // In a shared temp folder the directory could be someone else's: only ours will do.
    if (fs.statSync(dir).uid !== process.getuid!()) throw new Error(`${dir} belongs to another user; set DATA_DIR to a shorter path of yours`);
    fs.chmodSync(dir, 0o700);
    // We hold the directory's lock, so a socket file left here is a dead owner's.
    fs.rmSync(socketPath, { force: true });
  }

  const server = net.createServer((socket) => {
    socket.setEncoding('utf8');
    let buffered = '';
    const send = (frame: Frame) => {
      if (!socket.destroyed) socket.write(JSON.stringify(frame) + '\n');
    };
    const onData = (chunk: string) => {
      buffered += chunk;
      if (buffered.length > MAX_REQUEST_BYTES) {
        send({ err: 'request too large' });
        send({ exit: 2 });
        socket.end();
        return;
      }
      const newline = buffered.indexOf('\n');
      if (newline === -1) return;
      socket.off('data', onData);
      const job = handle(buffered.slice(0, newline), send).finally(() => {
        running.delete(job);
        socket.end();
      });
      running.add(job);
    };
    socket.on('data', onData);
    socket.on('error', () => {});
  });

  async function handle(line: string, send: (frame: Frame) => void): Promise<void> {
    let request: { command?: unknown; args?: unknown };
    try {
      request = JSON.parse(line);
    } catch {
      send({ err: 'request is not JSON' });
      return send({ exit: 2 });
    }
    const command = typeof request.command === 'string' ? byName.get(request.command) : undefined;
    if (!command) {
      send({ err: `unknown command ${JSON.stringify(request.command)}` });
      return send({ exit: 2 });
    }
    const args = command.args.safeParse(request.args);
    if (!args.success) {
      send({ err: `${command.name}: invalid arguments: ${args.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}` });
      return send({ exit: 2 });
    }
    // The command's own output is not logged: it may hold a generated password.
    log.info({ command: command.name }, 'running a command for another process');
    try {
      const services: CommandServices = {
        config: options.services.config,
        secretBox: async () => options.services.secretBox,
        tokenPepper: async () => options.services.tokenPepper,
        publish: async (channel, message) => {
          await options.services.store.publish(channel, message);
          return true;
        },
      };
      const code = await command.run({ db, publicUrl: options.publicUrl, io: { out: (out) => send({ out }), err: (err) => send({ err }) }, services }, args.data);
      send({ exit: code ?? 0 });
    } catch (error) {
      if (error instanceof CommandError) send({ err: `${command.name}: ${error.message}` });
      else {
        log.error({ err: error, command: command.name }, 'command failed');
        send({ err: `${command.name} failed: ${(error as Error).message}` });
      }
      send({ exit: 1 });
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  if (process.platform !== 'win32') fs.chmodSync(socketPath, 0o600);

  return {
    path: socketPath,
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.allSettled(running);
    },
  };
}
