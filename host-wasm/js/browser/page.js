// The end-to-end page: runs a leader/worker exchange with the `web` build of
// inbox-wasm on the main thread (store "sqlite"), then a dedicated worker
// that persists a thread in OPFS. Everything it finds is rendered into the
// DOM and kept in `window.__e2e` for test/browser.test.mjs to assert on.
// `document.body.dataset.state` becomes "done" when everything has run.
import init, { Inbox } from '/pkg/inbox.js';
import { describeError } from './describe-error.js';

const e2e = (window.__e2e = { loop: null, badRequest: null, opfsMain: null, worker: null, reader: null });
const $ = (id) => document.getElementById(id);

function errorText(e) {
  return e.code ? `${e.name} ${e.code} (exitCode ${e.exitCode}): ${e.message}` : `${e.name}: ${e.message}`;
}

function setStatus(id, ok, text) {
  const el = $(id);
  el.textContent = text;
  el.className = `status ${ok ? 'ok' : 'fail'}`;
}

function addItem(listId, text) {
  const li = document.createElement('li');
  li.textContent = text;
  $(listId).append(li);
}

function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
}

const tick = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Leader and worker share one Inbox, as two agents of one tab would. */
async function workerLoop() {
  const inbox = await Inbox.open({ store: 'sqlite' });
  const steps = [];
  const record = (command, response, note) => {
    const status = response.thread?.status ?? null;
    steps.push({ command, ok: response.ok, status, note });
    addItem('steps', `${command} → ${status ?? '-'}${note ? ` (${note})` : ''}`);
  };
  try {
    check(inbox.store === 'sqlite', `store is "sqlite", got ${inbox.store}`);

    const sent = inbox.send({
      from_agent: 'lead',
      to_agent: 'worker',
      subject: 'Add a login page',
      body: 'Email and password form, plus OAuth.',
      run_id: 'e2e-run',
    });
    const threadId = sent.thread.thread_id;
    record('send', sent, `lead opens ${threadId}`);

    const fetched = inbox.fetch({ agent: 'worker' });
    check(fetched.threads.length === 1, `fetch lists 1 candidate, got ${fetched.threads.length}`);
    steps.push({ command: 'fetch', ok: fetched.ok, status: null, note: `${fetched.threads.length} candidate` });
    addItem('steps', `fetch → ${fetched.threads.length} candidate for worker`);

    const claimed = inbox.claim({ agent: 'worker', next: true, lease_seconds: 300 });
    check(claimed.lease !== null && claimed.thread.thread_id === threadId, 'claim next takes the thread');
    const token = claimed.lease.lease_token;
    record('claim', claimed, `next: true, lease_token ${token}`);

    const progress = inbox.update({
      agent: 'worker',
      thread_id: threadId,
      lease_token: token,
      status: 'in_progress',
      summary: 'Form renders; wiring the OAuth callback',
    });
    record('update', progress, 'progress');

    const blocked = inbox.update({
      agent: 'worker',
      thread_id: threadId,
      lease_token: token,
      status: 'blocked',
      summary: 'Which OAuth provider: GitHub or Google?',
    });
    record('update', blocked, 'blocked with a question');

    let settled = false;
    const waiting = inbox
      .waitReply({
        agent: 'worker',
        thread_id: threadId,
        lease_token: token,
        after_event: blocked.event_id,
        timeout_seconds: 10,
      })
      .then((response) => {
        settled = true;
        return response;
      });
    const pendingWaits = inbox.pendingWaits;
    await tick(50); // the wait must still be pending: nothing has answered yet
    const pendingBeforeReply = !settled;
    check(pendingBeforeReply, 'waitReply is still pending 50 ms after it started');
    steps.push({ command: 'wait-reply', ok: true, status: null, note: `pending (pendingWaits ${pendingWaits})` });
    addItem('steps', `wait-reply → pending (pendingWaits ${pendingWaits})`);

    const started = performance.now();
    const answer = inbox.reply({
      from_agent: 'lead',
      thread_id: threadId,
      kind: 'answer',
      summary: 'GitHub; the OAuth app is already registered',
    });
    record('reply', answer, 'lead answers');

    const woke = await waiting;
    const wakeMs = performance.now() - started;
    check(woke.woke === true, `waitReply woke, got woke=${woke.woke}`);
    check(woke.message?.message_id === answer.message.message_id, 'waitReply returned the answer');
    record('wait-reply', woke, `woke=${woke.woke} after ${wakeMs.toFixed(1)} ms: "${woke.message.summary}"`);

    const done = inbox.done({
      agent: 'worker',
      thread_id: threadId,
      lease_token: token,
      summary: 'Login with GitHub works; tests pass',
    });
    record('done', done, 'worker finishes');

    const shown = inbox.show({ thread_id: threadId, agent: 'lead' });
    renderThread(shown);

    let badRequest;
    try {
      inbox.claim({ agent: 'worker', thread_id: 'thr_does_not_exist' });
      badRequest = { threw: false };
    } catch (error) {
      badRequest = { threw: true, ...describeError(error) };
    }
    e2e.badRequest = badRequest;
    $('bad-request').textContent = badRequest.threw
      ? `claim {thread_id: "thr_does_not_exist"} threw ${errorText(badRequest)}`
      : 'claim {thread_id: "thr_does_not_exist"} did not throw';

    e2e.loop = {
      ok: true,
      threadId,
      steps,
      pendingWaits,
      pendingBeforeReply,
      wakeMs,
      pendingWaitsAfter: inbox.pendingWaits,
      thread: { subject: shown.thread.subject, status: shown.thread.status, lease: shown.thread.lease ?? null },
      messages: shown.messages.map((m) => ({ kind: m.kind, from: m.from_agent, to: m.to_agent, summary: m.summary })),
    };
    setStatus('loop-status', true, 'worker loop: ok');
  } finally {
    inbox.close();
  }
}

