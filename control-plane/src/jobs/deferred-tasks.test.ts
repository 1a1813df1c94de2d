import t from 'tap';
import { pino } from 'pino';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createUserDirect, outboxDir, RESET_SUBJECT } from '../../../test/support/auth.ts';
import { readOutbox } from '../mail/outbox.ts';
import { DeferredTasks } from './deferred-tasks.ts';

function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line)); } });
  return { log, lines };
}

t.test('a deferred task runs after its caller has returned', async (t) => {
  const { log } = capturingLogger();
  const tasks = new DeferredTasks(log);
  let callerDone = false;
  let seenByTask: boolean | undefined;
  tasks.defer('probe', async () => { seenByTask = callerDone; });
  callerDone = true;
  t.equal(tasks.pending, 1);
  await tasks.idle();
  t.equal(seenByTask, true, 'the caller had finished when the task started');
  t.equal(tasks.pending, 0);
});

t.test('a failing task is logged with its name and does not stop the others', async (t) => {
  const { log, lines } = capturingLogger();
  const tasks = new DeferredTasks(log);
  const ran: string[] = [];
  tasks.defer('broken', async () => { throw new Error('smtp down'); });
  tasks.defer('fine', async () => { ran.push('fine'); });
  await tasks.idle();
  t.same(ran, ['fine']);
  const failure = lines.find((l) => l.msg === 'deferred task failed');
  t.ok(failure, 'logged');
  t.equal(failure!.task, 'broken');
  t.match(failure!.err, { message: 'smtp down' });
});

t.test('idle() also waits for tasks that tasks deferred', async (t) => {
  const tasks = new DeferredTasks(capturingLogger().log);
  const order: string[] = [];
  tasks.defer('outer', async () => {
    order.push('outer');
    tasks.defer('inner', async () => { order.push('inner'); });
  });
  await tasks.idle();
  t.same(order, ['outer', 'inner']);
});

t.test('close() waits for queued tasks and refuses new ones', async (t) => {
  const { log, lines } = capturingLogger();
  const tasks = new DeferredTasks(log);
  let release!: () => void;
  const held = new Promise<void>((resolve) => { release = resolve; });
  let finished = false;
  tasks.defer('slow', async () => { await held; finished = true; });
  let closed = false;
  const closing = tasks.close().then(() => { closed = true; });
  tasks.defer('late', async () => { t.fail('a task deferred during shutdown ran'); });
  // The refusal is logged at once; the queued task still holds close() open.
  t.ok(lines.some((l) => l.msg === 'deferred task refused: shutting down' && l.task === 'late'));
  t.equal(closed, false);
  release();
  await closing;
  t.equal(finished, true, 'the queued task completed before close() resolved');
});

t.test('closing the control plane sends the e-mail a finished request handed off', async (t) => {
  const cp = await startTestControlPlane(t);
  const user = await createUserDirect(cp);
  const res = await cp.request('POST', '/v1/auth/password/forgot', { json: { email: user.email } });
  t.equal(res.status, 200);
  await cp.close();
  // Read the outbox as it is now (messagesTo would wait for the tasks itself).
  const mails = (await readOutbox(outboxDir(cp))).filter((m) => m.to === user.email);
  t.equal(mails.length, 1);
  t.match(mails[0]!.subject, RESET_SUBJECT);
});
