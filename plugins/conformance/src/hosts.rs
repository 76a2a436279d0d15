//! The hosts the corpus runs on, and how each runs a batch of scripts on
//! fresh stores: the engine in this process over memory, over a SQLite file
//! and over PostgreSQL (a schema of a throwaway cluster per script); the
//! engine component in wasmtime over memory and SQLite; the wasm package in
//! Node over its two stores. Each host returns what it printed, untouched. This module must never compare transcripts or decide whether
//! a host passed.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};
use clap::ValueEnum;
use inbox_conformance::CorpusScript;
use inbox_engine::{ManualClock, MemoryStore, Store, Transcript};
use inbox_plugin_host::{Limits, Plugin};

/// Every host inbox has, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Host {
    /// The engine in this process over `MemoryStore`; the golden
    /// transcripts were made here.
    #[value(name = "memory")]
    Memory,
    /// The engine in this process over a native SQLite file.
    #[value(name = "sqlite")]
    Sqlite,
    /// The engine in this process over `PgStore`, each script in its own
    /// schema of a throwaway PostgreSQL cluster started for the run.
    #[value(name = "postgres")]
    Postgres,
    /// The engine component in wasmtime, storage served by the host from
    /// `MemoryStore`.
    #[value(name = "component/memory")]
    ComponentMemory,
    /// The engine component in wasmtime over a native SQLite file.
    #[value(name = "component/sqlite")]
    ComponentSqlite,
    /// The wasm package (`inbox-wasm`) in Node, store `"memory"`.
    #[value(name = "node/memory")]
    NodeMemory,
    /// The wasm package in Node, store `"sqlite"` (SQLite compiled to wasm).
    #[value(name = "node/sqlite")]
    NodeSqlite,
}

impl Host {
    /// All of them.
    pub(crate) const ALL: [Host; 7] = [
        Host::Memory,
        Host::Sqlite,
        Host::Postgres,
        Host::ComponentMemory,
        Host::ComponentSqlite,
        Host::NodeMemory,
        Host::NodeSqlite,
    ];

    /// The name reports use, as on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Host::Memory => "memory",
            Host::Sqlite => "sqlite",
            Host::Postgres => "postgres",
            Host::ComponentMemory => "component/memory",
            Host::ComponentSqlite => "component/sqlite",
            Host::NodeMemory => "node/memory",
            Host::NodeSqlite => "node/sqlite",
        }
    }
}

/// What one script gave on one host: a transcript, or why there is none
/// (the script did not parse there, the component failed, Node threw).
pub(crate) type Outcome = Result<Transcript, String>;

/// What the hosts need that not every run has: where the component and the
/// wasm package are. Built lazily, so a run of only the native hosts needs
/// neither.
pub(crate) struct Setup {
    /// A component to load instead of building `plugins/engine-component`.
    pub(crate) engine: Option<PathBuf>,
    /// The built wasm package (`scripts/build-wasm` writes host-wasm/pkg).
    pub(crate) wasm_package: PathBuf,
    plugin: Option<Plugin>,
    scratch: tempfile::TempDir,
    /// The throwaway cluster of the `postgres` host, stopped and deleted
    /// when the setup is dropped.
    postgres: Option<inbox_pg_cluster::PgCluster>,
}

/// Why a host could not run here at all (as opposed to running and
/// differing): reported as skipped, or as a failure with `--require-all`.
#[derive(Debug)]
pub(crate) struct Unavailable(pub(crate) String);

impl Setup {
    /// A setup with a scratch directory for the SQLite files.
    pub(crate) fn new(engine: Option<PathBuf>, wasm_package: PathBuf) -> anyhow::Result<Setup> {
        Ok(Setup {
            engine,
            wasm_package,
            plugin: None,
            postgres: None,
            scratch: tempfile::tempdir().context("cannot create a scratch directory")?,
        })
    }

