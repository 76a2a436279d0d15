// A dedicated module worker that runs the transition-script corpus on store
// "opfs" (test/browser.test.mjs reads the scripts on the Node side and posts
// them here; it compares the transcripts with the golden ones there). Each
// script runs with runScriptOn on a new OPFS database of its own, which
// runScriptOn removes when the run ends. Then a database this worker made
// with Inbox.open is refused as a script's path and left intact, and the
// pool's folder goes, so the test leaves OPFS as it found it. One answer
// per message: {results, refusals, opfsBefore, opfsAfter}, or {error}.
import init, { Inbox, runScriptOn } from '/pkg/inbox.js';
import { describeError } from './describe-error.js';

/** Names of the OPFS entries under `directory` (one level). */
async function entries(directory) {
  const names = [];
  for await (const [name, handle] of directory.entries()) names.push(handle.kind === 'directory' ? `${name}/` : name);
  return names.sort();
}

/** The transcript of a run, or what it threw. */
async function attempt(text, options) {
  try {
    const { text: transcript, failures } = await runScriptOn(text, options);
    return { text: transcript, failures };
  } catch (error) {
    return { error: describeError(error) };
  }
}

async function run(scripts) {
  await init(); // fetches inbox_bg.wasm next to inbox.js
  const root = await navigator.storage.getDirectory();
  const opfsBefore = await entries(root);

  const results = [];
  for (const { name, text } of scripts) {
    const path = `corpus-${name}.db`;
    results.push({ name, path, ...(await attempt(text, { store: 'opfs', path })) });
  }

  // The first script again on its path: its database was removed, so the
  // path is new again.
  const [first] = scripts;
  const rerun = { name: first.name, ...(await attempt(first.text, { store: 'opfs', path: `corpus-${first.name}.db` })) };

  // A database that holds work is refused as a script's path, open or not,
  // and keeps its work.
  const script = 'send from_agent=lead to_agent=worker subject=Task => ok';
  const real = await Inbox.open({ store: 'opfs', path: 'real.db' });
  const { thread } = real.send({ from_agent: 'lead', to_agent: 'worker', subject: 'Real work' });
  const whileOpen = await attempt(script, { store: 'opfs', path: 'real.db' });
  real.close();
  const whileClosed = await attempt(script, { store: 'opfs', path: 'real.db' });
  const reopened = await Inbox.open({ store: 'opfs', path: 'real.db' });
  const kept = reopened.list({}).threads.map((t) => t.thread_id);
  reopened.close();
  const refusals = { threadId: thread.thread_id, whileOpen, whileClosed, kept };

  // Every inbox of this worker is closed, so the pool let go of its files:
  // remove its folder (this test's context started with an empty OPFS).
  const made = await entries(root);
  for (const name of made) {
    if (!opfsBefore.includes(name)) await root.removeEntry(name.replace(/\/$/, ''), { recursive: true });
  }
  const opfsAfter = await entries(root);
  return { results, rerun, refusals, opfsBefore, made, opfsAfter };
}

onmessage = ({ data }) => {
  run(data.scripts)
    .then((result) => postMessage(result))
    .catch((error) => postMessage({ error: describeError(error) }));
};