function renderThread(shown) {
  const t = shown.thread;
  $('thread-subject').textContent = t.subject;
  $('thread-status').textContent = t.status;
  $('thread-id').textContent = t.thread_id;
  $('thread-agents').textContent = `${t.created_by} → ${t.assigned_to}`;
  const body = $('history').querySelector('tbody');
  shown.messages.forEach((m, i) => {
    const row = document.createElement('tr');
    for (const text of [String(i + 1), m.kind, `${m.from_agent} → ${m.to_agent}`, m.summary]) {
      const cell = document.createElement('td');
      cell.textContent = text;
      row.append(cell);
    }
    row.dataset.kind = m.kind;
    body.append(row);
  });
}

/** OPFS needs sync access handles, which only dedicated workers get. */
async function opfsOnMainThread() {
  let result;
  try {
    const inbox = await Inbox.open({ store: 'opfs', path: 'main-thread.db' });
    result = { rejected: false, store: inbox.store };
    inbox.close();
  } catch (error) {
    result = { rejected: true, ...describeError(error) };
  }
  e2e.opfsMain = result;
  $('opfs-main').textContent = result.rejected
    ? `Inbox.open({store: "opfs"}) rejected: ${errorText(result)}`
    : `Inbox.open({store: "opfs"}) unexpectedly resolved (store ${result.store})`;
}

/** Runs one phase of the OPFS worker; terminates it once it answered,
 * unless `keep` asks to keep it alive (it is returned as `result.worker`). */
function runOpfsWorker(phase, keep = false) {
  return new Promise((resolve) => {
    const worker = new Worker(`/opfs-worker.js?phase=${phase}`, { type: 'module', name: `opfs-${phase}` });
    const timer = setTimeout(() => finish({ ok: false, error: { name: 'Timeout', message: 'no answer from the worker in 15 s' } }), 15000);
    function finish(result) {
      clearTimeout(timer);
      if (keep) Object.defineProperty(result, 'worker', { value: worker, enumerable: false });
      else worker.terminate();
      resolve(result);
    }
    worker.addEventListener('message', (event) => finish(event.data));
    worker.addEventListener('error', (event) =>
      finish({ ok: false, error: { name: 'WorkerError', message: event.message || 'the worker script failed to load or threw' } }),
    );
    worker.addEventListener('messageerror', () => finish({ ok: false, error: { name: 'MessageError', message: 'undecodable message' } }));
  });
}

async function main() {
  await init(); // fetches /pkg/inbox_bg.wasm next to inbox.js
  try {
    await workerLoop();
  } catch (error) {
    e2e.loop = { ok: false, error: describeError(error) };
    setStatus('loop-status', false, `worker loop: FAILED: ${errorText(describeError(error))}`);
    console.error('worker loop failed', error);
  }

  // The writer stays alive while a second worker reads: its close() must
  // have let go of the OPFS files for the reader to open them.
  const worker = await runOpfsWorker('write', true);
  e2e.worker = worker;
  for (const line of worker.steps ?? []) addItem('opfs-worker-steps', line);
  let reader = null;
  if (worker.ok) {
    reader = await runOpfsWorker('read');
    e2e.reader = reader;
    for (const line of reader.steps ?? []) addItem('opfs-worker-steps', line);
  }
  worker.worker?.terminate();

  // A worker that dies without close() (a crashed or closed tab) loses
  // nothing it committed: the next worker recovers it from OPFS.
  const crashed = await runOpfsWorker('crash');
  const recovered = crashed.ok ? await runOpfsWorker('recover') : crashed;
  e2e.crash = { crashed, recovered };
  for (const line of [...(crashed.steps ?? []), ...(crashed === recovered ? [] : recovered.steps ?? [])]) addItem('opfs-worker-steps', line);
  const failed = !worker.ok ? worker : !reader.ok ? reader : null;
  if (failed) {
    setStatus('opfs-worker-status', false, `opfs worker: FAILED: ${errorText(failed.error)}`);
    console.error('opfs worker failed', JSON.stringify(failed.error));
  } else {
    setStatus('opfs-worker-status', true, 'opfs worker: ok');
  }

  // After the workers are gone, so they never contend for the OPFS pool.
  await opfsOnMainThread();
}

main()
  .catch((error) => {
    e2e.fatal = describeError(error);
    setStatus('loop-status', false, `page failed: ${errorText(describeError(error))}`);
    console.error('page failed', error);
  })
  .finally(() => {
    document.body.dataset.state = 'done';
  });
