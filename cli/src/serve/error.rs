//! The board's own refusals, the ones no engine request makes (a write
//! without the token, from another origin, on a read-only board), and how
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
    /// A write without the token.
    #[error(
        "a write needs this board's token (header `Authorization: Bearer TOKEN`), the one in the URL `inbox serve --write` printed"
    )]
    TokenRequired,
    /// A write with another token.
    #[error(
        "the token is not this board's; open the board with the URL this `inbox serve --write` printed"
    )]
    TokenInvalid,
    /// A write from a page of another site (CSRF).
    #[error("a write from the page at {origin} is refused: only this board's own page may write")]
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
            BoardError::TokenRequired => "write_token_required",
            BoardError::TokenInvalid => "write_token_invalid",
            BoardError::OriginRefused { .. } => "origin_refused",
            BoardError::HostRefused { .. } => "host_refused",
            BoardError::NotServed { .. } => "not_served",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            BoardError::NotServed { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::FORBIDDEN,
        }
    }

    /// The refusal as a response, about `command` if one was named.
    pub(crate) fn answer(&self, command: Option<&str>) -> Response {
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
        json(
            self.status(),
            serde_json::to_string(&failure).unwrap_or_default(),
        )
    }
}

/// A JSON body with its status.
pub(crate) fn json(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
