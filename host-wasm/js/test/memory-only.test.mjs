// The memory-only build (scripts/build-wasm --memory-only, package
// inbox-wasm-memory): the same API on the engine's memory store, a third of
// the size, and a clear refusal of the stores it leaves out.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, "../../pkg-memory");
const corpus = join(here, "../../../tests/corpus");

test("the memory-only build runs the worker loop and the corpus, and refuses SQLite stores", async () => {
  assert.ok(existsSync(join(pkg, "node/inbox.js")), `${pkg} is missing: run scripts/build-wasm --memory-only`);
  const { Inbox, runScript, runScriptOn } = createRequire(import.meta.url)(join(pkg, "node/inbox.js"));

  const inbox = await Inbox.open();
  assert.equal(inbox.store, "memory");
  const { thread } = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Task" });
  const { lease } = inbox.claim({ agent: "worker", next: true });
  const done = inbox.done({ agent: "worker", thread_id: thread.thread_id, lease_token: lease.lease_token, summary: "ok" });
  assert.equal(done.thread.status, "done");

  for (const store of ["sqlite", "opfs"]) {
    await assert.rejects(Inbox.open({ store }), (error) => {
      assert.equal(error.code, "invalid_request");
      assert.match(error.message, /memory-only build/);
      return true;
    });
  }

  for (const options of [{ store: "sqlite" }, { store: "opfs", path: "x.db" }, { store: "file", path: "x.db" }]) {
    await assert.rejects(runScriptOn("list", options), (error) => {
      assert.equal(error.code, "invalid_request");
      assert.match(error.message, new RegExp(`store "${options.store}" needs SQLite, which this memory-only build leaves out`));
      return true;
    });
  }
  assert.throws(() => runScript("list", "sqlite"), /store "sqlite" needs SQLite, which this memory-only build leaves out/);

  for (const file of readdirSync(corpus).filter((f) => f.endsWith(".inbox"))) {
    const golden = readFileSync(join(corpus, "snapshots", file.replace(/\.inbox$/, ".snap")), "utf8");
    const expected = golden.slice(golden.indexOf("\n---\n") + 5).trimEnd();
    const text = readFileSync(join(corpus, file), "utf8");
    assert.equal(runScript(text, "memory").text.trimEnd(), expected, file);
    assert.equal((await runScriptOn(text, { store: "memory" })).text.trimEnd(), expected, `runScriptOn: ${file}`);
  }
});
