// The two workloads of the wasm benchmark, shared by every runtime: Node
// (run.mjs imports it), a page in Chromium (page.mjs) and a dedicated module
// worker (worker.mjs). Plain ES module, no Node or DOM imports: it only calls
// the Inbox it is given and performance.now().
//
// Each workload opens one new Inbox, runs `warmup` untimed operations, then
// times `ops` operations back to back, and closes the inbox:
//   send        inbox.send({from_agent, to_agent, subject}), a new thread each;
//   claim+done  warmup + ops threads sent first (untimed), then pairs of
//               inbox.claim({agent, next: true}) and
//               inbox.done({agent, thread_id, lease_token, summary}).
// The rate is operations (a send, or a claim and its done) per second of the
// timed loop. The native baseline (`inbox-bench wasm-baseline`,
// bench/src/wasm_baseline.rs) runs the same requests over the native engine.

export const LEAD = 'lead';
export const WORKER = 'worker';
export const WORKLOADS = ['send', 'claim+done'];

function sendOne(inbox, seq) {
  inbox.send({ from_agent: LEAD, to_agent: WORKER, subject: `Benchmark task ${seq}` });
}

function pair(inbox) {
  const { thread, lease } = inbox.claim({ agent: WORKER, next: true });
  if (!lease) throw new Error('claim --next found nothing to claim: the queue ran dry early');
  inbox.done({ agent: WORKER, thread_id: thread.thread_id, lease_token: lease.lease_token, summary: 'ok' });
}

/** Sends/s over `ops` new threads after `warmup` untimed ones. */
export function sendRate(inbox, { ops, warmup }) {
  for (let seq = 0; seq < warmup; seq++) sendOne(inbox, seq);
  const t0 = performance.now();
  for (let seq = warmup; seq < warmup + ops; seq++) sendOne(inbox, seq);
  const ms = performance.now() - t0;
  return (ops * 1000) / ms;
}

/** Claim+done pairs/s over `ops` queued threads after `warmup` untimed pairs. */
export function claimDoneRate(inbox, { ops, warmup }) {
  for (let seq = 0; seq < warmup + ops; seq++) sendOne(inbox, seq);
  for (let i = 0; i < warmup; i++) pair(inbox);
  const t0 = performance.now();
  for (let i = 0; i < ops; i++) pair(inbox);
  const ms = performance.now() - t0;
  // Every queued thread was taken exactly once: the queue is empty now.
  if (inbox.claim({ agent: WORKER, next: true }).lease !== null) {
    throw new Error('claim+done: threads left in the queue after the timed loop');
  }
  return (ops * 1000) / ms;
}

/**
 * One measurement: opens `Inbox.open({store})` (plus `path` for opfs and
 * file: for file, an absolute path in a new folder the caller removes),
 * runs `workload`, closes. Returns operations per second.
 */
export async function measure(Inbox, store, workload, sizes, path) {
  const withPath = store === 'opfs' || store === 'file';
  const inbox = await Inbox.open(withPath ? { store, path } : { store });
  try {
    if (inbox.store !== store) throw new Error(`asked for store ${store}, got ${inbox.store}`);
    return workload === 'send' ? sendRate(inbox, sizes) : claimDoneRate(inbox, sizes);
  } finally {
    inbox.close();
    inbox.free();
  }
}

/**
 * One round over `stores`: every workload on each, in order. Returns
 * [{store, workload, ops_per_sec}].
 */
export async function round(Inbox, stores, sizes, tag = '') {
  const out = [];
  for (const store of stores) {
    for (const workload of WORKLOADS) {
      const path = `bench-${tag}${workload === 'send' ? 'send' : 'claim'}.db`;
      out.push({ store, workload, ops_per_sec: await measure(Inbox, store, workload, sizes, path) });
    }
  }
  return out;
}

/**
 * µs per call of the file primitives a commit is made of, on a 128 KiB file
 * (64 pages of 2 KiB, written first): `write` and `read` of one page in
 * place, `size`, `flush` with nothing written, and a write followed by a
 * flush (a quarter as many). `file` gives the primitives: an OPFS access
 * handle in the browser, pwrite/pread/fstat/fdatasync in Node, so the two
 * probes measure the same sequence.
 */
export function probeCalls(n, file) {
  const out = {};
  const time = (key, count, f) => {
    const t0 = performance.now();
    for (let i = 0; i < count; i++) f(i);
    out[key] = ((performance.now() - t0) * 1000) / count;
  };
  for (let i = 0; i < 64; i++) file.write(i);
  file.flush();
  time('write', n, (i) => file.write(i % 64));
  time('read', n, (i) => file.read(i % 64));
  time('getSize', n, () => file.size());
  time('flush_clean', n, () => file.flush());
  time('write_flush', Math.max(1, n >> 2), (i) => {
    file.write(i % 64);
    file.flush();
  });
  return out;
}