    /// Runs `scripts` on `host`, each on a fresh store, in order.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the host cannot run on this machine (no Node,
    /// no wasm package, the component does not build).
    pub(crate) fn run(
        &mut self,
        host: Host,
        scripts: &[CorpusScript],
    ) -> Result<Vec<Outcome>, Unavailable> {
        match host {
            Host::Memory => Ok(scripts.iter().map(|s| on_memory(&s.text)).collect()),
            Host::Sqlite => {
                let dir = self.scratch_dir("sqlite")?;
                Ok(scripts
                    .iter()
                    .map(|s| on_sqlite(&dir, &s.name, &s.text))
                    .collect())
            }
            Host::Postgres => {
                let cluster = self.postgres()?;
                let mut admin = cluster
                    .config("postgres")
                    .connect(postgres::NoTls)
                    .map_err(|e| Unavailable(format!("cannot connect to the cluster: {e}")))?;
                Ok(scripts
                    .iter()
                    .enumerate()
                    .map(|(n, s)| {
                        let store = fresh_postgres(cluster, &mut admin, n)?;
                        inbox_engine::run_script(&s.text, store).map_err(|e| e.to_string())
                    })
                    .collect())
            }
            Host::ComponentMemory => {
                let plugin = self.plugin()?;
                Ok(scripts
                    .iter()
                    .map(|s| in_component(&plugin, fresh_memory(), &s.text))
                    .collect())
            }
            Host::ComponentSqlite => {
                let plugin = self.plugin()?;
                let dir = self.scratch_dir("component-sqlite")?;
                Ok(scripts
                    .iter()
                    .map(|s| {
                        let store = fresh_sqlite(&dir, &s.name)?;
                        in_component(&plugin, store, &s.text)
                    })
                    .collect())
            }
            Host::NodeMemory => in_node(&self.wasm_package, "memory", scripts),
            Host::NodeSqlite => in_node(&self.wasm_package, "sqlite", scripts),
        }
    }

    fn scratch_dir(&self, name: &str) -> Result<PathBuf, Unavailable> {
        let dir = self.scratch.path().join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Unavailable(format!("cannot create {}: {e}", dir.display())))?;
        Ok(dir)
    }

    /// The throwaway PostgreSQL cluster, started once for every script.
    /// Starting it panics on any failure (it is test support): that, and
    /// PostgreSQL missing, make the host unavailable rather than ending
    /// the run.
    fn postgres(&mut self) -> Result<&inbox_pg_cluster::PgCluster, Unavailable> {
        if self.postgres.is_none() {
            let started = std::panic::catch_unwind(|| {
                inbox_pg_cluster::PgCluster::start_or_skip("inbox-conformance --host postgres")
            });
            self.postgres = match started {
                Ok(Some(cluster)) => Some(cluster),
                Ok(None) => {
                    return Err(Unavailable(
                        "PostgreSQL is not installed (no initdb on PATH or under \
                         /usr/lib/postgresql/*/bin); apt-get install postgresql"
                            .to_owned(),
                    ));
                }
                Err(panic) => return Err(Unavailable(panic_text(panic.as_ref()))),
            };
        }
        self.postgres
            .as_ref()
            .ok_or_else(|| Unavailable("no cluster".to_owned()))
    }

    /// The engine component, compiled once for every script of both
    /// component hosts.
    fn plugin(&mut self) -> Result<Plugin, Unavailable> {
        if let Some(plugin) = &self.plugin {
            return Ok(plugin.clone());
        }
        let path = match &self.engine {
            Some(path) => path.clone(),
            None => inbox_plugin_build::build(inbox_plugin_build::Guest::Engine)
                .map_err(|e| Unavailable(e.to_string()))?,
        };
        let plugin =
            Plugin::from_file(&path, Limits::default()).map_err(|e| Unavailable(e.to_string()))?;
        self.plugin = Some(plugin.clone());
        Ok(plugin)
    }
}

fn fresh_memory() -> MemoryStore {
    let mut store = MemoryStore::new();
    // A fresh MemoryStore is already usable; initialize anyway, as every
    // host does before a script.
    let _ = store.initialize();
    store
}

