//! The board's safety rules, in one place: who may read, who may write,
//! and what every response tells the browser.
//!
//! - **One token, for everything but the page's own files.** A board makes
//!   a token at start from the OS's random source and prints it in the
//!   URL's fragment (which browsers never send to servers, in a request
//!   line or a Referer). The page sends it on every call, the event
//!   stream's included, as `Authorization: Bearer TOKEN`, compared in
//!   constant time; a request without it is answered 401, so the board
//!   never lets someone read whom the database file's permissions would
//!   not let read: another local user, a page in the browser. The files
//!   of the page (HTML, script, style) are all that is served without it:
//!   they hold no data.
//! - **Writes** need `--write` as well, and a write (or any call) a browser
//!   says comes from another origin is refused (CSRF), even with the token.
//! - **The Host** a request names must be an IP address or `localhost`,
//!   with the board's port: a web page on some site whose name an attacker
//!   re-points at this machine (DNS rebinding) names that site, and is
//!   refused, on every address the board listens on.
//! - **Every response** carries a Content-Security-Policy that allows only
//!   the board's own script, style and connections, and no framing, so
//!   even a rendering mistake cannot run an agent's text as script.
//!
//! This module must never decide what a request means; it only says
//! whether it may be made.

use std::net::{IpAddr, SocketAddr};
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
    /// The token every call carries.
    token: String,
    /// Whether writes are on.
    write: bool,
}

impl Guard {
    /// The rules for a board at `address`, with a fresh token.
    pub(crate) fn new(address: SocketAddr, write: bool) -> Result<Guard, String> {
        Ok(Guard {
            address,
            token: fresh_token()?,
            write,
        })
    }

    /// The board's address as a URL, without the token.
    pub(crate) fn base_url(&self) -> String {
        let ip = self.address.ip();
        let port = self.address.port();
        // Listening everywhere: this machine reaches it by loopback.
        let ip = match ip {
            IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}/", SocketAddr::new(ip, port))
    }

    /// The URL to open: the token in its fragment.
    pub(crate) fn url(&self) -> String {
        format!("{}#token={}", self.base_url(), self.token)
    }

    /// Whether writes are on.
    pub(crate) fn writes(&self) -> bool {
        self.write
    }

    /// Whether a write may be made (the token was checked already).
    pub(crate) fn may_write(&self) -> Result<(), BoardError> {
        if self.write {
            Ok(())
        } else {
            Err(BoardError::ReadOnly)
        }
    }

    /// Whether a request may name this host: an IP address or
    /// `localhost`, with the board's port (none for port 80). A name is
    /// what a rebinding attack brings; an address is the page's own
    /// origin, which no other site's page has.
    fn host_allowed(&self, headers: &HeaderMap) -> Result<(), BoardError> {
        let given = text(headers, header::HOST.as_str()).unwrap_or_default();
        let refused = || BoardError::HostRefused {
            host: given.clone(),
        };
        let (host, port) = split_host(&given).ok_or_else(refused)?;
        let port_ok = match port {
            Some(port) => port == self.address.port(),
            None => self.address.port() == 80,
        };
        let named_ok = host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok();
        if port_ok && named_ok {
            Ok(())
        } else {
            Err(refused())
        }
    }

    /// Whether a request carries this board's token.
    fn token_given(&self, headers: &HeaderMap) -> Result<(), BoardError> {
        let given = bearer(headers).ok_or(BoardError::TokenRequired)?;
        if same_secret(&given, &self.token) {
            Ok(())
        } else {
            Err(BoardError::TokenInvalid)
        }
    }
}

/// `Authorization: Bearer VALUE`'s value.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = text(headers, header::AUTHORIZATION.as_str())?;
    let (given, rest) = value.split_once(' ')?;
    given
        .eq_ignore_ascii_case("Bearer")
        .then(|| rest.trim().to_owned())
}

/// A Host header's name and port: `name`, `name:port`, `[v6]`,
/// `[v6]:port`.
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        match after {
            "" => (name, None),
            _ => (name, Some(after.strip_prefix(':')?)),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() {
        return None;
    }
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    Some((name, port))
}

/// A call from a browser names its page's origin; it must be this
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

/// Every request: the Host checked first, then, for anything but the
/// page's files, the token and the origin; every response: the security
/// headers.
pub(crate) async fn check(
    State(board): State<Arc<Board>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let path = request.uri().path();
    let allowed = board.guard.host_allowed(headers).and_then(|()| {
        if crate::page::is_page_file(path) {
            return Ok(());
        }
        board.guard.token_given(headers)?;
        same_origin(headers)
    });
    let mut response = match allowed {
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

    #[test]
    fn hosts_are_split_into_name_and_port() {
        assert_eq!(split_host("127.0.0.2:80"), Some(("127.0.0.2", Some(80))));
        assert_eq!(split_host("[::1]:7717"), Some(("::1", Some(7717))));
        assert_eq!(split_host("[::1]"), Some(("::1", None)));
        assert_eq!(split_host("localhost"), Some(("localhost", None)));
        assert_eq!(
            split_host("evil.example:1"),
            Some(("evil.example", Some(1)))
        );
        for bad in ["", ":80", "[::1", "[::1]x", "a:b", "a:99999"] {
            assert_eq!(split_host(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_addresses_and_localhost_on_the_boards_port_are_hosts() {
        let at = |address: &str| Guard::new(address.parse().unwrap(), false).unwrap();
        let host = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(value).unwrap());
            headers
        };
        for address in [
            "127.0.0.1:7717",
            "0.0.0.0:7717",
            "[::1]:7717",
            "127.0.0.2:7717",
        ] {
            let guard = at(address);
            for ok in [
                "127.0.0.1:7717",
                "LOCALHOST:7717",
                "[::1]:7717",
                "10.1.2.3:7717",
            ] {
                assert!(guard.host_allowed(&host(ok)).is_ok(), "{address} {ok}");
            }
            for bad in [
                "evil.example:7717",
                "127.0.0.1:7718",
                "127.0.0.1",
                "localhost.evil:7717",
            ] {
                assert!(guard.host_allowed(&host(bad)).is_err(), "{address} {bad}");
            }
            assert!(guard.host_allowed(&HeaderMap::new()).is_err());
        }
        assert!(at("0.0.0.0:80").host_allowed(&host("192.0.2.1")).is_ok());
    }

    #[test]
    fn the_url_never_names_an_unspecified_address() {
        let guard = Guard::new("0.0.0.0:7".parse().unwrap(), false).unwrap();
        assert_eq!(guard.base_url(), "http://127.0.0.1:7/");
        let guard = Guard::new("[::]:7".parse().unwrap(), false).unwrap();
        assert_eq!(guard.base_url(), "http://[::1]:7/");
        let guard = Guard::new("127.0.0.2:7".parse().unwrap(), true).unwrap();
        assert!(guard.url().starts_with("http://127.0.0.2:7/#token="));
    }
}
