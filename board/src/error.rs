//! The board's own refusals, the ones no engine request makes (a call
//! without the token, from another origin, a write on a read-only board,
//! a connection or event stream past the board's limits), and how
//! any answer becomes an HTTP response: always the JSON contract's shape,
//! `{"ok": false, "command": ..., "error": {"code", "message"}}`, with a
//! status that says the same as the exit code would. Codes are stable:
//! pages and scripts match on them. This module must never decide whether
//! a request is allowed; [`crate::guard`] and [`crate::api`] do.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Why the board refused a request before it reached the engine.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BoardError {
    /// A write on a board started without `--write`.
    #[error(
        "this board is read-only; start it with `inbox serve --write` to answer, cancel or send from the page"
    )]
    ReadOnly,
    /// A call without the token.
    #[error(
        "this board needs its token (header `Authorization: Bearer TOKEN`): open the board with the URL inbox serve printed, which holds it"
    )]
    TokenRequired,
    /// A call with another token.
    #[error("the token is not this board's; open the board with the URL this inbox serve printed")]
    TokenInvalid,
    /// More event streams open than the board keeps.
    #[error(
        "this board already has {limit} live pages open, its most; close one, or try again later"
    )]
    TooManyStreams {
        /// The most it keeps.
        limit: usize,
    },
    /// More connections open than the board keeps.
    #[error("this board already has {limit} connections open, its most; try again later")]
    TooManyConnections {
        /// The most it keeps.
        limit: usize,
    },
    /// A call from a page of another site (CSRF).
    #[error("a call from the page at {origin} is refused: only this board's own page may make it")]
    OriginRefused {
        /// The Origin the browser sent.
        origin: String,
    },
    /// A request naming another host (DNS rebinding).
    #[error(
        "the host `{host}` is not this board's; open the board with the URL inbox serve printed"
    )]
    HostRefused {
        /// The Host header sent.
        host: String,
    },
    /// A path the board does not serve, or a command it does not run.
    #[error("{what} is not served by this board; {served}")]
    NotServed {
        /// What was asked for.
        what: String,
        /// What is served instead.
        served: String,
    },
}

impl BoardError {
    /// The stable code.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            BoardError::ReadOnly => "read_only",
            BoardError::TokenRequired => "token_required",
            BoardError::TokenInvalid => "token_invalid",
            BoardError::TooManyStreams { .. } => "too_many_streams",
            BoardError::TooManyConnections { .. } => "too_many_connections",
            BoardError::OriginRefused { .. } => "origin_refused",
            BoardError::HostRefused { .. } => "host_refused",
            BoardError::NotServed { .. } => "not_served",
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            BoardError::NotServed { .. } => StatusCode::NOT_FOUND,
            BoardError::TokenRequired | BoardError::TokenInvalid => StatusCode::UNAUTHORIZED,
            BoardError::TooManyStreams { .. } | BoardError::TooManyConnections { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            BoardError::ReadOnly
            | BoardError::OriginRefused { .. }
            | BoardError::HostRefused { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// The refusal's JSON body, about `command` if one was named.
    pub(crate) fn body(&self, command: Option<&str>) -> String {
        // The engine's failure shape, field for field and in its order.
        #[derive(serde::Serialize)]
        struct Failure<'a> {
            ok: bool,
            command: Option<&'a str>,
            error: Body,
        }
        #[derive(serde::Serialize)]
        struct Body {
            code: &'static str,
            message: String,
        }
        let failure = Failure {
            ok: false,
            command,
            error: Body {
                code: self.code(),
                message: self.to_string(),
            },
        };
        serde_json::to_string(&failure).unwrap_or_default()
    }

    /// The refusal as a response, about `command` if one was named.
    pub(crate) fn answer(&self, command: Option<&str>) -> Response {
        let mut response = json(self.status(), self.body(command));
        let headers = response.headers_mut();
        match self.status() {
            StatusCode::UNAUTHORIZED => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"inbox board\""),
                );
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER));
            }
            _ => {}
        }
        response
    }
}

/// When a refused client may try again, in seconds.
pub(crate) const RETRY_AFTER: &str = "5";

/// A JSON body with its status.
pub(crate) fn json(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
