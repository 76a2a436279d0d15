//! Where a PostgreSQL password comes from when the URL has none, the way
//! libpq finds it (the Rust client does not): `PGPASSWORD`, else the
//! password file (`PGPASSFILE`, else `~/.pgpass`), whose lines are
//! `host:port:database:user:password` with `*` matching anything and `\`
//! escaping `:` and `\`. Like libpq, a password file that others can read
//! is ignored. It must never print, log or return a password anywhere but
//! into the connection's configuration.

use std::path::{Path, PathBuf};

/// The password for a connection to `host:port/database` as `user`, if
/// the environment or the password file has one.
pub(super) fn lookup(host: &str, port: u16, database: &str, user: &str) -> Option<String> {
    if let Ok(password) = std::env::var("PGPASSWORD") {
        return Some(password);
    }
    let file = password_file()?;
    if !private(&file) {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let wanted = [host, &port.to_string(), database, user];
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(fields)
        .find(|fields| {
            fields.len() == 5
                && fields[..4]
                    .iter()
                    .zip(wanted)
                    .all(|(have, want)| have == "*" || have == want)
        })
        .map(|mut fields| fields.swap_remove(4))
}

fn password_file() -> Option<PathBuf> {
    if let Some(file) = std::env::var_os("PGPASSFILE") {
        return Some(PathBuf::from(file));
    }
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".pgpass"))
}

/// Whether only its owner may read the file (libpq's rule: 0600 or less).
fn private(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 == 0)
}

/// A password file line's fields, `\` escapes undone.
fn fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next()
                    && let Some(field) = fields.last_mut()
                {
                    field.push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::fields;

    #[test]
    fn a_line_splits_on_unescaped_colons() {
        assert_eq!(
            fields(r"db.example:5432:*:agent:pa\:ss\\word"),
            ["db.example", "5432", "*", "agent", r"pa:ss\word"]
        );
    }
}
