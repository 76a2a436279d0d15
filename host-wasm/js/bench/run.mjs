#!/usr/bin/env node
// The wasm benchmark: commands per second of the inbox-wasm package in Node
// and in headless Chromium, for send and claim+done, over each store
// (memory, sqlite; file in Node; opfs in a dedicated worker), side by side
// with the native engine over native SQLite measured in the same run, plus
// the size of the .wasm. Writes docs/wasm-benchmarks.md (or, with --quick, a
// smoke run of about half a minute, target/bench-quick/wasm-benchmarks.md),
// and the raw per-round figures to target/wasm-bench/.
//
//   node host-wasm/js/bench/run.mjs            # full run, ~7 min (any cwd)
//   node host-wasm/js/bench/run.mjs --quick    # smoke run, for CI
//   node host-wasm/js/bench/run.mjs --baseline-pkg /tmp/old/host-wasm/pkg
//                                              # A/B against another build
//
// Options: --quick, --out FILE (the report), --rounds N, --ops N, --warmup N,
// --file-ops N and --file-warmup N (smaller sizes for the file rows only),
// --no-build (use target/release/inbox-bench as it is), --native PATH (use
// this inbox-bench build, e.g. the tests' debug one in a smoke run), --pkg DIR
// (measure this build of the package instead of the installed one),
// --baseline-pkg DIR (also measure another build in Node, in the same
// rounds, and compare sizes), --from FILE (only render the report from an
// earlier run's raw figures). CHROMIUM=/path overrides the browser (default
// /usr/bin/chromium).
//
// The `file` store needs node:sqlite in the newer package (Node 22.16+):
// each Node package is probed once, and where it cannot open a file store in
// this Node its file rows are left out and the report says why. Each file
// measurement runs on a new database in a new temporary folder, removed
// after it.
//
// Files: workload.mjs (the two workloads, shared by every runtime),
// page.html + page.mjs (the Chromium page), worker.mjs (the dedicated module
// worker: opfs, a sqlite control, and a probe of single OPFS calls), and
// bench/src/wasm_baseline.rs (the native figures).
//
// Needs: the package installed in host-wasm/js (scripts/test-wasm does it;
// else host-wasm/pkg is used directly; --pkg names another), playwright-core
// (npm ci in host-wasm/js), Chromium, and cargo for the native baseline
// (built with `cargo build --release -p inbox-bench --bins` unless
// --no-build).
//
// How a run goes: one cold round per runtime (reported, not counted), then
// N rounds; each round runs, in turn, the native baseline (a child process,
// `inbox-bench wasm-baseline --rounds 1`), Node (this process; with
// --baseline-pkg, both packages, taking turns at going first), the Chromium
// page, a new Chromium worker and a worker in an incognito context (smaller
// sizes: OPFS there is slow), so a slow spell of this shared machine
// touches every runtime alike. Every figure is the median of the N rounds,
// with their minimum and maximum.

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fdatasyncSync,
  fstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

import { CHROMIUM_ARGS, executablePath, serveStatic } from '../lib/chromium.mjs';
import { measure, probeCalls, WORKLOADS } from './workload.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const jsRoot = path.resolve(here, '..');
const repo = path.resolve(jsRoot, '..', '..');
/** Sizes of the incognito OPFS rows (see openChromium): [ops, warmup], full and quick. */
const INCOGNITO = { full: [50, 5], quick: [10, 2] };
/** Calls per OPFS primitive in the probe. */
const PROBE_CALLS = 400;
// Only the harness: its `wasm-baseline` runs the engine in process. Built
// alone, with the features `scripts/test` and `scripts/bench` build it with,
// so it is not compiled again with other packages' features unified in.
const BUILD = ['build', '--release', '-p', 'inbox-bench', '--bins'];

const USAGE = `usage: node host-wasm/js/bench/run.mjs [--quick] [--out FILE] [--rounds N] [--ops N] [--warmup N] [--no-build] [--native PATH]
                                     [--pkg DIR] [--baseline-pkg DIR] [--file-ops N] [--file-warmup N] [--from FILE]

  --quick     smoke run (small sizes, a few seconds of measuring); the report
              goes to target/bench-quick/wasm-benchmarks.md unless --out is given
  --out FILE  where to write the report (default docs/wasm-benchmarks.md)
  --rounds N  timed rounds per runtime (default 7, quick 3), after one cold round
  --ops N     timed operations per round and workload (default 2000, quick 100)
  --warmup N  untimed operations before them in each round (default 200, quick 10)
  --file-ops N, --file-warmup N
              the same for the Node \`file\` rows only (default: --ops and
              --warmup); for a package whose file store is too slow for the
              full sizes, such as the one before node:sqlite (its commands
              slow down as the file grows)
  --no-build  do not run \`cargo ${BUILD.join(' ')}\` first
  --native PATH
              use this inbox-bench for the native baseline and build nothing
              (a smoke run can take the tests' debug build; a full run's
              native figures need a release build)
  --pkg DIR   measure this build of the package (a folder with node/inbox.js,
              web/inbox_bg.wasm and package.json, like host-wasm/pkg) instead
              of the one installed in host-wasm/js
  --baseline-pkg DIR
              another build of the package (same layout; a BUILT_FROM file in
              it names its commit): Node measures its memory, sqlite and file
              stores too, in the same rounds, and the report compares the two
              packages' rates and module sizes
  --from FILE measure nothing: write the report again from the raw figures of an
              earlier run (target/wasm-bench/results.json), e.g. after changing
              how the report reads`;

// ---------------------------------------------------------------- options

