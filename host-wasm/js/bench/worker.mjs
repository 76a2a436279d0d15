// The benchmark's dedicated module worker: one round over the stores it is
// sent, then it reports and the page terminates it. OPFS (sahpool) only runs
// here. A new worker starts each round by deleting the pool's folder, so each
// round's OPFS databases start empty as the other stores' do; the previous
// worker was terminated, which released its access handles.
import init, { Inbox } from '/pkg/inbox.js';
import { probeCalls, round } from './workload.mjs';

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
  try {
    return probeCalls(n, {
      write: (p) => handle.write(page, { at: p * 2048 }),
      read: (p) => handle.read(page, { at: p * 2048 }),
      size: () => handle.getSize(),
      flush: () => handle.flush(),
    });
  } finally {
    handle.close();
    await root.removeEntry(name);
  }
}

self.onmessage = async ({ data: { stores, sizes, tag, probe: probeCount } }) => {
  try {
    await init();
    if (probeCount) {
      self.postMessage({ ok: true, results: await probe(probeCount) });
      return;
    }
    if (stores.includes('opfs')) await emptyPool();
    const results = await round(Inbox, stores, sizes, tag);
    self.postMessage({ ok: true, results });
  } catch (e) {
    self.postMessage({ ok: false, error: String(e && e.stack ? e.stack : e) });
  }
};
