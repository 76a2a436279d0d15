//! The live board (`inbox-serve`): a small HTTP server over one database
//! that a person watches in a browser. `inbox serve ARGS` starts it with
//! the same arguments (read with `inbox`'s own parser, then handed to
//! [`run`]); run by itself it takes the same flags ([`ServeArgs`]).
//!
//! It is a program of its own so that the HTTP stack (axum and hyper on
//! tokio) is never linked into `inbox` or `orch`. The modules: [`api`]
//! turns HTTP calls into engine requests and runs them as every command
//! runs (`inbox_host_native::run::execute`), [`live`] follows the event stream once for
//! every open page and pushes it as Server-Sent Events, [`guard`] holds
//! the safety rules (the token every call carries, the Host and Origin
//! checks, the security headers), [`net`] accepts connections within
//! bounds and [`stall`] lets go of those whose client stopped reading,
//! [`page`] serves the embedded page, [`open`] hands it to the browser,
//! and [`error`] the board's own refusals. It must never apply an inbox
//! rule of its own: every read and write is an engine request.
//!
//! The board's URL holds its token, so it goes to whoever started the
//! board and nowhere else: the first line on stdout, or, with `--url-file
//! PATH`, a file only its owner can read (stdout then shows the URL
//! without the token). stderr, which supervisors log, never shows the
//! token; `--open` gives the browser the name of a file only its owner
//! can read, which holds it (see [`open`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use inbox_engine::EngineError;
use inbox_host_native::{Global, hosted};

mod api;
mod args;
mod error;
mod guard;
mod live;
mod net;
mod open;
mod page;
mod stall;

pub use args::{Listen, ServeArgs};

/// What every request handler shares.
pub(crate) struct Board {
    /// The database and engine flags, as every command takes them.
    pub(crate) global: Arc<Global>,
    /// The agent the board's writes are made as (`--as`).
    pub(crate) human: String,
    /// The safety rules.
    pub(crate) guard: guard::Guard,
    /// The event stream's follower.
    pub(crate) live: live::Live,
}

/// The most engine calls (each a blocking thread with a database
/// connection) run at once; more wait their turn. The connections that
/// can ask are bounded too ([`net::MAX_CONNECTIONS`]).
const ENGINE_THREADS: usize = 8;

/// The port a board listens on when none is given.
const DEFAULT_PORT: u16 = 7717;

/// Runs the board with its command line read (the global flags and
/// `serve`'s own) until it is interrupted, and returns the exit code.
pub fn run(global: Global, args: ServeArgs) -> ExitCode {
    let json = global.json;
    let refuse = |error: EngineError| hosted::refuse("serve", error, json);
    let human = match inbox_engine::validate::agent("as", &Some(args.human.clone())) {
        Ok(human) => human.to_owned(),
        Err(error) => return refuse(error),
    };
    // Refused now rather than at the first page load: a board that does
    // not start says why in the terminal that started it.
    let database = match inbox_host_native::run::check_database(&global) {
        Ok(database) => database,
        Err(error) => return refuse(error),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(ENGINE_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return refuse(internal(format!("cannot start the async runtime: {error}"))),
    };
    let served = runtime.block_on(serve(global, args, human, database));
    // The follower may be asleep in a wait: leave it, the process ends.
    runtime.shutdown_background();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => refuse(error),
    }
}

/// Binds, says where the board is, and serves until interrupted.
async fn serve(
    global: Global,
    args: ServeArgs,
    human: String,
    database: String,
) -> Result<(), EngineError> {
    let wanted = listen_on(&args)?;
    let listener = tokio::net::TcpListener::bind(wanted)
        .await
        .map_err(|error| EngineError::InvalidValue {
            field: "port".into(),
            problem: format!(
                "cannot listen on {wanted}: {error}; choose another with --port (0: any free port)"
            ),
        })?;
    let address = listener
        .local_addr()
        .map_err(|error| internal(format!("cannot read the address listened on: {error}")))?;
    let guard = guard::Guard::new(address, args.write).map_err(internal)?;
    if let Some(path) = &args.url_file {
        inbox_host_native::secret::write_private(path, &format!("{}\n", guard.url()), "url_file")?;
    }
    announce(&guard, &address, &database, &human, &args, global.json);
    let global = Arc::new(global);
    let live = live::Live::start(Arc::clone(&global)).await;
    let redirect = if args.open {
        open::browser(&guard.url())
    } else {
        None
    };
    let board = Arc::new(Board {
        global,
        human,
        guard,
        live,
    });
    let app = page::routes()
        .merge(api::routes())
        .merge(live::routes())
        .fallback(not_served)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&board),
            guard::check,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(api::BODY_LIMIT))
        .with_state(board);
    // The redirect file `--open` wrote is removed after a while, or when
    // the board stops (this future is then dropped, and the file with it).
    let forget = async move {
        if redirect.is_some() {
            tokio::time::sleep(open::KEPT_FOR).await;
            drop(redirect);
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = net::serve(listener, app, stopped()) => {}
        () = forget => {}
    }
    Ok(())
}

