// The benchmark's dedicated module worker: one round over the stores it is
// sent, then it reports and the page terminates it. OPFS (sahpool) only runs
// here. A new worker starts each round by deleting the pool's folder, so each
// round's OPFS databases start empty as the other stores' do; the previous
// worker was terminated, which released its access handles.
import init, { Inbox } from '/pkg/inbox.js';
import { round } from './workload.mjs';

/** The pool folder of host-wasm/src/backend.rs (OPFS_DIRECTORY). */
const POOL = '.inbox-opfs';

async function emptyPool() {
  const root = await navigator.storage.getDirectory();
  // Handles of a just-terminated worker may take a moment to close.
  for (let attempt = 0; ; attempt++) {
    try {
      await root.removeEntry(POOL, { recursive: true });
      return;
    } catch (e) {
      if (e.name === 'NotFoundError') return;
      if (attempt >= 50) throw new Error(`cannot empty the OPFS pool: ${e.name}: ${e.message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/**
 * What one OPFS access-handle call costs here, in µs (mean of `n` calls on a
 * 128 KiB file of its own, outside the pool): the primitives a commit of the
 * opfs store is made of.
 */
async function probe(n) {
  const root = await navigator.storage.getDirectory();
  const name = 'inbox-bench-probe.bin';
  const handle = await (await root.getFileHandle(name, { create: true })).createSyncAccessHandle();
  const page = new Uint8Array(2048).fill(7);
  const out = {};
  const time = (key, count, f) => {
    const t0 = performance.now();
    for (let i = 0; i < count; i++) f(i);
    out[key] = ((performance.now() - t0) * 1000) / count;
  };
  try {
    for (let i = 0; i < 64; i++) handle.write(page, { at: i * 2048 });
    handle.flush();
    time('write', n, (i) => handle.write(page, { at: (i % 64) * 2048 }));
    time('read', n, (i) => handle.read(page, { at: (i % 64) * 2048 }));
    time('getSize', n, () => handle.getSize());
    time('flush_clean', n, () => handle.flush());
    time('write_flush', Math.max(1, n >> 2), (i) => {
      handle.write(page, { at: (i % 64) * 2048 });
      handle.flush();
    });
  } finally {
    handle.close();
    await root.removeEntry(name);
  }
  return out;
}

self.onmessage = async ({ data: { stores, sizes, tag, probe: probeCalls } }) => {
  try {
    await init();
    if (probeCalls) {
      self.postMessage({ ok: true, results: await probe(probeCalls) });
      return;
    }
    if (stores.includes('opfs')) await emptyPool();
    const results = await round(Inbox, stores, sizes, tag);
    self.postMessage({ ok: true, results });
  } catch (e) {
    self.postMessage({ ok: false, error: String(e && e.stack ? e.stack : e) });
  }
};
