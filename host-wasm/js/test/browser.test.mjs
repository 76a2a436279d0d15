// End-to-end test of the `web` build of inbox-wasm in headless Chromium.
//
// A static server on 127.0.0.1 serves browser/ (the page, its script and a
// module worker) and node_modules/inbox-wasm/web/ under /pkg/. The page runs
// a leader/worker exchange over store "sqlite" and renders it; a dedicated
// worker persists a thread in OPFS across close() and reopen. This test
// asserts on the DOM and on the data the page keeps in window.__e2e, and
// saves a screenshot to target/wasm-e2e.png. A second page hands the
// transition-script corpus (tests/corpus, read here) to a dedicated worker
// that runs each script on store "opfs" with runScriptOn; each transcript is
// compared here with its golden one, byte for byte.
//
// Run from host-wasm/js, after installing the package built by
// scripts/build-wasm (npm pack ./host-wasm/pkg, then npm install the .tgz
// here with --no-save):
//   node --test test/browser.test.mjs
// CHROMIUM=/path/to/chromium overrides the browser (default /usr/bin/chromium).

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

import { CHROMIUM_ARGS, executablePath, serveStatic } from '../lib/chromium.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const jsRoot = path.resolve(here, '..');
const pageRoot = path.join(jsRoot, 'browser');
const pkgRoot = path.join(jsRoot, 'node_modules', 'inbox-wasm', 'web');
const screenshotPath = path.resolve(jsRoot, '..', '..', 'target', 'wasm-e2e.png');
const corpus = path.resolve(jsRoot, '..', '..', 'tests', 'corpus');

