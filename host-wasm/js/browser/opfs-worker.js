// A dedicated module worker: the only place store "opfs" runs. Two phases,
// chosen by the script URL's ?phase=, each answering with one postMessage
// ({ok, steps, ...}):
// - write (default): send a thread, close(), open the same file again in
//   this worker and list it back;
// - read (run in a second worker while the writer, its inbox closed, is
//   still alive): open the file in a new wasm instance and list it.
import init, { Inbox } from '/pkg/inbox.js';
import { describeError } from './describe-error.js';

const PATH = 'e2e.db';
const phase = new URL(import.meta.url).searchParams.get('phase') ?? 'write';
const steps = [];

/** Names of the OPFS entries under `directory` (one level). */
async function entries(directory) {
  const names = [];
  for await (const [name, handle] of directory.entries()) names.push(handle.kind === 'directory' ? `${name}/` : name);
  return names.sort();
}

async function run() {
  await init(); // fetches inbox_bg.wasm next to inbox.js
  steps.push(`[${phase}] init: wasm loaded in the worker`);
  if (phase === 'read') return read();
  if (phase === 'crash') return crash();
  if (phase === 'recover') return recover();
  return write();
}

async function write() {
  const first = await Inbox.open({ store: 'opfs', path: PATH });
  steps.push(`[write] open {store: "opfs", path: "${PATH}"} → store ${first.store}`);
  const sent = first.send({ from_agent: 'lead', to_agent: 'worker', subject: 'Persist me in OPFS' });
  const threadId = sent.thread.thread_id;
  steps.push(`[write] send → ${threadId} (${sent.thread.status})`);

  // A second open of the same file while the first is open must be refused:
  // one connection per database.
  let secondOpen;
  try {
    const again = await Inbox.open({ store: 'opfs', path: PATH });
    secondOpen = { rejected: false };
    again.close();
  } catch (error) {
    secondOpen = { rejected: true, ...describeError(error) };
  }
  steps.push(
    secondOpen.rejected
      ? `[write] second open while the first is open → rejected: ${secondOpen.code ?? secondOpen.name}`
      : '[write] second open while the first is open → resolved',
  );

  first.close();
  steps.push('[write] close()');

  const reopened = await Inbox.open({ store: 'opfs', path: PATH });
  steps.push(`[write] open the same path again → store ${reopened.store}`);
  const listed = reopened.list({});
  const shown = reopened.show({ thread_id: threadId });
  reopened.close();
  steps.push(`[write] list → ${listed.threads.map((t) => `${t.thread_id} "${t.subject}" (${t.status})`).join(', ') || 'nothing'}`);

  const root = await navigator.storage.getDirectory();
  const opfsRoot = await entries(root);
  steps.push(`[write] OPFS root: ${opfsRoot.join(' ') || '(empty)'}`);

  return {
    ok: listed.threads.length === 1 && listed.threads[0].thread_id === threadId,
    error: listed.threads.length === 1 ? undefined : { name: 'Check', message: `expected 1 thread after reopening, got ${listed.threads.length}` },
    steps,
    threadId,
    secondOpen,
    listed: listed.threads.map((t) => ({ thread_id: t.thread_id, subject: t.subject, status: t.status })),
    messages: shown.messages.map((m) => ({ kind: m.kind, summary: m.summary })),
    opfsRoot,
  };
}

/** A fresh wasm instance in a fresh worker reads what the writer left. */
async function read() {
  // The writer is still alive but closed its inbox, which released the
  // pool's access handles: the first attempt must succeed.
  const attempts = 1;
  const inbox = await Inbox.open({ store: 'opfs', path: PATH });
  steps.push(`[read] open {store: "opfs", path: "${PATH}"} in a new worker → store ${inbox.store} (attempt ${attempts})`);
  const listed = inbox.list({});
  inbox.close();
  steps.push(`[read] list → ${listed.threads.map((t) => `${t.thread_id} "${t.subject}" (${t.status})`).join(', ') || 'nothing'}`);
  return {
    ok: true,
    steps,
    attempts,
    listed: listed.threads.map((t) => ({ thread_id: t.thread_id, subject: t.subject, status: t.status })),
  };
}

/** Commits a thread and never closes: the page terminates this worker. */
async function crash() {
  const inbox = await Inbox.open({ store: 'opfs', path: 'crash.db' });
  const sent = inbox.send({ from_agent: 'lead', to_agent: 'worker', subject: 'Committed, then the worker died' });
  steps.push(`[crash] send → ${sent.thread.thread_id}; the worker is terminated without close()`);
  return { ok: true, steps, threadId: sent.thread.thread_id };
}

/** After a worker died holding crash.db, a new one recovers what it committed. */
async function recover() {
  // A terminated worker's access handles are released by the browser
  // shortly after; until then the open fails with NoModificationAllowedError.
  let inbox;
  let attempts = 0;
  for (;;) {
    attempts += 1;
    try {
      inbox = await Inbox.open({ store: 'opfs', path: 'crash.db' });
      break;
    } catch (error) {
      if (attempts >= 40 || !String(error?.message).includes('NoModificationAllowedError')) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  const listed = inbox.list({});
  inbox.close();
  steps.push(`[recover] open crash.db (attempt ${attempts}) → ${listed.threads.map((t) => `${t.thread_id} "${t.subject}"`).join(', ') || 'nothing'}`);
  return { ok: true, steps, attempts, listed: listed.threads.map((t) => ({ thread_id: t.thread_id, subject: t.subject })) };
}

run()
  .then((result) => postMessage(result))
  .catch((error) => postMessage({ ok: false, error: describeError(error), steps }));
