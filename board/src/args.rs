//! The board's flags (`inbox serve ARGS`): one definition, which `inbox`'s
//! command line takes for its `serve` subcommand and `inbox-serve` reads
//! with it. This module must never act on a flag.

use std::path::PathBuf;

use clap::Args;

// `serve`: the board's server (`inbox-serve`) reads these.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The port to listen on (0: any free port; the URL printed says which)
    /// [default: 7717]
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Listen on this address instead of 127.0.0.1, with a port if --port
    /// is not given: 127.0.0.2, [::1]:8080, localhost:8080, 0.0.0.0 (other
    /// machines can then reach the board, with its token: a warning is
    /// printed)
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = listen_address)]
    pub listen: Option<Listen>,
    /// Write the board's URL, with its token, to this file (made anew,
    /// readable by you alone) instead of stdout, which then shows the URL
    /// without the token: for a board whose output a supervisor logs
    #[arg(long, value_name = "PATH")]
    pub url_file: Option<PathBuf>,
    /// Let the page write (answer, cancel, send) with the token in the URL
    #[arg(long)]
    pub write: bool,
    /// The agent name the board's writes are made as
    #[arg(long = "as", value_name = "NAME", default_value = "human")]
    pub human: String,
    /// Open the board in the default browser, through a page only you
    /// can read (the token is never on a command line)
    #[arg(long)]
    pub open: bool,
}

/// Where `inbox serve --listen` listens: an IP address, and the port if
/// one was given with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen {
    /// The address.
    pub ip: std::net::IpAddr,
    /// The port, if given as `ADDR:PORT`.
    pub port: Option<u16>,
}

/// Reads `--listen`: an IP address (`::1` or `[::1]`), with `:PORT` or
/// without, or `localhost`, which is 127.0.0.1. No other name is looked
/// up: the address listened on is the one the URL names, so it is never
/// one that a name resolves to differently later.
fn listen_address(given: &str) -> Result<Listen, String> {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    let refused = || {
        format!(
            "`{given}` is not an IP address with an optional port (127.0.0.2, 127.0.0.2:8080, ::1, [::1]:8080, localhost:8080, 0.0.0.0); other host names are not looked up"
        )
    };
    if let Ok(address) = given.parse::<SocketAddr>() {
        return Ok(Listen {
            ip: address.ip(),
            port: Some(address.port()),
        });
    }
    let (host, port) = match given.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            (host, Some(port.parse::<u16>().map_err(|_| refused())?))
        }
        _ => (given, None),
    };
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip = if bare.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        bare.parse::<IpAddr>().map_err(|_| refused())?
    };
    Ok(Listen { ip, port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[test]
    fn listen_takes_an_address_with_or_without_a_port_and_localhost() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let cases = [
            ("127.0.0.2", v4(127, 0, 0, 2), None),
            ("127.0.0.2:8080", v4(127, 0, 0, 2), Some(8080)),
            ("::1", IpAddr::V6(Ipv6Addr::LOCALHOST), None),
            ("[::1]", IpAddr::V6(Ipv6Addr::LOCALHOST), None),
            ("[::1]:0", IpAddr::V6(Ipv6Addr::LOCALHOST), Some(0)),
            ("localhost", v4(127, 0, 0, 1), None),
            ("LocalHost:7", v4(127, 0, 0, 1), Some(7)),
            ("0.0.0.0", v4(0, 0, 0, 0), None),
        ];
        for (given, ip, port) in cases {
            assert_eq!(listen_address(given), Ok(Listen { ip, port }), "{given}");
        }
        for bad in [
            "example.com",
            "example.com:80",
            "127.0.0.1:99999",
            "",
            ":80",
            "[::1]:x",
        ] {
            assert!(listen_address(bad).is_err(), "{bad}");
        }
    }
}
