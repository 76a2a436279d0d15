//! `inbox-serve`: the live board, a small HTTP server over one database
//! that a person watches in a browser. `inbox serve ARGS` starts it with
//! the same arguments (read with `inbox`'s own parser); run by itself it
//! takes the same flags.
//!
//! It is a program of its own so that the HTTP stack (axum on tokio) is
//! never linked into `inbox` or `orch`. The modules: [`api`] turns HTTP
//! calls into engine requests and runs them as every command runs
//! (`inbox_cli::execute`), [`live`] follows the event stream once for every
//! open page and pushes it as Server-Sent Events, [`guard`] holds the
//! safety rules (loopback by default, the write token, Host and Origin
//! checks, the security headers), [`page`] serves the embedded page, and
//! [`error`] the board's own refusals. It must never apply an inbox rule of
//! its own: every read and write is an engine request. stdout carries one
//! line, the board's URL; everything else goes to stderr.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use inbox_cli::args::{Command, Global, ServeArgs};
use inbox_cli::hosted;
use inbox_engine::EngineError;

mod api;
mod error;
mod guard;
mod live;
mod page;

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

inbox_cli::c_allocator!();

fn main() -> ExitCode {
    let json = inbox_cli::args_os().iter().any(|a| a == "--json");
    let refuse = |error: EngineError| hosted::refuse("serve", error, json);
    let (global, args) = match hosted::arguments("serve", json) {
        Ok(cli) => match cli.command {
            Command::Serve(args) => (cli.global, args),
            _ => return refuse(internal("the arguments are not `serve`'s")),
        },
        Err(exit) => return exit,
    };
    let human = match inbox_engine::validate::agent("as", &Some(args.human.clone())) {
        Ok(human) => human.to_owned(),
        Err(error) => return refuse(error),
    };
    // Refused now rather than at the first page load: a board that does
    // not start says why in the terminal that started it.
    let database = match inbox_cli::check_database(&global) {
        Ok(database) => database,
        Err(error) => return refuse(error),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
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
    let ip = args.listen.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, args.port))
        .await
        .map_err(|error| EngineError::InvalidValue {
            field: "port".into(),
            problem: format!(
                "cannot listen on {}: {error}; choose another with --port (0: any free port)",
                SocketAddr::new(ip, args.port)
            ),
        })?;
    let address = listener
        .local_addr()
        .map_err(|error| internal(format!("cannot read the address listened on: {error}")))?;
    let guard = guard::Guard::new(address, args.write).map_err(internal)?;
    let url = guard.url();
    announce(&url, &address, &database, &human, args.write, global.json);
    let global = Arc::new(global);
    let live = live::Live::start(Arc::clone(&global)).await;
    let board = Arc::new(Board {
        global,
        human,
        guard,
        live,
    });
    if args.open {
        open_browser(&url);
    }
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
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|error| internal(format!("the server stopped: {error}")))
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

/// The URL on stdout, alone on the first line (tests and scripts read
/// it); the rest for people on stderr.
fn announce(url: &str, address: &SocketAddr, database: &str, human: &str, write: bool, json: bool) {
    use std::io::Write as _;
    // With --json the first line is one JSON object, as every command's
    // answer is (an agent that starts a board parses it); the URL alone
    // otherwise, for a person or a script to open.
    #[derive(serde::Serialize)]
    struct Started<'a> {
        ok: bool,
        command: &'a str,
        url: &'a str,
        address: String,
        database: &'a str,
        writes: bool,
        #[serde(rename = "as")]
        human: &'a str,
    }
    let line = if json {
        let started = Started {
            ok: true,
            command: "serve",
            url,
            address: address.to_string(),
            database,
            writes: write,
            human,
        };
        serde_json::to_string(&started).unwrap_or_else(|_| url.to_owned())
    } else {
        url.to_owned()
    };
    let _ = writeln!(std::io::stdout().lock(), "{line}");
    hosted::log(&format!("inbox serve: the board of {database} at {url}"));
    if write {
        hosted::log(&format!(
            "inbox serve: writes are on, made as {human}; the token is in the URL, keep it to yourself"
        ));
    } else {
        hosted::log("inbox serve: read-only (--write lets the page answer, cancel and send)");
    }
    if !address.ip().is_loopback() {
        hosted::log(&format!(
            "warning: listening on {address}, which other machines may reach: they can read every thread{}",
            if write {
                ", and anyone who sees the URL can write"
            } else {
                ""
            }
        ));
    }
}

/// Opens the board in the default browser; a failure is only a warning,
/// the URL is printed anyway.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let opened = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(error) = opened {
        hosted::log(&format!(
            "warning: could not open a browser ({opener}: {error}); open the URL above"
        ));
    }
}

fn internal(message: impl std::fmt::Display) -> EngineError {
    EngineError::Internal {
        message: message.to_string(),
    }
}