describe('inbox-wasm web build in headless Chromium', { timeout: 60_000 }, () => {
  let server;
  let browser;
  let page;
  let result; // window.__e2e once the page is done
  let pageMs;
  const served = [];
  const consoleLines = [];
  const pageErrors = [];
  const failedRequests = [];

  /** Everything the browser said, for assertion messages. */
  function diagnostics() {
    const lines = [
      `console (${consoleLines.length}):`,
      ...consoleLines.map((l) => `  ${l}`),
      `page errors (${pageErrors.length}):`,
      ...pageErrors.map((l) => `  ${l}`),
      `failed requests (${failedRequests.length}):`,
      ...failedRequests.map((l) => `  ${l}`),
      `served: ${served.map((s) => `${s.path} ${s.status}`).join(', ')}`,
    ];
    return lines.join('\n');
  }

  before(async () => {
    assert.ok(
      existsSync(path.join(pkgRoot, 'inbox.js')) && existsSync(path.join(pkgRoot, 'inbox_bg.wasm')),
      `inbox-wasm is not installed in ${jsRoot}/node_modules; build host-wasm/pkg (scripts/build-wasm), npm pack it and npm install the .tgz here`,
    );
    assert.ok(existsSync(executablePath), `no Chromium at ${executablePath}; set CHROMIUM=/path/to/chromium`);

    server = await serveStatic({ '/pkg/': pkgRoot, '/': pageRoot }, served);
    const origin = `http://127.0.0.1:${server.address().port}`;

    browser = await chromium.launch({
      executablePath,
      headless: true,
      args: CHROMIUM_ARGS,
    });
    // A fresh context: empty OPFS, so the worker's list is deterministic.
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    page = await context.newPage();
    page.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => pageErrors.push(e.stack || String(e)));
    page.on('requestfailed', (r) => failedRequests.push(`${r.url()}: ${r.failure()?.errorText}`));
    page.on('response', (r) => {
      if (r.status() >= 400) failedRequests.push(`${r.url()}: HTTP ${r.status()}`);
    });
    page.on('worker', (w) => {
      // Worker console messages also reach page 'console' in recent Playwright; keep both.
      if (typeof w.on === 'function') w.on('console', (m) => consoleLines.push(`[worker ${m.type()}] ${m.text()}`));
    });

    const started = Date.now();
    try {
      // Fail fast on an uncaught error or a page script that did not load,
      // instead of waiting for the timeout.
      const pageError = new Promise((_, reject) =>
        page.once('pageerror', (e) => reject(new Error(`uncaught error in the page: ${e.message}`))),
      );
      pageError.catch(() => {});
      await page.goto(`${origin}/`, { waitUntil: 'load' });
      await Promise.race([
        page.locator('body[data-state="done"], body[data-state="load-failed"]').waitFor({ state: 'attached', timeout: 20_000 }),
        pageError,
      ]);
      const state = await page.locator('body').getAttribute('data-state');
      assert.equal(state, 'done', 'the page script (or a module it imports) failed to load');
      result = await page.evaluate(() => window.__e2e);
    } catch (error) {
      error.message += `\n${diagnostics()}`;
      throw error;
    } finally {
      // A screenshot even on failure: it shows how far the page got.
      await mkdir(path.dirname(screenshotPath), { recursive: true });
      await page.screenshot({ path: screenshotPath, fullPage: true }).catch(() => {});
    }
    pageMs = Date.now() - started;
  });

  after(async () => {
    await browser?.close().catch(() => {});
    await new Promise((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  test('serves the web build with the right content types', () => {
    const wasm = served.filter((s) => s.path === '/pkg/inbox_bg.wasm');
    assert.ok(wasm.length >= 1, `inbox_bg.wasm was never fetched\n${diagnostics()}`);
    assert.ok(wasm.every((s) => s.status === 200 && s.type === 'application/wasm'), JSON.stringify(wasm));
    const js = served.filter((s) => s.path.endsWith('.js'));
    assert.ok(js.every((s) => s.status === 200 && s.type.startsWith('text/javascript')), JSON.stringify(js));
    assert.deepEqual(failedRequests, [], diagnostics());
  });

  test('no page errors and no console errors', () => {
    assert.deepEqual(pageErrors, [], diagnostics());
    const errors = consoleLines.filter((l) => l.startsWith('[error]') || l.startsWith('[worker error]'));
    assert.deepEqual(errors, [], diagnostics());
  });

  test('a full worker loop over store "sqlite" runs and is rendered', async () => {
    assert.ok(result?.loop?.ok, `worker loop failed: ${JSON.stringify(result?.loop ?? result)}\n${diagnostics()}`);
    await assert.doesNotReject(
      page.locator('#loop-status', { hasText: 'worker loop: ok' }).waitFor({ timeout: 1000 }),
      'the page shows "worker loop: ok"',
    );
    assert.equal(await page.locator('#loop-status').textContent(), 'worker loop: ok');

    const loop = result.loop;
    assert.deepEqual(
      loop.steps.map((s) => `${s.command}:${s.status ?? '-'}`),
      [
        'send:pending',
        'fetch:-',
        'claim:claimed',
        'update:in_progress',
        'update:blocked',
        'wait-reply:-',
        'reply:in_progress',
        'wait-reply:in_progress',
        'done:done',
      ],
    );
    assert.equal(loop.pendingWaits, 1, 'one wait pending before the reply');
    assert.equal(loop.pendingBeforeReply, true, 'waitReply did not settle before the reply');
    assert.equal(loop.pendingWaitsAfter, 0, 'no wait pending after it woke');
    assert.ok(loop.wakeMs < 1000, `the reply woke the wait in ${loop.wakeMs} ms`);
    assert.deepEqual(loop.thread, { subject: 'Add a login page', status: 'done', lease: null });

    // The rendered history: subject, status and one row per message.
    assert.equal(await page.locator('#thread-subject').textContent(), 'Add a login page');
    assert.equal(await page.locator('#thread-status').textContent(), 'done');
    assert.match(await page.locator('#thread-id').textContent(), /^thr_/);
    assert.equal(await page.locator('#thread-agents').textContent(), 'lead → worker');
    const rows = await page.locator('#history tbody tr').evaluateAll((trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
    );
    assert.deepEqual(rows, [
      ['1', 'task', 'lead → worker', 'Add a login page'],
      ['2', 'progress', 'worker → lead', 'Form renders; wiring the OAuth callback'],
      ['3', 'question', 'worker → lead', 'Which OAuth provider: GitHub or Google?'],
      ['4', 'answer', 'lead → worker', 'GitHub; the OAuth app is already registered'],
      ['5', 'result', 'worker → lead', 'Login with GitHub works; tests pass'],
    ]);
    const steps = await page.locator('#steps li').allTextContents();
    assert.equal(steps.length, 9);
    assert.match(steps[5], /^wait-reply → pending \(pendingWaits 1\)$/);
    assert.match(steps[7], /^wait-reply → in_progress \(woke=true after [\d.]+ ms: "GitHub; the OAuth app is already registered"\)$/);
  });

  test('a refused command throws InboxError thread_not_found, exit code 40', async () => {
    assert.deepEqual(
      {
        threw: result.badRequest?.threw,
        name: result.badRequest?.name,
        isError: result.badRequest?.isError,
        code: result.badRequest?.code,
        exitCode: result.badRequest?.exitCode,
        responseCode: result.badRequest?.responseCode,
      },
      { threw: true, name: 'InboxError', isError: true, code: 'thread_not_found', exitCode: 40, responseCode: 'thread_not_found' },
      JSON.stringify(result.badRequest),
    );
    assert.match(
      await page.locator('#bad-request').textContent(),
      /^claim \{thread_id: "thr_does_not_exist"\} threw InboxError thread_not_found \(exitCode 40\): /,
    );
  });

  test('store "opfs" on the main thread rejects with InboxError storage_error', async (t) => {
    const main = result.opfsMain;
    t.diagnostic(`main thread Inbox.open({store: "opfs"}): ${JSON.stringify(main)}`);
    assert.equal(main?.rejected, true, `Inbox.open({store: "opfs"}) on the main thread: ${JSON.stringify(main)}`);
    assert.equal(main.name, 'InboxError', JSON.stringify(main));
    assert.equal(main.isError, true);
    assert.equal(main.code, 'storage_error', JSON.stringify(main));
    assert.equal(main.exitCode, 50);
    assert.match(main.message, /dedicated Web Worker/);
    assert.match(await page.locator('#opfs-main').textContent(), /^Inbox\.open\(\{store: "opfs"\}\) rejected: InboxError storage_error \(exitCode 50\)/);
  });

  test('a dedicated worker keeps a thread in OPFS across close() and reopen, and another worker reads it', async (t) => {
    const worker = result.worker;
    assert.ok(worker?.ok, `opfs worker failed: ${JSON.stringify(worker)}\n${diagnostics()}`);
    assert.match(worker.threadId, /^thr_/);
    const thread = { thread_id: worker.threadId, subject: 'Persist me in OPFS', status: 'pending' };
    assert.deepEqual(worker.listed, [thread]);
    assert.deepEqual(worker.messages, [{ kind: 'task', summary: 'Persist me in OPFS' }]);
    // One connection per database: a second open of the file in the same
    // worker, while the first inbox is open, is refused.
    assert.equal(worker.secondOpen.rejected, true, JSON.stringify(worker.secondOpen));
    assert.equal(worker.secondOpen.code, 'storage_error');
    assert.match(worker.secondOpen.message, /already open in this worker/);
    // A second worker (a new wasm instance), started while the writer is
    // still alive with its inbox closed, opens the file at once and reads
    // the same thread: close() let go of the OPFS files, and the thread is
    // in OPFS, not in wasm memory.
    const reader = result.reader;
    assert.ok(reader?.ok, `opfs reader failed: ${JSON.stringify(reader)}\n${diagnostics()}`);
    assert.deepEqual(reader.listed, [thread]);

    assert.equal(await page.locator('#opfs-worker-status').textContent(), 'opfs worker: ok');
    const steps = await page.locator('#opfs-worker-steps li').allTextContents();
    assert.ok(steps.includes(`[write] list → ${worker.threadId} "Persist me in OPFS" (pending)`), steps.join('\n'));
    assert.ok(steps.includes(`[read] list → ${worker.threadId} "Persist me in OPFS" (pending)`), steps.join('\n'));
    t.diagnostic(`OPFS root: ${worker.opfsRoot.join(' ')}`);
  });

  test('a worker terminated without close() loses nothing it committed', () => {
    const { crashed, recovered } = result.crash ?? {};
    assert.ok(crashed?.ok, `crash phase failed: ${JSON.stringify(crashed)}\n${diagnostics()}`);
    assert.ok(recovered?.ok, `recover phase failed: ${JSON.stringify(recovered)}\n${diagnostics()}`);
    assert.deepEqual(recovered.listed, [{ thread_id: crashed.threadId, subject: 'Committed, then the worker died' }]);
  });

  test('the screenshot was written', (t) => {
    assert.ok(existsSync(screenshotPath), screenshotPath);
    t.diagnostic(`page done in ${pageMs} ms; screenshot: ${screenshotPath}`);
  });
});

describe('the transition-script corpus in a dedicated worker on OPFS', { timeout: 120_000 }, () => {
  // Each script with its golden transcript: an insta snapshot, a YAML header
  // between two `---` lines, then the text.
  const scripts = readdirSync(corpus)
    .filter((f) => f.endsWith('.inbox'))
    .sort()
    .map((file) => {
      const name = file.replace(/\.inbox$/, '');
      const golden = readFileSync(path.join(corpus, 'snapshots', `${name}.snap`), 'utf8');
      return { file, name, text: readFileSync(path.join(corpus, file), 'utf8'), expected: golden.slice(golden.indexOf('\n---\n') + 5) };
    });
  let server;
  let browser;
  let run; // what the worker answered
  const served = [];
  const consoleLines = [];

  before(async () => {
    assert.ok(existsSync(path.join(pkgRoot, 'inbox.js')), `inbox-wasm is not installed in ${jsRoot}/node_modules`);
    assert.ok(scripts.length >= 10, `the corpus went missing from ${corpus}`);
    server = await serveStatic({ '/pkg/': pkgRoot, '/': pageRoot }, served);
    browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    // A context of its own: its OPFS starts empty, so everything the worker
    // finds there afterwards is what the run made.
    const page = await (await browser.newContext()).newPage();
    page.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => consoleLines.push(`[pageerror] ${e.stack || e}`));
    await page.goto(`http://127.0.0.1:${server.address().port}/corpus.html`, { waitUntil: 'load' });
    run = await page.evaluate(
      (sent) =>
        new Promise((resolve) => {
          const worker = new Worker('/corpus-worker.js', { type: 'module', name: 'corpus' });
          worker.onmessage = ({ data }) => {
            worker.terminate();
            resolve(data);
          };
          worker.onerror = (event) => resolve({ error: { name: 'WorkerError', message: event.message || 'the worker failed to load' } });
          worker.postMessage({ scripts: sent });
        }),
      scripts.map(({ name, text }) => ({ name, text })),
    );
    assert.equal(run.error, undefined, `the corpus worker failed: ${JSON.stringify(run.error)}\n${consoleLines.join('\n')}\nserved: ${served.map((s) => `${s.path} ${s.status}`).join(', ')}`);
  });

  after(async () => {
    await browser?.close().catch(() => {});
    await new Promise((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  test('every corpus script gives the native golden transcript on OPFS, byte for byte', (t) => {
    assert.deepEqual(run.results.map((r) => r.name), scripts.map((s) => s.name));
    const differing = [];
    let first; // the first transcript that differs, shown as a diff
    for (const [i, result] of run.results.entries()) {
      const { file, expected } = scripts[i];
      if (result.error) {
        differing.push(`${file}: threw ${result.error.code ?? result.error.name}: ${result.error.message}`);
      } else if (result.failures.length > 0) {
        differing.push(`${file}: expectations failed: ${result.failures.join('; ')}`);
      } else if (result.text.trimEnd() !== expected.trimEnd()) {
        differing.push(`${file} differs from its golden transcript (opfs:${result.path})`);
        first ??= { actual: result.text.trimEnd(), expected: expected.trimEnd() };
      }
    }
    const report = `on OPFS:\n${differing.join('\n')}`;
    if (first) assert.equal(first.actual, first.expected, `${report}\n(the diff is the first of them)`);
    assert.deepEqual(differing, [], report);
    t.diagnostic(`${run.results.length} scripts on OPFS, byte-identical`);
  });

  test("a script's OPFS database is removed when the run ends: the same path runs again", () => {
    assert.equal(run.rerun.error, undefined, JSON.stringify(run.rerun.error));
    assert.equal(run.rerun.text.trimEnd(), scripts[0].expected.trimEnd(), scripts[0].file);
  });

  test('an OPFS path that holds a database is refused, open or closed, and keeps its work', () => {
    const { whileOpen, whileClosed, kept, threadId } = run.refusals;
    assert.equal(whileOpen.error?.code, 'storage_error', JSON.stringify(whileOpen));
    assert.match(whileOpen.error.message, /already open in this worker/);
    assert.equal(whileClosed.error?.code, 'storage_error', JSON.stringify(whileClosed));
    assert.equal(whileClosed.error.exitCode, 50);
    assert.match(whileClosed.error.message, /opfs:real\.db already exists, and a script starts from an empty database; pass a new path/);
    assert.deepEqual(kept, [threadId]);
  });

  test('the run leaves OPFS as it found it', (t) => {
    assert.deepEqual(run.opfsBefore, []);
    assert.deepEqual(run.made, ['.inbox-opfs/'], 'the pool keeps its files in one folder');
    assert.deepEqual(run.opfsAfter, run.opfsBefore);
    t.diagnostic(`removed: ${run.made.join(' ')}`);
  });
});
