// The live board (`inbox serve`) in headless Chromium, end to end.
//
// `inbox serve --write --port 0` runs as a real process on a scratch SQLite
// database; agents are `inbox` and `orch` processes; the page is driven with
// Playwright. What a person relies on is checked as they would see it: the
// threads the CLI made are on the board; a card moves columns live (no
// reload) when a worker claims and finishes it; an answer typed on the board
// wakes a worker blocked in `inbox wait-reply`; hostile HTML in a subject is
// shown as text and runs nothing; a write without the token is refused; a
// run's task graph is drawn. It also measures how long a CLI commit takes to
// show on the page (p50 must be at most 250 ms), the server's idle CPU with
// twenty boards open (at most 1% of a core) and, with
// INBOX_UPDATE_SCREENSHOTS=1, refreshes the README's pictures in
// docs/images/.
//
// Run from the repository's root after `cargo build -p inbox-cli`:
//   node --test cli/tests/board/
// INBOX_BIN names the inbox binary (default target/debug/inbox, or under
// $CARGO_TARGET_DIR); CHROMIUM the browser (default /usr/bin/chromium).
// playwright-core comes from host-wasm/js (npm ci there), which the wasm
// tests already install, so the board needs no package of its own.

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile, mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..', '..');
const wasmJs = path.join(root, 'host-wasm', 'js');
const { chromium } = createRequire(path.join(wasmJs, 'package.json'))('playwright-core');
const { CHROMIUM_ARGS, executablePath } = await import(path.join(wasmJs, 'lib', 'chromium.mjs'));
const { measureIdle } = await import(path.join(here, 'idle.mjs'));

const targetDir = process.env.CARGO_TARGET_DIR || path.join(root, 'target');
const inboxBin = path.resolve(process.env.INBOX_BIN || path.join(targetDir, 'debug', 'inbox'));
const orchBin = path.join(path.dirname(inboxBin), 'orch');
const screenshots = process.env.INBOX_UPDATE_SCREENSHOTS === '1';
const imagesDir = path.join(root, 'docs', 'images');
const run = promisify(execFile);

const HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> fix login';

