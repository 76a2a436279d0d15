// The benchmark page: run.mjs calls window.bench.page(...) (a round on the
// page) and window.bench.worker(...) (a round in a new dedicated worker)
// through page.evaluate, one round per call, and window.bench.probe(n) once
// (the cost of single OPFS access-handle calls, in a worker).
import init, { Inbox } from '/pkg/inbox.js';
import { round } from './workload.mjs';

/** Runs one round in a new dedicated module worker, then terminates it. */
function inWorker(stores, sizes, tag, probe = 0) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./worker.mjs', import.meta.url), { type: 'module' });
    const done = (fn, value) => {
      worker.terminate();
      fn(value);
    };
    worker.onmessage = ({ data }) =>
      data.ok ? done(resolve, data.results) : done(reject, new Error(`worker: ${data.error}`));
    worker.onerror = (e) => done(reject, new Error(`worker error: ${e.message}`));
    worker.postMessage({ stores, sizes, tag, probe });
  });
}

try {
  await init();
  window.bench = {
    page: (stores, sizes, tag) => round(Inbox, stores, sizes, tag),
    worker: inWorker,
    probe: (calls) => inWorker([], null, '', calls),
  };
  document.body.dataset.state = 'ready';
} catch (e) {
  window.benchError = String(e && e.stack ? e.stack : e);
  document.body.dataset.state = 'error';
}