function parseArgs(argv) {
  const o = {
    quick: false, out: null, rounds: null, ops: null, warmup: null, fileOps: null, fileWarmup: null,
    build: true, native: null, from: null, pkg: null, baselinePkg: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const number = () => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${arg} needs a whole number\n\n${USAGE}`);
      return v;
    };
    if (arg === '--quick') o.quick = true;
    else if (arg === '--no-build') o.build = false;
    else if (arg === '--native') {
      if (!argv[i + 1]) throw new Error(`--native needs a path\n\n${USAGE}`);
      o.native = path.resolve(argv[++i]);
      o.build = false;
    }
    else if (arg === '--pkg' || arg === '--baseline-pkg') {
      if (!argv[i + 1]) throw new Error(`${arg} needs a folder\n\n${USAGE}`);
      o[arg === '--pkg' ? 'pkg' : 'baselinePkg'] = path.resolve(argv[++i]);
    }
    else if (arg === '--from') {
      if (!argv[i + 1]) throw new Error(`--from needs a file\n\n${USAGE}`);
      o.from = path.resolve(argv[++i]);
    }
    else if (arg === '--out') {
      if (!argv[i + 1]) throw new Error(`--out needs a file\n\n${USAGE}`);
      o.out = path.resolve(argv[++i]);
    } else if (arg === '--rounds') o.rounds = number();
    else if (arg === '--ops') o.ops = number();
    else if (arg === '--warmup') o.warmup = number();
    else if (arg === '--file-ops') o.fileOps = number();
    else if (arg === '--file-warmup') o.fileWarmup = number();
    else if (arg === '-h' || arg === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else throw new Error(`unknown option ${arg}\n\n${USAGE}`);
  }
  o.rounds ??= o.quick ? 3 : 7;
  o.ops ??= o.quick ? 100 : 2000;
  o.warmup ??= o.quick ? 10 : 200;
  o.fileOps ??= o.ops;
  o.fileWarmup ??= o.warmup;
  if (o.rounds < 1 || o.ops < 1 || o.fileOps < 1) throw new Error('--rounds, --ops and --file-ops must be at least 1');
  o.outGiven = o.out !== null;
  o.out ??= o.quick
    ? path.join(repo, 'target', 'bench-quick', 'wasm-benchmarks.md')
    : path.join(repo, 'docs', 'wasm-benchmarks.md');
  return o;
}

// ---------------------------------------------------------------- helpers

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new Error(`cannot run ${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stderr}${r.stdout}`);
  return r.stdout;
}

function firstLine(cmd, args) {
  try {
    return run(cmd, args).split('\n')[0].trim();
  } catch {
    return null;
  }
}

function readText(file) {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/** The 1-minute load average and 60 s CPU/IO pressure, as the Rust harness prints them. */
function load() {
  const one = readText('/proc/loadavg').split(/\s+/)[0] || '?';
  const pressure = (what) => /avg60=([\d.]+)/.exec(readText(`/proc/pressure/${what}`))?.[1] ?? '?';
  return `load ${one}, CPU pressure ${pressure('cpu')} %, I/O pressure ${pressure('io')} %`;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

function summary(samples) {
  return { median: median(samples), min: Math.min(...samples), max: Math.max(...samples), samples };
}

/** 3 significant digits, thousands as k: 812, 7731, 12.3k, 435k. */
function fmtRate(x) {
  if (!Number.isFinite(x)) return 'n/a';
  if (x < 10_000) return x >= 100 ? String(Math.round(x)) : x.toPrecision(3);
  return `${(x / 1000).toPrecision(3)}k`;
}

function fmtRatio(x) {
  if (!Number.isFinite(x)) return 'n/a';
  if (x >= 10) return `${x.toFixed(1)}×`;
  return x >= 0.1 ? `${x.toFixed(2)}×` : `${x.toPrecision(2)}×`;
}

function fmtUs(us) {
  if (!Number.isFinite(us)) return 'n/a';
  return us >= 1000 ? `${(us / 1000).toPrecision(3)} ms` : `${us.toPrecision(3)} µs`;
}

function fmtBytes(n) {
  return `${n.toLocaleString('en-US')} B (${(n / 1024 / 1024).toFixed(2)} MiB)`;
}

// ---------------------------------------------------------------- the package

/** Whether `root` holds a build of the package: its Node glue, its module and its package.json. */
function isPackage(root) {
  return ['node/inbox.js', 'web/inbox_bg.wasm', 'package.json'].every((f) => existsSync(path.join(root, f)));
}

/** Where the package is: --pkg, else installed in host-wasm/js, else host-wasm/pkg itself. */
function locatePackage(o) {
  if (o.pkg) return namedPackage(o.pkg, '--pkg');
  const installed = path.join(jsRoot, 'node_modules', 'inbox-wasm');
  const built = path.join(repo, 'host-wasm', 'pkg');
  for (const [root, how] of [
    [installed, 'installed in host-wasm/js/node_modules (npm pack + npm install)'],
    [built, 'host-wasm/pkg (not installed in host-wasm/js)'],
  ]) {
    if (isPackage(root)) return { root, how };
  }
  throw new Error('inbox-wasm is not built: run scripts/build-wasm (and install it into host-wasm/js, see scripts/test-wasm)');
}

/** A package folder named on the command line (`flag`). */
function namedPackage(root, flag) {
  if (!isPackage(root)) throw new Error(`${flag} ${root}: not a build of the package (needs node/inbox.js, web/inbox_bg.wasm and package.json)`);
  return { root, how: `${root} (${flag})` };
}

/**
 * Loads a package's Node build into this process. Two builds load side by
 * side: each is its own CommonJS module with its own wasm instance.
 * `builtFrom`: the commit a BUILT_FROM file in the folder names, if any.
 */
function loadPackage(pkg) {
  const require = createRequire(path.join(jsRoot, 'package.json'));
  const { Inbox } = require(path.join(pkg.root, 'node', 'inbox.js'));
  const { version } = JSON.parse(readFileSync(path.join(pkg.root, 'package.json'), 'utf8'));
  const builtFrom = readText(path.join(pkg.root, 'BUILT_FROM')).trim() || null;
  return { ...pkg, Inbox, version, builtFrom, label: `inbox-wasm ${version}, ${pkg.how}` };
}

function sha256(bytes) {
  return createHash('sha256').update(bytes).digest('hex');
}

/** gzip -9 (the gzip program when there is one, as scripts/build-wasm measures). */
function gzip9(file, bytes) {
  const r = spawnSync('gzip', ['-9', '-c', file], { maxBuffer: 64 << 20 });
  if (!r.error && r.status === 0) return { size: r.stdout.length, how: '`gzip -9`' };
  return { size: zlib.gzipSync(bytes, { level: 9 }).length, how: 'zlib level 9' };
}

function fileSizes(file) {
  const bytes = readFileSync(file);
  const brotli = zlib.brotliCompressSync(bytes, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11 } }).length;
  return { raw: bytes.length, gzip: gzip9(file, bytes), brotli };
}

/** Sizes of a package's module and web glue, its module's hash and time of build. */
function moduleSizes(root) {
  const wasmFile = path.join(root, 'web', 'inbox_bg.wasm');
  return {
    wasm: fileSizes(wasmFile),
    glue: fileSizes(path.join(root, 'web', 'inbox.js')),
    sha256: sha256(readFileSync(wasmFile)),
    builtAt: statSync(wasmFile).mtime.toISOString(),
  };
}

/** moduleSizes of the package measured, and how it stands against the build in the repository. */
function sizes(pkg, named) {
  const own = moduleSizes(pkg.root);
  const built = path.join(repo, 'host-wasm', 'pkg', 'web', 'inbox_bg.wasm');
  // A package named by --pkg is meant to differ from host-wasm/pkg.
  const builtHash = !named && existsSync(built) ? sha256(readFileSync(built)) : null;
  // The memory-only variant (scripts/build-wasm --memory-only), when built.
  const memoryOnly = path.join(repo, 'host-wasm', 'pkg-memory', 'web', 'inbox_bg.wasm');
  return {
    ...own,
    memoryOnly: existsSync(memoryOnly) ? fileSizes(memoryOnly) : null,
    matchesBuilt: builtHash === null ? null : builtHash === own.sha256,
    stale: staleness(Date.parse(own.builtAt)),
  };
}

/** What the module is built from (relative to the repository). */
const WASM_SOURCES = ['host-wasm/src', 'host-wasm/Cargo.toml', 'engine/src', 'stores/sqlite/src', 'stores/sql/src', 'Cargo.lock'];

/** Names the source files changed after the module was built (by modification time), if any. */
function staleness(builtMs) {
  const newer = [];
  const walk = (rel) => {
    const full = path.join(repo, rel);
    if (!existsSync(full)) return;
    const st = statSync(full);
    if (st.isDirectory()) for (const name of readdirSync(full)) walk(path.join(rel, name));
    else if (st.mtimeMs > builtMs) newer.push(rel);
  };
  WASM_SOURCES.forEach(walk);
  if (!newer.length) return null;
  const shown = newer.slice(0, 5).map((f) => `\`${f}\``).join(', ');
  return `${newer.length} source file(s) changed after it was built (${shown}${newer.length > 5 ? ', …' : ''})`;
}

/** The SQLite version compiled into the wasm module (from sqlite-wasm-rs's sqlite3.h in the Cargo registry), if found. */
function wasmSqliteVersion() {
  const version = /name = "sqlite-wasm-rs"\nversion = "([^"]+)"/.exec(readText(path.join(repo, 'Cargo.lock')))?.[1];
  const registry = path.join(process.env.CARGO_HOME || path.join(os.homedir(), '.cargo'), 'registry', 'src');
  if (!version || !existsSync(registry)) return null;
  for (const index of readdirSync(registry)) {
    const header = readText(path.join(registry, index, `sqlite-wasm-rs-${version}`, 'sqlite3', 'sqlite3.h'));
    const m = /#define SQLITE_VERSION\s+"([^"]+)"/.exec(header);
    if (m) return m[1];
  }
  return null;
}