describe('inbox serve in headless Chromium', { timeout: 90_000 }, () => {
  let dir;
  let env;
  let server;
  let url;
  let browser;
  let page;
  const pageErrors = [];

  /** `inbox ARGS --json` on the scratch database; its JSON answer. */
  async function inbox(...args) {
    const { stdout } = await run(inboxBin, [...args, '--json'], { env, cwd: dir });
    return JSON.parse(stdout);
  }

  async function orch(...args) {
    const { stdout } = await run(orchBin, [...args, '--json'], { env, cwd: dir });
    return JSON.parse(stdout);
  }

  /** The column a thread's card is in now, or null. */
  function columnOf(threadId) {
    return page.evaluate((id) => document.querySelector(`.card[data-thread="${id}"]`)?.closest('.column')?.dataset.column ?? null, threadId);
  }

  async function waitForColumn(threadId, column) {
    await page.waitForSelector(`.column[data-column="${column}"] .card[data-thread="${threadId}"]`, { timeout: 5000 });
  }

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'inbox-board-'));
    env = { ...process.env, INBOX_DB: path.join(dir, 'coord.db') };
    for (const name of ['INBOX_AGENT', 'INBOX_AGENT_TOKEN', 'INBOX_NOW']) delete env[name];
    await inbox('init');
    server = spawn(inboxBin, ['serve', '--write', '--as', 'alice', '--port', '0'], { env, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    url = await new Promise((resolve, reject) => {
      let out = '';
      server.stdout.on('data', (chunk) => {
        out += chunk;
        if (out.includes('\n')) resolve(out.split('\n')[0]);
      });
      server.on('exit', (code) => reject(new Error(`inbox serve exited with ${code}`)));
    });
    browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
    page = await browser.newPage({ viewport: { width: 1400, height: 820 } });
    page.on('pageerror', (error) => pageErrors.push(error.message));
  });

  after(async () => {
    await browser?.close();
    server?.kill();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('the URL is printed first, loopback, with the token in its fragment', () => {
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/#token=[0-9a-f]{64}$/);
  });

  test('the board shows threads that CLI processes made, and hostile HTML as text', async () => {
    await inbox('agent', 'register', '--agent', 'w1', '--role', 'builder');
    const plain = await inbox('send', '--from', 'lead', '--to', 'w1', '--subject', 'Write the README');
    const hostile = await inbox('send', '--from', 'lead', '--to', 'role:builder', '--subject', HOSTILE, '--priority', 'high', '--body', '**Bold** and <script>window.__pwned=3</script> [x](javascript:alert(1))');
    await page.goto(url);
    await page.waitForSelector(`.card[data-thread="${plain.thread.thread_id}"]`);
    await page.waitForSelector(`.card[data-thread="${hostile.thread.thread_id}"]`);
    // The token left the address bar once read.
    assert.equal(new URL(page.url()).hash, '');
    const card = page.locator(`.card[data-thread="${hostile.thread.thread_id}"] .subject`);
    assert.equal(await card.textContent(), HOSTILE);
    assert.equal(await page.locator('main img, main script, #panel img, #panel script').count(), 0);
    await page.click(`.card[data-thread="${hostile.thread.thread_id}"]`);
    await page.waitForSelector('#panel .message');
    assert.equal(await page.locator('#panel .md strong').textContent(), 'Bold');
    assert.equal(await page.locator('#panel script, #panel img, #panel a').count(), 0, 'no script, image or javascript: link');
    assert.match(await page.locator('#panel .md').textContent(), /<script>window.__pwned=3<\/script>/);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await page.keyboard.press('Escape');
    assert.deepEqual(pageErrors, []);
  });

  test('a card moves columns live as a worker claims and finishes it', async () => {
    const sent = await inbox('send', '--from', 'lead', '--to', 'w1', '--subject', 'Post CRUD routes');
    const id = sent.thread.thread_id;
    await waitForColumn(id, 'pending');
    await page.evaluate(() => (window.__sameDocument = true));
    const claim = await inbox('claim', '--agent', 'w1', '--thread', id);
    await waitForColumn(id, 'in_progress');
    await inbox('done', '--agent', 'w1', '--thread', id, '--lease-token', String(claim.lease.lease_token), '--summary', 'Routes in');
    await waitForColumn(id, 'done');
    assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was not reloaded');
  });

  test('an answer from the board wakes a worker blocked in wait-reply', async () => {
    const sent = await inbox('send', '--from', 'lead', '--to', 'w1', '--subject', 'Auth for the MVP');
    const id = sent.thread.thread_id;
    const claim = await inbox('claim', '--agent', 'w1', '--thread', id);
    const token = String(claim.lease.lease_token);
    await inbox('update', '--agent', 'w1', '--thread', id, '--lease-token', token, '--status', 'blocked', '--summary', 'Email or SSO?');
    const waiting = run(inboxBin, ['wait-reply', '--agent', 'w1', '--thread', id, '--lease-token', token, '--timeout-seconds', '30', '--json'], { env, cwd: dir });
    const card = `.column[data-column="blocked"] .card[data-thread="${id}"]`;
    await page.waitForSelector(`${card} .question`);
    assert.match(await page.locator(`${card} .question`).textContent(), /Email or SSO\?/);
    await page.fill(`${card} .answer input`, 'Email and password');
    await page.click(`${card} .answer button`);
    const { stdout } = await waiting;
    const woke = JSON.parse(stdout);
    assert.equal(woke.woke, true);
    assert.equal(woke.message.kind, 'answer');
    assert.equal(woke.message.from_agent, 'alice');
    assert.equal(woke.message.summary, 'Email and password');
    await waitForColumn(id, 'in_progress');
  });

  test('a call without the token is refused, on the page and over HTTP, reads and the event stream too', async () => {
    const refused = await page.evaluate(async () => {
      const call = async (path, init) => {
        const response = await fetch(path, init);
        return { status: response.status, body: await response.json() };
      };
      return Promise.all([
        call('/api/send', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ to_agent: 'w1', subject: 'sneaky' }) }),
        call('/api/list', { method: 'POST', body: '{}' }),
        call('/api/events', {}),
      ]);
    });
    for (const answer of refused) {
      assert.equal(answer.status, 401);
      assert.equal(answer.body.ok, false);
      assert.equal(answer.body.error.code, 'token_required');
    }
    // A page opened without the token in its URL shows nothing and says why.
    const other = await browser.newPage();
    await other.goto(url.split('#')[0]);
    await other.waitForFunction(() => document.getElementById('mode').textContent.includes('token'));
    assert.equal(await other.locator('.card').count(), 0);
    assert.equal(await other.locator('#new-task').isHidden(), true);
    assert.match(await other.locator('#view').textContent(), /needs its token/);
    await other.close();
    const listed = await inbox('list', '--limit', '1000');
    assert.equal(listed.threads.some((t) => t.subject === 'sneaky'), false);
  });

  test('--open hands the browser a private file that sends it on to the board with its token', async () => {
    // A browser opener that writes down what it was given.
    const bin = path.join(dir, 'bin');
    await mkdir(bin, { recursive: true });
    const opener = path.join(bin, 'xdg-open');
    await writeFile(opener, '#!/bin/sh\nprintf \'%s\' "$*" > "$0.link.tmp" && mv "$0.link.tmp" "$0.link"\n', { mode: 0o755 });
    const temp = path.join(dir, 'tmp');
    await mkdir(temp, { recursive: true });
    const openEnv = { ...env, PATH: `${bin}:${env.PATH}`, TMPDIR: temp };
    delete openEnv.XDG_RUNTIME_DIR;
    const opened = spawn(inboxBin, ['serve', '--open', '--port', '0', '--url-file', path.join(dir, 'open.url')], {
      env: openEnv, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((resolve) => opened.on('exit', resolve));
    try {
      let link = null;
      for (let i = 0; i < 200 && link === null; i += 1) {
        link = await readFile(`${opener}.link`, 'utf8').catch(() => null);
        if (link === null) await new Promise((resolve) => setTimeout(resolve, 25));
      }
      assert.ok(link, 'the opener was run');
      const withToken = (await readFile(path.join(dir, 'open.url'), 'utf8')).trim();
      const token = new URL(withToken).hash.replace('#token=', '');
      assert.match(link, /^file:\/\/\/.*\/open\.html$/);
      assert.equal(link.includes(token), false, 'the opener is not given the token');
      const file = fileURLToPath(link);
      assert.equal(path.dirname(path.dirname(file)), temp);
      const tab = await browser.newPage();
      await tab.goto(link, { waitUntil: 'commit' });
      await tab.waitForSelector('.card');
      assert.equal(new URL(tab.url()).origin, new URL(withToken).origin);
      assert.equal(new URL(tab.url()).hash, '', 'the token left the address bar');
      assert.match(await tab.locator('#mode').textContent(), /read-only/);
      await tab.close();
      // Stopped, the board takes the file away.
      opened.kill('SIGINT');
      await exited;
      assert.equal(await readFile(file, 'utf8').catch(() => null), null, 'the file is gone');
    } finally {
      opened.kill();
    }
  });

  test('a run shows its task graph, ready queue and what waits on the leader', async () => {
    await orch('run', 'create', '--agent', 'lead', '--goal', 'Ship the login page', '--id', 'login');
    const plan = { tasks: [
      { task_id: 'schema', title: 'User table migration', assignee: 'w1' },
      { task_id: 'api', title: 'Login endpoint', assignee: 'w1', needs: ['schema'] },
      { task_id: 'ui', title: 'Login form', assignee: 'role:builder', needs: ['schema'] },
      { task_id: 'e2e', title: 'End-to-end test', assignee: 'w1', needs: ['api', 'ui'] },
      { task_id: 'docs', title: 'Document the flow', assignee: 'w1' },
    ] };
    await writeFile(path.join(dir, 'plan.json'), JSON.stringify(plan));
    await orch('plan', '--agent', 'lead', '--run', 'login', '--file', path.join(dir, 'plan.json'));
    await orch('dispatch', '--agent', 'lead', '--run', 'login', '--task', 'schema');
    const [schema] = (await inbox('list', '--run', 'login')).threads;
    const claim = await inbox('claim', '--agent', 'w1', '--thread', schema.thread_id);
    await inbox('done', '--agent', 'w1', '--thread', schema.thread_id, '--lease-token', String(claim.lease.lease_token), '--summary', 'Migration 0007 added');
    await page.click('#tabs button[data-view="runs"]');
    await page.waitForSelector('.graph svg .node[data-task="e2e"]');
    assert.equal(await page.locator('.graph svg .node').count(), 5);
    assert.equal(await page.locator('.graph svg .edge').count(), 4);
    await page.waitForSelector('.graph svg .node[data-task="schema"][data-status="done"]');
    assert.ok((await page.locator('.lists').textContent()).includes('Login endpoint'), 'api is ready');
    if (screenshots) {
      await mkdir(imagesDir, { recursive: true });
      await page.evaluate(() => (document.getElementById('toast').hidden = true));
      await page.screenshot({ path: path.join(imagesDir, 'run.png') });
    }
    await page.click('#tabs button[data-view="board"]');
    await page.waitForSelector('.columns');
  });

  test('screenshots for the README', { skip: !screenshots && 'INBOX_UPDATE_SCREENSHOTS is not 1' }, async () => {
    await mkdir(imagesDir, { recursive: true });
    const sent = await inbox('send', '--from', 'lead', '--to', 'w1', '--subject', 'Rate-limit the login endpoint', '--body', 'Limit **failed** logins per account:\n\n- 5 per minute\n- then a `429` with `Retry-After`\n\nSee [the OWASP notes](https://owasp.org).', '--payload-json', '{"endpoint":"/login","limit_per_minute":5}');
    const id = sent.thread.thread_id;
    const claim = await inbox('claim', '--agent', 'w1', '--thread', id);
    const token = String(claim.lease.lease_token);
    await inbox('update', '--agent', 'w1', '--thread', id, '--lease-token', token, '--status', 'blocked', '--summary', 'Per account or per IP address?', '--payload-json', '{"options":["account","ip"]}');
    const flaky = await inbox('send', '--from', 'lead', '--to', 'w2', '--subject', 'Load-test the session store');
    const w2 = await inbox('claim', '--agent', 'w2', '--thread', flaky.thread.thread_id);
    await inbox('fail', '--agent', 'w2', '--thread', flaky.thread.thread_id, '--lease-token', String(w2.lease.lease_token), '--summary', 'No staging credentials');
    const old = await inbox('send', '--from', 'lead', '--to', 'w1', '--subject', 'Spike: magic links');
    await inbox('cancel', '--agent', 'lead', '--thread', old.thread.thread_id, '--reason', 'Out of scope for the MVP');
    await page.waitForSelector(`.card[data-thread="${id}"] .question`);
    await page.waitForSelector(`.column[data-column="cancelled"] .card[data-thread="${old.thread.thread_id}"]`);
    await page.evaluate(() => (document.getElementById('toast').hidden = true));
    await page.screenshot({ path: path.join(imagesDir, 'board.png') });
    await page.click(`.card[data-thread="${id}"]`);
    await page.waitForSelector('#panel .message');
    await page.screenshot({ path: path.join(imagesDir, 'thread.png') });
  });
  test('a CLI commit shows on the page within 250 ms at the median', async () => {
    // Timed from just before `inbox send` starts to the moment the card
    // is in the DOM (a MutationObserver's clock; one machine, one clock).
    await page.evaluate(() => {
      window.__seen = {};
      new MutationObserver(() => {
        for (const subject of document.querySelectorAll('.card .subject')) {
          const text = subject.textContent;
          if (text.startsWith('latency ') && !(text in window.__seen)) window.__seen[text] = Date.now();
        }
      }).observe(document.getElementById('view'), { childList: true, subtree: true });
    });
    const samples = [];
    for (let i = 0; i < 20; i += 1) {
      const subject = `latency ${i}`;
      const started = Date.now();
      await inbox('send', '--from', 'lead', '--to', 'w1', '--subject', subject);
      await page.waitForFunction((s) => s in window.__seen, subject, { timeout: 5000 });
      samples.push((await page.evaluate((s) => window.__seen[s], subject)) - started);
    }
    samples.sort((a, b) => a - b);
    const p50 = samples[Math.floor(samples.length / 2)];
    const p90 = samples[Math.floor(samples.length * 0.9)];
    console.log(`board latency, CLI send start to card visible, 20 samples: p50 ${p50} ms, p90 ${p90} ms, max ${samples.at(-1)} ms`);
    assert.ok(p50 <= 250, `p50 ${p50} ms > 250 ms: ${samples.join(', ')}`);
  });

  test('twenty idle boards cost at most 1% of a core', async () => {
    // Its own server and database, nothing happening: the cost of one
    // follower and twenty open event streams (idle.mjs; docs/BENCHMARKS.md).
    const idle = await measureIdle({ bin: inboxBin, boards: 20, seconds: 5 });
    console.log(`board idle: ${idle.boards} open event streams, ${idle.cpu_ms} ms of CPU in ${idle.seconds} s = ${idle.core_percent}% of a core`);
    assert.ok(idle.core_percent <= 1, JSON.stringify(idle));
  });
});
