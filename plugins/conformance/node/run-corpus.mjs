// The Node half of `inbox-conformance`: runs transition scripts through the
// wasm package's `runScript` and prints the transcripts as one JSON line.
// It compares nothing: the Rust runner holds the golden transcripts and the
// diff, so every host is judged by the same code.
//
//   node run-corpus.mjs <package dir> <store> <script file>...
//
// <package dir> is a built host-wasm package (host-wasm/pkg, from
// scripts/build-wasm); <store> is "memory" or "sqlite". Output:
// [{"file", "text", "failures"} | {"file", "error"}, ...]
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

const [pkg, store, ...files] = process.argv.slice(2);
if (!pkg || !store) {
  process.stderr.write("usage: node run-corpus.mjs <package dir> <store> <script file>...\n");
  process.exit(2);
}
// The package's CommonJS build loads the .wasm from beside itself.
const { runScript } = createRequire(import.meta.url)(resolve(pkg, "node", "inbox.js"));

const results = files.map((file) => {
  try {
    const transcript = runScript(readFileSync(file, "utf8"), store);
    return { file, text: transcript.text, failures: transcript.failures };
  } catch (error) {
    return { file, error: `${error.code ?? error.name}: ${error.message}` };
  }
});
process.stdout.write(JSON.stringify(results) + "\n");