fn fresh_sqlite(dir: &Path, name: &str) -> Result<inbox_sqlite::SqliteStore, String> {
    let path = dir.join(format!("{name}.db"));
    let mut store = inbox_sqlite::open::open_or_create(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    store
        .initialize()
        .map_err(|e| format!("cannot initialize {}: {e}", path.display()))?;
    Ok(store)
}

/// A store in a new schema `corpus_<n>` of `cluster`, initialized, on the
/// script's clock rather than the server's. A schema per script costs a
/// fraction of a database per script, and the writer row lives in the
/// schema, so scripts never serialize each other.
fn fresh_postgres(
    cluster: &inbox_pg_cluster::PgCluster,
    admin: &mut postgres::Client,
    n: usize,
) -> Result<inbox_postgres::PgStore, String> {
    let schema = format!("corpus_{n}");
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .map_err(|e| format!("cannot create schema {schema}: {e}"))?;
    let mut config = cluster.config("postgres");
    config.options(&format!("-c search_path={schema}"));
    let mut store = inbox_postgres::PgStore::with_config(config)
        .map_err(|e| format!("cannot connect to schema {schema}: {e}"))?;
    store.use_server_clock(false);
    store
        .initialize()
        .map_err(|e| format!("cannot initialize schema {schema}: {e}"))?;
    Ok(store)
}

/// What a panic said, for a report.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "setting the cluster up panicked".to_owned())
}

fn on_memory(text: &str) -> Outcome {
    inbox_engine::run_script(text, fresh_memory()).map_err(|e| e.to_string())
}

fn on_sqlite(dir: &Path, name: &str, text: &str) -> Outcome {
    let store = fresh_sqlite(dir, name)?;
    inbox_engine::run_script(text, store).map_err(|e| e.to_string())
}

/// One script inside a new instance of the component over `store`. The
/// script's clock and ids are the engine's own script clock and sequential
/// ids, inside the sandbox; the clock and seed given here are not used by
/// `run-script`.
fn in_component<S: Store + 'static>(plugin: &Plugin, store: S, text: &str) -> Outcome {
    let mut engine = plugin
        .instantiate(store, ManualClock::new(ManualClock::SCRIPT_EPOCH), 1)
        .map_err(|e| e.to_string())?;
    engine.run_script(text).map_err(|e| e.to_string())
}

/// What `run-corpus.mjs` prints for one script.
#[derive(serde::Deserialize)]
struct NodeResult {
    text: Option<String>,
    failures: Option<Vec<String>>,
    error: Option<String>,
}

/// Every script in one Node process (starting Node and loading the package
/// costs more than the corpus), through `node/run-corpus.mjs`.
fn in_node(
    package: &Path,
    store: &str,
    scripts: &[CorpusScript],
) -> Result<Vec<Outcome>, Unavailable> {
    let entry = package.join("node").join("inbox.js");
    if !entry.is_file() {
        return Err(Unavailable(format!(
            "{} is missing; build the wasm package with scripts/build-wasm",
            entry.display()
        )));
    }
    let runner = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node")
        .join("run-corpus.mjs");
    let files: Vec<PathBuf> = scripts
        .iter()
        .map(|s| inbox_conformance::corpus_dir().join(format!("{}.inbox", s.name)))
        .collect();
    let output = Command::new("node")
        .arg(&runner)
        .arg(package)
        .arg(store)
        .args(&files)
        .output()
        .map_err(|e| {
            Unavailable(format!(
                "cannot start node: {e}; install Node.js 20 or later"
            ))
        })?;
    let parsed = parse_node_output(&output.stdout, scripts.len()).map_err(|e| {
        Unavailable(format!(
            "node {} failed ({}): {e}\n{}",
            runner.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        ))
    })?;
    Ok(parsed)
}

fn parse_node_output(stdout: &[u8], expected: usize) -> anyhow::Result<Vec<Outcome>> {
    let results: Vec<NodeResult> =
        serde_json::from_slice(stdout).context("its output is not the JSON array expected")?;
    if results.len() != expected {
        bail!("it answered {} scripts of {expected}", results.len());
    }
    results
        .into_iter()
        .map(|result| match result {
            NodeResult {
                error: Some(error), ..
            } => Ok(Err(error)),
            NodeResult {
                text: Some(text),
                failures,
                ..
            } => Ok(Ok(Transcript {
                text,
                failures: failures.unwrap_or_default(),
            })),
            _ => Err(anyhow!("a result has neither text nor error")),
        })
        .collect()
}