/// Completes when the board is asked to stop: Ctrl-C (SIGINT) or SIGTERM
/// (a supervisor's, `kill`'s).
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The address to listen on: `--listen`'s (127.0.0.1 by default), with
/// its port or `--port`'s, given once.
fn listen_on(args: &ServeArgs) -> Result<SocketAddr, EngineError> {
    let ip = args
        .listen
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |listen| listen.ip);
    let port = match (args.listen.and_then(|listen| listen.port), args.port) {
        (Some(_), Some(_)) => {
            return Err(EngineError::InvalidValue {
                field: "port".into(),
                problem: "is given twice, with --port and in --listen ADDR:PORT; give it once"
                    .into(),
            });
        }
        (Some(port), None) | (None, Some(port)) => port,
        (None, None) => DEFAULT_PORT,
    };
    Ok(SocketAddr::new(ip, port))
}

/// Any other path: refused in the JSON contract's shape, like the API's
/// refusals.
async fn not_served(uri: axum::http::Uri) -> axum::response::Response {
    error::BoardError::NotServed {
        what: format!("`{}`", uri.path()),
        served: "open / for the board; its API is POST /api/COMMAND".into(),
    }
    .answer(None)
}

/// The URL, with its token, on stdout alone on the first line (tests and
/// scripts read it), or in `--url-file` with stdout showing it without
/// the token; the rest for people on stderr, never the token.
fn announce(
    guard: &guard::Guard,
    address: &SocketAddr,
    database: &str,
    human: &str,
    args: &ServeArgs,
    json: bool,
) {
    use std::io::Write as _;
    // With --json the first line is one JSON object, as every command's
    // answer is (an agent that starts a board parses it); the URL alone
    // otherwise, for a person or a script to open.
    #[derive(serde::Serialize)]
    struct Started<'a> {
        ok: bool,
        command: &'a str,
        url: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        url_file: Option<String>,
        address: String,
        database: &'a str,
        writes: bool,
        #[serde(rename = "as")]
        human: &'a str,
    }
    let (url, told) = match &args.url_file {
        Some(path) => (
            guard.base_url(),
            format!("the URL with its token is in {}", path.display()),
        ),
        None => (
            guard.url(),
            "open the URL with its token, printed on stdout".to_owned(),
        ),
    };
    let line = if json {
        let started = Started {
            ok: true,
            command: "serve",
            url: &url,
            url_file: args.url_file.as_ref().map(|p| p.display().to_string()),
            address: address.to_string(),
            database,
            writes: args.write,
            human,
        };
        serde_json::to_string(&started).unwrap_or_else(|_| url.clone())
    } else {
        url.clone()
    };
    let _ = writeln!(std::io::stdout().lock(), "{line}");
    hosted::log(&format!(
        "inbox serve: the board of {database} at {} ({told})",
        guard.base_url()
    ));
    if args.write {
        hosted::log(&format!(
            "inbox serve: writes are on, made as {human}; whoever has the URL can write: keep it to yourself"
        ));
    } else {
        hosted::log("inbox serve: read-only (--write lets the page answer, cancel and send)");
    }
    if !address.ip().is_loopback() {
        hosted::log(&format!(
            "warning: listening on {address}, which other machines may reach: whoever has the URL can read every thread{}; open it by IP address (host names are refused)",
            if args.write { " and write" } else { "" }
        ));
    }
}

fn internal(message: impl std::fmt::Display) -> EngineError {
    EngineError::Internal {
        message: message.to_string(),
    }
}
