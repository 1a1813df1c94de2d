// Embedded PostgreSQL for `npm start` without DATABASE_URL: PGlite (real
// Postgres compiled to WASM) persisted under DATA_DIR, exposed on a loopback
// port through pglite-socket so MikroORM's ordinary postgresql driver talks to it.
import fs from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

export interface EmbeddedPostgres {
  url: string;
  close(): Promise<void>;
}

export async function startEmbeddedPostgres(dataDir: string): Promise<EmbeddedPostgres> {
  await fs.mkdir(dataDir, { recursive: true });
  const db = await PGlite.create(dataDir);
  // One connection: PGlite is single-session, and the pool is sized to match.
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: 1 });
  await server.start();
  const conn = server.getServerConn();
  return {
    url: `postgresql://postgres@${conn}/postgres`,
    async close() {
      await server.stop();
      await db.close();
    },
  };
}
