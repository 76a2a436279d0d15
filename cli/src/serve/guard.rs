//! The board's safety rules, in one place: who may read, who may write,
//! and what every response tells the browser.
//!
//! - **Reads** are open to whoever can reach the address, which is
//!   loopback unless `--listen` asked otherwise. A request naming another
//!   host is refused, so a web page on some site whose name an attacker
//!   re-points at 127.0.0.1 (DNS rebinding) cannot read the board.
//! - **Writes** need `--write`, then the token made at start from the OS's
//!   random source and printed in the URL's fragment (which browsers never
//!   send to servers, in a Referer or otherwise); the page sends it as
//!   `Authorization: Bearer TOKEN`, and it is compared in constant time.
//!   A write a browser says comes from another origin is refused as well
//!   (CSRF), even with the token.
//! - **Every response** carries a Content-Security-Policy that allows only
//!   the board's own script, style and connections, and no framing, so
//!   even a rendering mistake cannot run an agent's text as script.
//!
//! This module must never decide what a request means; it only says
//! whether it may be made.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest as _, Sha256};

use crate::Board;
use crate::error::BoardError;

/// The policy every response carries (see the module's comment).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How many random bytes make the token: 256 bits, unguessable.
const TOKEN_BYTES: usize = 32;

/// The rules of one running board.
pub(crate) struct Guard {
    /// Where the board listens.
    address: SocketAddr,
    /// The Host headers a request may carry; `None`: any (a board asked to
    /// listen beyond loopback, reached by names it cannot know).
    hosts: Option<Vec<String>>,
    /// The write token, when writes are on.
    token: Option<String>,
}

impl Guard {
    /// The rules for a board at `address`, with a fresh token if `write`.
    pub(crate) fn new(address: SocketAddr, write: bool) -> Result<Guard, String> {
        let token = if write { Some(fresh_token()?) } else { None };
        let port = address.port();
        let hosts = address.ip().is_loopback().then(|| {
            vec![
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ]
        });
        Ok(Guard {
            address,
            hosts,
            token,
        })
    }

    /// The URL to open: with writes on, the token in its fragment.
    pub(crate) fn url(&self) -> String {
        let ip = self.address.ip();
        let host = if ip.is_unspecified() {
            // Listening everywhere: this machine reaches it by loopback.
            format!("127.0.0.1:{}", self.address.port())
        } else {
            self.address.to_string()
        };
        match &self.token {
            Some(token) => format!("http://{host}/#token={token}"),
            None => format!("http://{host}/"),
        }
    }

    /// Whether writes are on.
    pub(crate) fn writes(&self) -> bool {
        self.token.is_some()
    }

    /// Whether a request may name this host.
    fn host_allowed(&self, headers: &HeaderMap) -> Result<(), BoardError> {
        let Some(hosts) = &self.hosts else {
            return Ok(());
        };
        let host = text(headers, header::HOST.as_str()).unwrap_or_default();
        if hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(&host))
        {
            Ok(())
        } else {
            Err(BoardError::HostRefused { host })
        }
    }

    /// Whether a write may be made: writes on, the right token, and not
    /// from another site's page.
    pub(crate) fn may_write(&self, headers: &HeaderMap) -> Result<(), BoardError> {
        let Some(token) = &self.token else {
            return Err(BoardError::ReadOnly);
        };
        let given = text(headers, header::AUTHORIZATION.as_str());
        let Some(given) = given.as_deref().and_then(|g| g.strip_prefix("Bearer ")) else {
            return Err(BoardError::TokenRequired);
        };
        if !same_secret(given, token) {
            return Err(BoardError::TokenInvalid);
        }
        same_origin(headers)
    }
}

/// A write from a browser names its page's origin; it must be this
/// board's (the Host already checked). A client that is not a browser
/// sends none, and only the token stands for it. `Sec-Fetch-Site`, which
/// browsers set and pages cannot, must not say another site either.
fn same_origin(headers: &HeaderMap) -> Result<(), BoardError> {
    if let Some(site) = text(headers, "sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return Err(BoardError::OriginRefused {
            origin: text(headers, header::ORIGIN.as_str()).unwrap_or(site),
        });
    }
    let Some(origin) = text(headers, header::ORIGIN.as_str()) else {
        return Ok(());
    };
    let host = text(headers, header::HOST.as_str()).unwrap_or_default();
    if origin.eq_ignore_ascii_case(&format!("http://{host}")) {
        Ok(())
    } else {
        Err(BoardError::OriginRefused { origin })
    }
}

/// A header's value as text, if present and text.
fn text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Whether two secrets are equal, in time that does not depend on where
/// they differ: their SHA-256 digests are compared, every byte, so
/// neither a prefix nor the length shows in the timing.
fn same_secret(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// A token from the OS's random source, as lowercase hex.
fn fresh_token() -> Result<String, String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|error| format!("cannot read the OS's random source for the token: {error}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Every request: the Host checked first; every response: the security
/// headers.
pub(crate) async fn check(
    State(board): State<Arc<Board>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match board.guard.host_allowed(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.answer(None),
    };
    let headers = response.headers_mut();
    let set = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("ab", "abc"));
        assert!(!same_secret("", "abc"));
    }

    #[test]
    fn tokens_are_fresh_hex() {
        let (Ok(a), Ok(b)) = (fresh_token(), fresh_token()) else {
            panic!("no random source");
        };
        assert_eq!(a.len(), TOKEN_BYTES * 2);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