// ---------------------------------------------------------------- native

/** The harness built by BUILD, where --native does not name another. */
function nativeBin(o) {
  return o.native ?? path.join(repo, 'target', 'release', 'inbox-bench');
}

/** One round of `inbox-bench wasm-baseline`: [{runtime, store, api, workload, ops_per_sec}]. */
function nativeRound(s) {
  const out = run(s.native, [
    'wasm-baseline',
    '--ops', String(s.ops),
    '--warmup', String(s.warmup),
    '--rounds', '1',
  ]);
  const parsed = JSON.parse(out);
  nativeRound.sqliteVersion = parsed.sqlite_version;
  return parsed.series.map((x) => ({
    runtime: 'native',
    store: x.store,
    api: x.api,
    workload: x.workload,
    ops_per_sec: x.ops_per_sec[0],
  }));
}

/**
 * The OPFS probe's calls done by Node on a plain file in the temporary
 * folder (where the Chromium profile lives too): pwrite, pread, fstat,
 * fdatasync. µs per call.
 */
async function fileProbe(n) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'inbox-wasm-probe-'));
  const file = path.join(dir, 'probe.bin');
  const fd = openSync(file, 'w+');
  const page = Buffer.alloc(2048, 7);
  try {
    return probeCalls(n, {
      write: (p) => writeSync(fd, page, 0, page.length, p * 2048),
      read: (p) => readSync(fd, page, 0, page.length, p * 2048),
      size: () => fstatSync(fd).size,
      flush: () => fdatasyncSync(fd),
    });
  } finally {
    closeSync(fd);
    await rm(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- Node

/** Runs `fn(dir)` with a new folder under the temporary folder, and removes the folder after. */
async function inTempDir(prefix, fn) {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Whether this Node can open the package's `file` store: null if it can,
 * else why not. The store runs on node:sqlite since its rewrite (Node
 * 22.16+), and opening it in an older Node says so; that leaves the file
 * rows out. Any other failure is a fault of the package and stops the run.
 */
async function fileStoreProbe(Inbox) {
  try {
    await inTempDir('inbox-wasm-file-', async (dir) => {
      const inbox = await Inbox.open({ store: 'file', path: path.join(dir, 'probe.db') });
      inbox.close();
      inbox.free();
    });
    return null;
  } catch (e) {
    const message = String(e?.message ?? e);
    if (message.includes('node:sqlite')) return message;
    throw new Error(`store "file" fails to open: ${message}`);
  }
}

/** The stores Node measures of a package: memory and sqlite, and file where it opens. */
function nodeStores(pkg) {
  return pkg.fileUnavailable ? ['memory', 'sqlite'] : ['memory', 'sqlite', 'file'];
}

/**
 * One round of a package in this process, as `runtime`: every workload on
 * each of its stores, each on a new store; a file store on a new database
 * file in a new temporary folder, removed after (the disk is small).
 */
async function nodeRound(runtime, pkg, s) {
  const sizes = { ops: s.ops, warmup: s.warmup };
  const out = [];
  for (const store of nodeStores(pkg)) {
    for (const workload of WORKLOADS) {
      const ops_per_sec = store === 'file'
        ? await inTempDir('inbox-wasm-file-', (dir) => measure(pkg.Inbox, store, workload, s.file, path.join(dir, 'inbox.db')))
        : await measure(pkg.Inbox, store, workload, sizes);
      out.push({ runtime, store, api: 'js', workload, ops_per_sec });
    }
  }
  return out;
}

// ---------------------------------------------------------------- Chromium


/**
 * A headless Chromium on the benchmark page. By default with a regular
 * (persistent) profile in a temporary folder, as a user's browser runs:
 * OPFS there writes to real files. With `incognito`, in a fresh browser
 * context (what Playwright's `browser.newContext()` gives), where OPFS lives
 * in memory behind the browser process and every access-handle call is a
 * round trip to it.
 */
async function openChromium(pkg, { incognito = false } = {}) {
  if (!existsSync(executablePath)) throw new Error(`no Chromium at ${executablePath}; set CHROMIUM=/path/to/chromium`);
  const { chromium } = await import('playwright-core');
  const server = await serveStatic({ '/bench/': here, '/pkg/': path.join(pkg.root, 'web') });
  const options = { executablePath, headless: true, args: CHROMIUM_ARGS };
  let profile = null;
  let browser = null;
  let context;
  if (incognito) {
    browser = await chromium.launch(options);
    context = await browser.newContext();
  } else {
    profile = await mkdtemp(path.join(os.tmpdir(), 'inbox-wasm-bench-'));
    context = await chromium.launchPersistentContext(profile, options);
  }
  const page = context.pages()[0] ?? (await context.newPage());
  const log = [];
  page.on('console', (m) => log.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => log.push(`[pageerror] ${e.stack || e}`));
  const origin = `http://127.0.0.1:${server.address().port}`;
  await page.goto(`${origin}/bench/page.html`, { waitUntil: 'load' });
  await page.locator('body[data-state="ready"], body[data-state="error"]').waitFor({ state: 'attached', timeout: 30_000 });
  const error = await page.evaluate(() => window.benchError);
  if (error) throw new Error(`the benchmark page failed: ${error}\n${log.join('\n')}`);
  const call = async (fn, ...args) => {
    try {
      return await page.evaluate(([fn, args]) => window.bench[fn](...args), [fn, args]);
    } catch (e) {
      throw new Error(`${e.message}\n${log.join('\n')}`);
    }
  };
  const tag = (runtime, rows) => rows.map((x) => ({ runtime, api: 'js', ...x }));
  return {
    version: browser ? browser.version() : context.browser()?.version() ?? (await versionOf(page)),
    userAgent: await page.evaluate(() => navigator.userAgent),
    /** Runs `stores` on the page. */
    page: async (runtime, stores, s) => tag(runtime, await call('page', stores, s, '')),
    /** Runs `stores` in a new dedicated worker. */
    worker: async (runtime, stores, s) => tag(runtime, await call('worker', stores, s, '')),
    /** µs per OPFS access-handle call, `n` calls each, in a new worker. */
    probe: (n) => call('probe', n),
    close: async () => {
      await context.close();
      if (browser) await browser.close();
      await new Promise((r) => server.close(r));
      if (profile) await rm(profile, { recursive: true, force: true });
    },
  };
}

/** Chromium's version from its user agent (a persistent context has no Browser object). */
async function versionOf(page) {
  const ua = await page.evaluate(() => navigator.userAgent);
  return /(?:HeadlessChrome|Chrome)\/([\d.]+)/.exec(ua)?.[1] ?? ua;
}

// ---------------------------------------------------------------- the run

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.from) {
    const results = JSON.parse(await readFile(o.from, 'utf8'));
    o.quick = results.quick;
    if (!o.outGiven && o.quick) o.out = path.join(repo, 'target', 'bench-quick', 'wasm-benchmarks.md');
    const report = render(results, o);
    await mkdir(path.dirname(o.out), { recursive: true });
    await writeFile(o.out, report.markdown);
    console.log(`wrote ${o.out} from ${o.from}`);
    for (const line of report.headlines) console.log(line);
    return;
  }
  const started = Date.now();
  const loadStart = load();
  const s = { ops: o.ops, warmup: o.warmup, file: { ops: o.fileOps, warmup: o.fileWarmup }, native: nativeBin(o) };

  if (o.build) {
    console.error(`building the native baseline: cargo ${BUILD.join(' ')}`);
    run('cargo', [...BUILD, '-q'], { cwd: repo, stdio: ['ignore', 'inherit', 'inherit'] });
  }
  if (!existsSync(s.native)) {
    throw new Error(o.native
      ? `--native ${s.native}: no such file; name an inbox-bench that exists`
      : `${s.native}: no such file; run cargo ${BUILD.join(' ')} (or drop --no-build)`);
  }

  const pkg = loadPackage(locatePackage(o));
  const baseline = o.baselinePkg ? loadPackage(namedPackage(o.baselinePkg, '--baseline-pkg')) : null;
  const size = sizes(pkg, o.pkg !== null);
  for (const p of [pkg, baseline].filter(Boolean)) {
    p.fileUnavailable = await fileStoreProbe(p.Inbox);
    if (p.fileUnavailable) console.error(`${p.root}: no file rows in this Node: ${p.fileUnavailable}`);
  }

  // OPFS in an incognito context does a round trip to the browser process per
  // file operation (tens of ms per commit): small sizes, or it takes hours.
  const [incOps, incWarmup] = INCOGNITO[o.quick ? 'quick' : 'full'];
  const small = { ops: Math.min(s.ops, incOps), warmup: Math.min(s.warmup, incWarmup) };

  let chromium = null;
  let incognito = null;
  const nodes = [['node', () => nodeRound('node', pkg, s)]];
  if (baseline) nodes.push(['node-baseline', () => nodeRound('node-baseline', baseline, s)]);
  const browsers = [
    ['chromium-page', () => chromium.page('chromium-page', ['memory', 'sqlite'], s)],
    ['chromium-worker', () => chromium.worker('chromium-worker', ['sqlite', 'opfs'], s)],
    ['chromium-incognito-worker', () => incognito.worker('chromium-incognito-worker', ['opfs'], small)],
  ];
  // The two packages take turns at going first, so neither always runs
  // right after the native child process or on a disk the other just wrote.
  const runtimes = (r) => [['native', () => nativeRound(s)], ...(r % 2 ? nodes : [...nodes].reverse()), ...browsers];
  const cold = [];
  const timed = [];
  const probe = {};
  try {
    console.error(`starting Chromium (${executablePath}), twice: a regular profile and an incognito context`);
    chromium = await openChromium(pkg);
    incognito = await openChromium(pkg, { incognito: true });
    for (let r = 0; r <= o.rounds; r++) {
      const label = r === 0 ? 'cold round (not counted)' : `round ${r}/${o.rounds}`;
      for (const [name, fn] of runtimes(r)) {
        const t0 = Date.now();
        const rows = await fn();
        (r === 0 ? cold : timed).push(...rows.map((x) => ({ round: r, ...x })));
        console.error(`${label}: ${name} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    }
    console.error('probing OPFS access-handle calls');
    probe.regular = await chromium.probe(PROBE_CALLS);
    probe.incognito = await incognito.probe(PROBE_CALLS / 4);
    probe.native = await fileProbe(PROBE_CALLS);
  } finally {
    await chromium?.close();
    await incognito?.close();
  }
  const loadEnd = load();

  const results = {
    date: new Date(started).toISOString(),
    quick: o.quick,
    sizes: { ops: o.ops, warmup: o.warmup, rounds: o.rounds, incognito: small, file: s.file },
    machine: {
      cpu: /model name\s*:\s*(.*)/.exec(readText('/proc/cpuinfo'))?.[1]?.trim() ?? os.cpus()[0]?.model ?? '?',
      cpus: os.cpus().length,
      memory: `${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
      kernel: os.release(),
      loadStart,
      loadEnd,
    },
    versions: {
      node: process.version,
      v8: process.versions.v8,
      chromium: chromium.version,
      userAgent: chromium.userAgent,
      playwright: JSON.parse(readText(path.join(jsRoot, 'node_modules', 'playwright-core', 'package.json')) || '{}').version,
      package: pkg.label,
      commit: commit(),
      sqliteNative: nativeRound.sqliteVersion,
      sqliteWasm: wasmSqliteVersion(),
      lock: lockVersions(['sqlite-wasm-rs', 'sqlite-wasm-vfs', 'wasm-bindgen', 'libsqlite3-sys', 'rusqlite']),
      rustc: firstLine('rustc', ['--version']),
    },
    size,
    // The package measured, when --pkg named it (the report's command repeats it).
    pkg: o.pkg,
    // Why a package's file rows are missing (null: measured), by runtime.
    fileStore: { node: pkg.fileUnavailable, ...(baseline && { 'node-baseline': baseline.fileUnavailable }) },
    baseline: baseline && {
      root: baseline.root,
      package: `inbox-wasm ${baseline.version}, ${baseline.root}`,
      builtFrom: baseline.builtFrom,
      size: moduleSizes(baseline.root),
    },
    probe,
    cold,
    timed,
    seconds: (Date.now() - started) / 1000,
  };
  const rawDir = path.join(repo, 'target', 'wasm-bench');
  await mkdir(rawDir, { recursive: true });
  const rawFile = path.join(rawDir, o.quick ? 'results-quick.json' : 'results.json');
  await writeFile(rawFile, JSON.stringify(results, null, 2) + '\n');

  const report = render(results, o);
  await mkdir(path.dirname(o.out), { recursive: true });
  await writeFile(o.out, report.markdown);
  console.log(`\nwrote ${path.relative(process.cwd(), o.out) || o.out} (raw figures: ${path.relative(process.cwd(), rawFile)}) in ${results.seconds.toFixed(0)} s`);
  for (const line of report.headlines) console.log(line);
}

function commit() {
  const sha = firstLine('git', ['-C', repo, 'rev-parse', '--short', 'HEAD']);
  if (!sha) return 'unknown';
  const dirty = spawnSync('git', ['-C', repo, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).stdout?.trim();
  return dirty ? `${sha} + uncommitted changes` : sha;
}

function lockVersions(names) {
  const lock = readText(path.join(repo, 'Cargo.lock'));
  return names
    .map((n) => {
      const m = new RegExp(`name = "${n}"\\nversion = "([^"]+)"`).exec(lock);
      return m ? `${n} ${m[1]}` : null;
    })
    .filter(Boolean)
    .join(', ');
}

// ---------------------------------------------------------------- the report

/** The rows of the main table, in order: [runtime, store, api, label, where]. */
const ROWS = [
  ['native', 'sqlite-file', 'typed', 'native', 'SQLite file, WAL, normal durability (no fsync per commit); typed requests — **the reference**'],
  ['native', 'sqlite-file', 'json', 'native', 'SQLite file, as above; JSON in and out'],
  ['native', 'sqlite-file-full', 'typed', 'native', 'SQLite file, WAL, full durability (fsync per commit); typed requests'],
  ['native', 'sqlite-file-full', 'json', 'native', 'SQLite file, full durability; JSON in and out'],
  ['native', 'sqlite-memory', 'typed', 'native', 'SQLite `:memory:` (as the wasm `sqlite` store); typed requests'],
  ['native', 'sqlite-memory', 'json', 'native', 'SQLite `:memory:`; JSON in and out'],
  ['native', 'memory', 'typed', 'native', '`MemoryStore`; typed requests'],
  ['native', 'memory', 'json', 'native', '`MemoryStore`; JSON in and out'],
  ['node', 'memory', 'js', 'Node', '`store: "memory"`'],
  ['node', 'sqlite', 'js', 'Node', '`store: "sqlite"` (SQLite in wasm memory)'],
  ['node', 'file', 'js', 'Node', '`store: "file"` (a new database file in the temporary folder, as the reference\'s)'],
  ['node-baseline', 'memory', 'js', 'Node, baseline package', '`store: "memory"`'],
  ['node-baseline', 'sqlite', 'js', 'Node, baseline package', '`store: "sqlite"`'],
  ['node-baseline', 'file', 'js', 'Node, baseline package', '`store: "file"`'],
  ['chromium-page', 'memory', 'js', 'Chromium, page', '`store: "memory"`'],
  ['chromium-page', 'sqlite', 'js', 'Chromium, page', '`store: "sqlite"`'],
  ['chromium-worker', 'sqlite', 'js', 'Chromium, worker', '`store: "sqlite"` (control for opfs: same worker, no files)'],
  ['chromium-worker', 'opfs', 'js', 'Chromium, worker', '`store: "opfs"` (SQLite on OPFS through the sahpool VFS)'],
  ['chromium-incognito-worker', 'opfs', 'js', 'Chromium incognito, worker', '`store: "opfs"` in an incognito context (OPFS in the browser process\'s memory); smaller sizes, see below'],
];

/** The native row each wasm store does the same work as (JSON path included). */
const COUNTERPART = {
  memory: ['memory', 'json', 'native `MemoryStore`, JSON'],
  sqlite: ['sqlite-memory', 'json', 'native SQLite `:memory:`, JSON'],
  opfs: ['sqlite-file', 'json', 'native SQLite file (WAL, normal durability), JSON'],
  file: ['sqlite-file', 'json', 'native SQLite file (WAL, normal durability), JSON'],
};

/** The stores both Node packages run, compared in the A/B table. */
const NODE_STORES = ['memory', 'sqlite', 'file'];

function render(res, o) {
  const pick = (rows, runtime, store, api, workload) =>
    rows.filter((x) => x.runtime === runtime && x.store === store && x.api === api && x.workload === workload).map((x) => x.ops_per_sec);
  const stat = (runtime, store, api, workload) => {
    const xs = pick(res.timed, runtime, store, api, workload);
    return xs.length ? summary(xs) : null;
  };
  const coldOf = (runtime, store, api, workload) => pick(res.cold, runtime, store, api, workload)[0];
  const reference = Object.fromEntries(WORKLOADS.map((w) => [w, stat('native', 'sqlite-file', 'typed', w).median]));

  const cell = (st) => (st ? `${fmtRate(st.median)}/s` : 'n/a');
  const spread = (st) =>
    st ? `${fmtRate(st.min)}–${fmtRate(st.max)} (${Math.round(((st.max - st.min) / st.median) * 100)} %)` : 'n/a';
  const ratio = (st, w) => (st ? fmtRatio(st.median / reference[w]) : 'n/a');

  const lines = [];
  const p = (...xs) => lines.push(...xs);
  const { sizes: sz, machine: m, versions: v } = res;
  const base = res.baseline ?? null;
  // The file rows' own sizes, when --file-ops or --file-warmup set them apart.
  const fsz = sz.file && (sz.file.ops !== sz.ops || sz.file.warmup !== sz.warmup) ? sz.file : null;
  const cmd = `node host-wasm/js/bench/run.mjs${o.quick ? ' --quick' : ''}${res.pkg ? ` --pkg ${res.pkg}` : ''}` +
    `${base ? ` --baseline-pkg ${base.root}` : ''}${fsz ? ` --file-ops ${fsz.ops} --file-warmup ${fsz.warmup}` : ''}`;
  const noFile = res.fileStore ?? {};
  const notMeasured = (runtime) =>
    WORKLOADS.some((w) => stat(runtime, 'file', 'js', w))
      ? ''
      : `**\`file\` not measured in this run**${noFile[runtime] ? `: this Node (${v.node}) cannot open it` : ''}.`;

  p('# wasm benchmarks', '');
  p(`<!-- Generated by \`${cmd}\`; do not edit by hand. -->`, '');
  p(
    'Commands per second of the `inbox-wasm` package in Node and in headless Chromium, for `send` and for `claim` + `done`, over each store, ' +
      'side by side with the native engine over native SQLite **measured in the same run**; and the size of the `.wasm`. ' +
      'This machine is shared and noisy, so every figure is the median of several rounds, with the rounds\' range; ' +
      'the ratios against the native SQLite figure of the same run travel better than the absolute rates.',
    '',
  );
  if (o.quick) p('> **Smoke run (`--quick`)**: small sizes and few rounds; the figures are rough. The full run writes `docs/wasm-benchmarks.md`.', '');
  if (res.size.stale) p(`> **The package measured may be stale**: ${res.size.stale}. Rebuild it (\`scripts/build-wasm\`) and reinstall it to measure the current code.`, '');
  for (const [runtime, which] of [['node', 'the package measured'], ['node-baseline', 'the baseline package']]) {
    if (noFile[runtime]) p(`> **No \`file\` rows for ${which}**: it cannot open a file store in this Node (${v.node}): ${noFile[runtime]}`, '');
  }

  p('Reproduce, from the repository root (after `scripts/build-wasm` and installing the package into `host-wasm/js` as `scripts/test-wasm` does):', '');
  p('```sh', cmd, '```', '');
  p(
    `It builds the native harness (\`cargo ${BUILD.join(' ')}\`; \`--no-build\` skips that), then runs one cold round and ${sz.rounds} timed rounds; ` +
      'each round runs the native baseline (`target/release/inbox-bench wasm-baseline --rounds 1`, a child process), Node (the runner\'s own process), ' +
      'a page in Chromium, a new dedicated worker in the same Chromium and a worker in a second, incognito Chromium, in turn. ' +
      (base
        ? 'With `--baseline-pkg DIR`, Node runs a second build of the package in the same process and the same rounds, right before or after the first ' +
          '(they take turns at going first): an A/B in one run. '
        : '') +
      '`--quick` is a smoke run for CI; `--from target/wasm-bench/results.json` writes the report again without measuring. ' +
      `Raw per-round figures: \`target/wasm-bench/${o.quick ? 'results-quick.json' : 'results.json'}\`.`,
    '',
  );

  // --- headline
  const nodeSqlite = WORKLOADS.map((w) => stat('node', 'sqlite', 'js', w));
  const nodeMemory = WORKLOADS.map((w) => stat('node', 'memory', 'js', w));
  const pageSqlite = WORKLOADS.map((w) => stat('chromium-page', 'sqlite', 'js', w));
  const opfs = WORKLOADS.map((w) => stat('chromium-worker', 'opfs', 'js', w));
  const headline = (name, sts) =>
    `${name}: send ${cell(sts[0])} (${ratio(sts[0], 'send')}), claim+done ${cell(sts[1])} (${ratio(sts[1], 'claim+done')})`;
  const nodeHeadline = (runtime, name, store) => {
    const sts = WORKLOADS.map((w) => stat(runtime, store, 'js', w));
    if (sts.some(Boolean)) return headline(name, sts);
    return `${name}: not measured${noFile[runtime] ? ' (no node:sqlite in this Node)' : ''}`;
  };
  const headlines = [
    `native SQLite file (reference): send ${fmtRate(reference.send)}/s, claim+done ${fmtRate(reference['claim+done'])}/s`,
    nodeHeadline('node', 'Node, file', 'file'),
    headline('Node, sqlite', nodeSqlite),
    headline('Node, memory', nodeMemory),
    ...(base ? NODE_STORES.map((store) => nodeHeadline('node-baseline', `Node, baseline package, ${store}`, store)) : []),
    headline('Chromium page, sqlite', pageSqlite),
    headline('Chromium worker, opfs', opfs),
    headline('Chromium incognito worker, opfs', WORKLOADS.map((w) => stat('chromium-incognito-worker', 'opfs', 'js', w))),
    `inbox_bg.wasm: ${sizeLine(res.size)}`,
    ...(base ? [`inbox_bg.wasm, baseline package${base.builtFrom ? ` (${base.builtFrom})` : ''}: ${sizeLine(base.size)}`] : []),
  ];
  p('## Summary', '');
  p('Medians; in brackets, the ratio to the native engine over a native SQLite file (normal durability, typed requests) in the same run.', '');
  for (const h of headlines) p(`- ${h}`);
  p('');

  // --- main table
  p('## Commands per second', '');
  p(
    `Each figure: one \`Inbox\` (one engine, one connection), one caller, operations back to back, ${sz.ops} timed after ${sz.warmup} untimed in each round; ` +
      `median of ${sz.rounds} rounds, each on a new store. **send**: \`send({from_agent, to_agent, subject})\` opening a new thread. ` +
      `**claim+done**: ${sz.ops + sz.warmup} threads queued for one worker first (not timed), then pairs of \`claim({agent, next: true})\` and ` +
      '`done({agent, thread_id, lease_token, summary})`; the rate is pairs per second (two write transactions each). ' +
      '**range**: slowest and fastest round, and their gap as a share of the median. **÷ native SQLite**: the median over the reference row\'s median.' +
      (fsz ? ` **The Node \`file\` rows run smaller sizes**: ${fsz.ops} timed after ${fsz.warmup} untimed (\`--file-ops\`, \`--file-warmup\`).` : ''),
    '',
  );
  p('| runtime | store | send/s | send range | ÷ native SQLite | claim+done/s | claim+done range | ÷ native SQLite |');
  p('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const [runtime, store, api, label, where] of ROWS) {
    const [a, b] = WORKLOADS.map((w) => stat(runtime, store, api, w));
    if (!a && !b) continue;
    p(`| ${label} | ${where} | ${cell(a)} | ${spread(a)} | ${ratio(a, 'send')} | ${cell(b)} | ${spread(b)} | ${ratio(b, 'claim+done')} |`);
  }
  p('');

  // --- wasm against the same work natively
  p('### The wasm engine against the same work natively', '');
  p(
    'Each wasm store against the native row that does the same work: the same store code and the same JSON conversion per call, compiled natively ' +
      '(opfs runs the same settings as the native file, WAL with normal durability, over the browser\'s file system instead of the kernel\'s; ' +
      'file is a database file like the native one, its SQL run by Node\'s SQLite). Below 1: wasm is slower by that factor.',
    '',
  );
  p('| runtime | store | native counterpart | send: wasm ÷ native | claim+done: wasm ÷ native |');
  p('| --- | --- | --- | ---: | ---: |');
  for (const [runtime, store, api, label] of ROWS.filter((r) => r[0] !== 'native')) {
    if (WORKLOADS.every((w) => !stat(runtime, store, api, w))) continue;
    const [cStore, cApi, cLabel] = COUNTERPART[store];
    const rs = WORKLOADS.map((w) => {
      const a = stat(runtime, store, api, w);
      const b = stat('native', cStore, cApi, w);
      return a && b ? fmtRatio(a.median / b.median) : 'n/a';
    });
    p(`| ${label} | \`${store}\` | ${cLabel} | ${rs[0]} | ${rs[1]} |`);
  }
  p('');

  if (base) p(...abLines(stat, cell, base));
  p(...probeLines(res));

  // --- cold round
  p('### The cold round', '');
  p(
    'The first round of each runtime, not counted above: the wasm module was compiled moments before and V8 has not yet optimized its hot functions ' +
      '(V8 compiles wasm with a baseline compiler first and optimizes the functions that run often, in the background); native code pays only cold caches. ' +
      'Same sizes as the timed rounds.',
    '',
  );
  p('| runtime | store | send/s, cold | send/s, median | claim+done/s, cold | claim+done/s, median |');
  p('| --- | --- | ---: | ---: | ---: | ---: |');
  for (const [runtime, store, api, label, where] of ROWS.filter((r) => r[2] !== 'json')) {
    const c = WORKLOADS.map((w) => coldOf(runtime, store, api, w));
    const t = WORKLOADS.map((w) => stat(runtime, store, api, w));
    if (c[0] === undefined) continue;
    const storeName = runtime === 'native' ? store : `\`${store}\``;
    p(`| ${label} | ${storeName} | ${fmtRate(c[0])}/s | ${cell(t[0])} | ${fmtRate(c[1])}/s | ${cell(t[1])} |`);
  }
  p('');

  // --- sizes
  p('## Size of the module', '');
  p(
    `\`web/inbox_bg.wasm\` of the package measured (${v.package}; built ${res.size.builtAt}; sha256 \`${res.size.sha256.slice(0, 16)}…\`` +
      `${res.size.matchesBuilt === false ? '; **differs from host-wasm/pkg: reinstall the package**' : ''}). The node and bundler builds ship the same module.`,
    '',
  );
  p('| file | raw | gzip -9 | brotli (quality 11) |');
  p('| --- | ---: | ---: | ---: |');
  p(`| \`inbox_bg.wasm\` | ${fmtBytes(res.size.wasm.raw)} | ${fmtBytes(res.size.wasm.gzip.size)} | ${fmtBytes(res.size.wasm.brotli)} |`);
  p(`| \`inbox.js\` (web glue) | ${fmtBytes(res.size.glue.raw)} | ${fmtBytes(res.size.glue.gzip.size)} | ${fmtBytes(res.size.glue.brotli)} |`);
  const mo = res.size.memoryOnly;
  if (mo) p(`| \`inbox_bg.wasm\` of the memory-only build (\`host-wasm/pkg-memory\`, not benchmarked) | ${fmtBytes(mo.raw)} | ${fmtBytes(mo.gzip.size)} | ${fmtBytes(mo.brotli)} |`);
  if (base) p(...baselineSizeRows(res.size, base));
  p('', `gzip sizes by ${res.size.wasm.gzip.how}, as \`scripts/build-wasm\` prints them; brotli by Node's zlib.`, '');

  // --- what the figures are
  p('## What each figure is', '');
  p(
    '- **All figures are in process, one connection, one caller**: no process starts, no concurrency, no waiting on another writer. ' +
      'They are not the multi-process figures of [BENCHMARKS.md](BENCHMARKS.md), and the requests are lighter than that report\'s ' +
      '(no `body`, no `task_id`), so even the native rows differ from its "in process" rates.',
    '- **native, SQLite file** (the reference): `inbox_engine::Engine` over the native host\'s `SqliteStore` on a file in the temporary folder, created as `inbox init` ' +
      'creates it (WAL, `synchronous = NORMAL`: a crash of the process loses nothing reported done, a power loss may lose the last commits) and opened with the ' +
      'long-lived checkpoint policy every in-process figure of the harness uses. **full durability**: the same with an fsync per commit. ' +
      'Source: `bench/src/wasm_baseline.rs`.',
    '- **native, SQLite `:memory:`**: the same store code on an in-memory SQLite database with the settings the wasm `sqlite` store applies: ' +
      'what SQLite itself costs without a file, natively.',
    '- **typed / JSON in and out**: typed rows call `Engine::execute` with a Rust request, as the rest of the harness does. JSON rows add what every call of the ' +
      'wasm package does on top of the engine: the request as JSON text, decoded, and the response encoded as JSON and parsed back.',
    '- **wasm `memory`**: the engine\'s `MemoryStore` in wasm memory; nothing is written anywhere, nothing survives the `Inbox`.',
    '- **wasm `sqlite`**: SQLite compiled to wasm on an in-memory database (journal in memory, no file, no fsync); it survives only through `exportBytes()`.',
    [
      `- **wasm \`file\`** (Node): \`Inbox.open({store: "file", path})\` on a new database file in a new folder under the temporary folder ` +
        '(the disk of the native reference\'s file), removed after each measurement: the same store code as the native host\'s, running its SQL through ' +
        'Node\'s built-in SQLite (`node:sqlite`, Node 22.16 and later), on a file any SQLite client, the `inbox` CLI included, can share. Its native ' +
        'counterpart is the reference (a WAL file with normal durability), with JSON.',
      fsz ? `These rows run ${fsz.ops} timed operations after ${fsz.warmup} untimed per round.` : '',
      notMeasured('node'),
    ].filter(Boolean).join(' '),
    '- **wasm `opfs`**: SQLite compiled to wasm on the Origin Private File System through the `opfs-sahpool` VFS, in a dedicated worker. ' +
      'That VFS has no shared memory, but the pool holds the file exclusively, so the store sets `locking_mode = EXCLUSIVE` (SQLite then keeps the WAL ' +
      'index in its own memory) and runs in WAL with `synchronous = NORMAL`, as the native reference does: a commit appends frames to the WAL through ' +
      'synchronous access handles and is not flushed on its own; checkpoints flush (`FileSystemSyncAccessHandle.flush()`, which Chromium passes on to the ' +
      'disk as a file sync). So the native reference row is its fair comparison. Each round starts from an empty pool: a new worker deletes the pool folder first. The browser runs with a regular profile ' +
      '(a persistent context in a temporary folder), as a user\'s browser does.',
    `- **wasm \`opfs\`, incognito**: the same in an incognito browser context (Playwright's default \`browser.newContext()\`), where OPFS files live in the ` +
      'browser process\'s memory and every access-handle call (read, write, size, flush) is a synchronous round trip from the worker to the browser process. ' +
      `That makes each commit take tens of milliseconds, so these rows run ${res.sizes.incognito.ops} timed operations after ${res.sizes.incognito.warmup} untimed per round.`,
    '- **Chromium, worker** rows run in a new dedicated worker each round, which instantiates the module afresh (the server sends it with ' +
      '`Cache-Control: no-store`, so no compiled code is cached between workers): each worker round starts on V8\'s baseline wasm code, as a page ' +
      'load does. Page rows reuse the page\'s instance from round to round.',
    ...(base
      ? [
          [
            `- **Node, baseline package**: the same Node rows on another build of the package (\`--baseline-pkg\`: ${base.package}` +
              `${base.builtFrom ? `, built from \`${base.builtFrom}\`` : ''}), loaded into the same Node process beside the package measured and run in the ` +
              'same rounds, the two taking turns at going first. Its stores are whatever that build implements (an older `file` store need not run on ' +
              '`node:sqlite`).',
            notMeasured('node-baseline'),
          ].filter(Boolean).join(' '),
        ]
      : []),
    '- Every call from JS crosses into wasm: `JSON.stringify` of the request, decode, execute, encode, `JSON.parse` of the response into a JS object. ' +
      'Timing is `performance.now()` around the whole loop (Chromium coarsens it to 100 µs; a loop lasts far longer).',
    '',
  );

  // --- why
  p('## Why the figures differ', '');
  p(...whyLines(res, stat, reference), '');

  // --- machine
  p('## Machine and versions', '');
  p('| | |', '| --- | --- |');
  p(`| date | ${res.date} |`);
  p(`| CPU | ${m.cpu} (${m.cpus} logical CPUs) |`);
  p(`| memory | ${m.memory} |`);
  p(`| kernel | ${m.kernel} |`);
  p(`| machine load (start / end of run) | ${m.loadStart} / ${m.loadEnd} |`);
  p(`| inbox commit | \`${v.commit}\` |`);
  p(`| package | ${v.package} |`);
  if (base) p(`| baseline package | ${base.package}${base.builtFrom ? `, built from \`${base.builtFrom}\`` : ''} |`);
  p(`| Node | ${v.node} (V8 ${v.v8}) |`);
  p(`| Chromium | ${v.chromium}, headless, driven by playwright-core ${v.playwright} with \`${CHROMIUM_ARGS.join(' ')}\` |`);
  p(`| SQLite | native (bundled by rusqlite) ${v.sqliteNative}; wasm (bundled by sqlite-wasm-rs, \`SQLITE_THREADSAFE=0\`) ${v.sqliteWasm ?? '?'} |`);
  p(`| crates (Cargo.lock) | ${v.lock} |`);
  p(`| rustc | ${v.rustc ?? '?'} |`);
  p(`| sizes | ${sz.ops} timed + ${sz.warmup} untimed operations per round and workload${fsz ? ` (Node \`file\` rows: ${fsz.ops} + ${fsz.warmup})` : ''}; 1 cold + ${sz.rounds} timed rounds |`);
  p(`| run time | ${res.seconds.toFixed(0)} s |`);
  p('');
  return { markdown: lines.join('\n'), headlines };
}

/** Explanations computed from this run's figures, so they stay true when the numbers move. */
function whyLines(res, stat, reference) {
  const med = (...k) => stat(...k)?.median;
  const r = (a, b) => (a && b ? fmtRatio(a / b) : 'n/a');
  const out = [];
  for (const w of WORKLOADS) {
    const fileTyped = reference[w];
    const memSqlTyped = med('native', 'sqlite-memory', 'typed', w);
    const memSqlJson = med('native', 'sqlite-memory', 'json', w);
    const memTyped = med('native', 'memory', 'typed', w);
    const memJson = med('native', 'memory', 'json', w);
    const fileJson = med('native', 'sqlite-file', 'json', w);
    const full = med('native', 'sqlite-file-full', 'typed', w);
    const nodeSql = med('node', 'sqlite', 'js', w);
    const pageSql = med('chromium-page', 'sqlite', 'js', w);
    const nodeMem = med('node', 'memory', 'js', w);
    const pageMem = med('chromium-page', 'memory', 'js', w);
    const workerSql = med('chromium-worker', 'sqlite', 'js', w);
    const opfs = med('chromium-worker', 'opfs', 'js', w);
    const incognito = med('chromium-incognito-worker', 'opfs', 'js', w);
    out.push(
      `- **${w}**, natively: without the file (SQLite \`:memory:\` against the WAL file) the rate is ${r(memSqlTyped, fileTyped)} the reference's, ` +
        `so the file's writes and system calls are ${
          memSqlTyped >= 2 * fileTyped ? 'most of the native cost' : memSqlTyped > 1.1 * fileTyped ? 'part of the native cost' : 'not what limits it'
        }; ` +
        `an fsync per commit makes it ${r(full, fileTyped)}. The JSON path (what every wasm call adds) changes the rate ${r(fileJson, fileTyped)} on the file, ` +
        `${r(memSqlJson, memSqlTyped)} on SQLite in memory and ${r(memJson, memTyped)} on \`MemoryStore\`: the cheaper the store, the more the JSON weighs.`,
      `- **${w}**, wasm against the same work natively (JSON included): SQLite in memory runs at ${r(nodeSql, memSqlJson)} of native in Node and ` +
        `${r(pageSql, memSqlJson)} in Chromium; \`MemoryStore\` at ${r(nodeMem, memJson)} and ${r(pageMem, memJson)}. ` +
        `OPFS runs at ${r(opfs, workerSql)} of the wasm \`sqlite\` store in the same worker, and the incognito OPFS at ${r(incognito, opfs)} of the regular one.`,
    );
  }
  const sqlBeats = WORKLOADS.filter((w) => med('node', 'sqlite', 'js', w) > reference[w] || med('chromium-page', 'sqlite', 'js', w) > reference[w]);
  if (sqlBeats.length) {
    out.push(
      `- The wasm \`sqlite\` store beats the native reference on ${sqlBeats.join(' and ')} although wasm code runs slower than native code: ` +
        'the reference writes a file (WAL frames, system calls, checkpoints) and the wasm `sqlite` store writes nothing outside wasm memory. ' +
        'Compare like with like: native SQLite `:memory:` with JSON is the wasm `sqlite` store\'s twin.',
    );
  }
  const wasmBeatsTwin = WORKLOADS.filter((w) =>
    ['node', 'chromium-page'].some((rt) => med(rt, 'sqlite', 'js', w) > med('native', 'sqlite-memory', 'json', w)),
  );
  if (wasmBeatsTwin.length) {
    out.push(
      `- Where wasm SQLite matches or beats its native twin (${wasmBeatsTwin.join(', ')}), the build differs, not only the instruction set: the wasm SQLite ` +
        'is compiled single-threaded (`SQLITE_THREADSAFE=0`: no mutex around each call) with a 16 MiB page cache and allocates from wasm memory, where the ' +
        'native one takes its mutexes and calls glibc\'s malloc for each statement\'s buffers; on statement-heavy work such as `claim` that can outweigh slower code.',
    );
  }
  const fileVsSql = WORKLOADS.map((w) => r(med('node', 'file', 'js', w), med('node', 'sqlite', 'js', w)));
  if (med('node', 'file', 'js', 'send')) {
    out.push(
      `- The \`file\` store in Node runs at ${fileVsSql[0]} of the \`sqlite\` store's rate for send and ${fileVsSql[1]} for claim+done, in the same ` +
        'process on the same store code: the difference is the file (its writes and system calls, and the locks other processes could hold) and, ' +
        'in a package whose file store runs on `node:sqlite`, each statement\'s trip from wasm through JavaScript to Node\'s SQLite.',
    );
  }
  const claimMem = med('node', 'memory', 'js', 'claim+done');
  const claimSql = med('node', 'sqlite', 'js', 'claim+done');
  out.push(
    `- \`MemoryStore\` answers \`claim --next\` by filtering and sorting every thread it holds (\`engine/src/memory.rs\`; done threads stay in the store), ` +
      `where SQLite walks an index: its claim rate falls as the store grows. With ${res.sizes.ops + res.sizes.warmup} threads in the store here, ` +
      `\`memory\` claim+done runs at ${r(claimMem, claimSql)} of the \`sqlite\` store's in Node, against ${r(med('node', 'memory', 'js', 'send'), med('node', 'sqlite', 'js', 'send'))} for send ` +
      '(compare a `--quick` run, with a twentieth of the threads).',
  );
  out.push(
    '- Chromium and Node run the same module with different V8 versions (see below); a newer V8 optimizes wasm differently, so Node and Chromium need not agree.',
  );
  const p = res.probe?.regular;
  if (p) {
    out.push(
      `- OPFS: a commit of the opfs store appends its pages to the WAL with access-handle writes (checkpoints, every 1000 WAL pages, flush). ` +
        `In this Chromium one 2 KiB write costs ${fmtUs(p.write)} (a read ${fmtUs(p.read)}) and a write followed by a flush ${fmtUs(p.write_flush)}; ` +
        `the same from Node on the same disk: ${fmtUs(res.probe.native?.write)} and ${fmtUs(res.probe.native?.write_flush)} (table above). ` +
        `A send commit takes ${fmtUs(1e6 / med('chromium-worker', 'opfs', 'js', 'send'))} at the median. ` +
        'Before the store used WAL (rollback journal, `synchronous = FULL`: every commit wrote a journal and flushed twice) it managed 409 sends/s and ' +
        '188 claim+done/s in the same harness.',
    );
  }
  return out;
}

/** A module's three sizes on one line. */
function sizeLine(size) {
  const n = (x) => x.toLocaleString('en-US');
  return `${n(size.wasm.raw)} B raw, ${n(size.wasm.gzip.size)} B gzip -9, ${n(size.wasm.brotli)} B brotli`;
}

/** `a` against `b` in bytes and per cent: +1,234 B (+0.4 %). */
function fmtChange(a, b) {
  const sign = a >= b ? '+' : '−';
  return `${sign}${Math.abs(a - b).toLocaleString('en-US')} B (${sign}${((Math.abs(a - b) / b) * 100).toFixed(1)} %)`;
}

/** Rows of the size table for the baseline package's module, and the change to the package measured. */
function baselineSizeRows(size, base) {
  const from = base.builtFrom ? `, built from \`${base.builtFrom}\`` : '';
  const b = base.size.wasm;
  const a = size.wasm;
  return [
    `| \`inbox_bg.wasm\` of the baseline package (${base.root}${from}; sha256 \`${base.size.sha256.slice(0, 16)}…\`) | ${fmtBytes(b.raw)} | ${fmtBytes(b.gzip.size)} | ${fmtBytes(b.brotli)} |`,
    `| \`inbox_bg.wasm\`: the package measured against the baseline | ${fmtChange(a.raw, b.raw)} | ${fmtChange(a.gzip.size, b.gzip.size)} | ${fmtChange(a.brotli, b.brotli)} |`,
  ];
}

/** The A/B table: each Node store of the package measured against the same store of the baseline package, same rounds. */
function abLines(stat, cell, base) {
  const out = [
    '### The package against the baseline package',
    '',
    `Node, same process, same rounds; the baseline package is ${base.package}${base.builtFrom ? `, built from \`${base.builtFrom}\`` : ''}. ` +
      'Above 1: the package measured is faster.',
    '',
    '| store | send/s | send/s, baseline | send: ÷ baseline | claim+done/s | claim+done/s, baseline | claim+done: ÷ baseline |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const store of NODE_STORES) {
    const cells = WORKLOADS.map((w) => {
      const a = stat('node', store, 'js', w);
      const b = stat('node-baseline', store, 'js', w);
      return `${cell(a)} | ${cell(b)} | ${a && b ? fmtRatio(a.median / b.median) : 'n/a'}`;
    });
    out.push(`| \`${store}\` | ${cells.join(' | ')} |`);
  }
  out.push('');
  return out;
}

/** The OPFS probe table. */
function probeLines(res) {
  const { regular, incognito, native } = res.probe ?? {};
  if (!regular) return [];
  const row = (label, key, call) =>
    `| ${label} | ${fmtUs(regular[key])} | ${incognito ? fmtUs(incognito[key]) : 'n/a'} | ${native ? fmtUs(native[key]) : 'n/a'} (${call}) |`;
  return [
    '### OPFS access-handle calls',
    '',
    'What single `FileSystemSyncAccessHandle` calls cost in a dedicated worker of this Chromium (mean per call, on a 128 KiB file of the probe\'s own, ' +
      `${PROBE_CALLS} calls each in the regular profile and ${PROBE_CALLS / 4} incognito; a write and flush is a quarter as many): ` +
      'the primitives every commit of the `opfs` store is made of. Last column: the same calls from Node on a plain file in the same temporary folder ' +
      'as the browser profile, the floor a native SQLite file pays.',
    '',
    '| call | Chromium, regular profile | Chromium, incognito | Node `fs`, same disk |',
    '| --- | ---: | ---: | ---: |',
    row('`write` of 2 KiB in place', 'write', '`pwrite`'),
    row('`read` of 2 KiB', 'read', '`pread`'),
    row('`getSize`', 'getSize', '`fstat`'),
    row('`flush` with nothing written', 'flush_clean', '`fdatasync`'),
    row('`write` of 2 KiB then `flush`', 'write_flush', '`pwrite` + `fdatasync`'),
    '',
  ];
}

main().catch((e) => {
  console.error(`error: ${e.stack || e}`);
  process.exit(1);
});
