// The agent-token command (its CLI is control-plane/src/cli/agent-token.ts):
// create, list, revoke and rotate edge agent tokens from a shell, with the
// same services, audit entries and revocation announcements as the routes.
// The actor is the platform (audit actor_type system, created_by null); the
// request id of its audit entries starts with `cli-`.
import { randomUUID } from 'node:crypto';
import { systemClock } from '../core/clock.ts';
import { systemContext } from '../core/request-context.ts';
import { CommandError, defineCommand, type CommandIO } from '../db/command-channel.ts';
import { createLogger } from '../http/logger.ts';
import { ApiError } from '../http/errors.ts';
import { AgentToken } from './agent-token.entity.ts';
import { agentTokenArgs } from './agent-token-record.ts';
import { createAgentToken, revokeAgentToken, rotateAgentToken, type AgentTokenDeps, type IssuedAgentToken } from './agent-token-service.ts';

const quiet = createLogger('silent');
const shown = (date: Date | null | undefined) => (date ? date.toISOString() : '-');

function printIssued(io: CommandIO, token: IssuedAgentToken): void {
  io.out(`Token (shown once, store it safely; give it to the edge agent as AGENT_TOKEN): ${token.token}`);
}

/** What the command says about telling running control planes to close the token's streams. */
function printAnnounced(io: CommandIO, told: boolean | Error): void {
  if (told === true) io.out('Control planes were told to close the streams open with it.');
  else if (told === false) {
    io.out('No REDIS_URL: only a control plane on the embedded database or on Redis can be told at once. '
      + 'A control plane on this database without Redis keeps streams already open with the token until they reconnect (revoking through the API closes them at once).');
  } else io.err(`Stored, but running control planes could not be told (${told.message}): streams open with the token close when their agents reconnect.`);
}

export const agentTokenCommand = defineCommand({
  name: 'agent-token',
  args: agentTokenArgs,
  async run({ db, io, services }, args) {
    const rc = systemContext({ db, log: quiet }, { requestId: `cli-${randomUUID()}` });
    if (args.action === 'list') {
      const tokens = await rc.em.find(AgentToken, args.status ? { status: args.status } : {}, { orderBy: { created_at: 'desc', id: 'desc' } });
      if (!tokens.length) return io.out('No agent tokens.');
      const rows = [['ID', 'NAME', 'STATUS', 'TOKEN', 'EXPIRES', 'LAST USED'],
        ...tokens.map((t) => [t.id, t.name, t.status, t.token_hint, shown(t.expires_at), shown(t.last_used_at)])];
      const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
      for (const row of rows) io.out(row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd());
      return;
    }

    if (!services) throw new CommandError('needs the platform services (run it through runCommand)');
    let told: boolean | Error = false;
    const deps: AgentTokenDeps = {
      // Only a minted token needs the pepper (and the deployment's secrets key): revoking works without them.
      tokenPepper: args.action === 'revoke' ? Buffer.alloc(0) : await services.tokenPepper(),
      clock: systemClock,
      store: {
        async publish(channel, message) {
          try {
            told = await services.publish(channel, message);
          } catch (error) {
            told = error as Error;
            throw error;
          }
        },
      },
    };
    try {
      if (args.action === 'create') {
        const token = await createAgentToken(deps, rc, args);
        io.out(`Created agent token ${token.id} (${token.name}), ${token.expires_at ? `expires ${shown(token.expires_at)}` : 'never expires'}.`);
        printIssued(io, token);
      } else if (args.action === 'revoke') {
        const token = await revokeAgentToken(deps, rc, args.id);
        io.out(`Revoked agent token ${token.id} (${token.name}).`);
        printAnnounced(io, told);
      } else {
        const token = await rotateAgentToken(deps, rc, args.id);
        io.out(`Rotated agent token ${args.id}: revoked, replaced by ${token.id} (${token.name}).`);
        printIssued(io, token);
        printAnnounced(io, told);
      }
    } catch (error) {
      if (error instanceof ApiError) {
        const fields = error.errors?.map((e) => `--${e.field.replace(/_/g, '-')}: ${e.message}`).join('; ');
        throw new CommandError(fields ? `${error.message}: ${fields}` : error.message);
      }
      throw error;
    }
  },
});
