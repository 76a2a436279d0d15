//! A PostgreSQL database named by URL (`--db postgres://…`): telling a URL
//! from a file name, naming the database for people without its password,
//! and opening it with its schema checked (or, for `init`, made). This
//! module must never print the URL as given: it may hold a password.

use std::path::Path;

use inbox_engine::{Store as _, StoreError};

use crate::PgStore;

/// Whether a database name is a PostgreSQL URL (`postgres://` or
/// `postgresql://`) rather than an SQLite file.
pub fn is_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// The PostgreSQL URL that `flag` (`--db`), else `env` (`$INBOX_DB`),
/// names, if it names one: callers check it before looking for an SQLite file,
/// which would take it for a relative file name. The flag wins over the
/// environment, as for files.
pub fn url_named(flag: Option<&Path>, env: Option<&Path>) -> Option<String> {
    let env = env.filter(|p| !p.as_os_str().is_empty());
    let named = flag.or(env)?.to_str()?;
    is_url(named).then(|| named.to_owned())
}

/// The database a PostgreSQL URL names, for people and messages:
/// `postgres://user@host:port/db`, never its password (the URL as given
/// may hold one, so it is never printed).
pub fn describe_url(url: &str) -> String {
    match url.parse::<postgres::Config>() {
        Ok(mut config) => {
            crate::from_environment(&mut config);
            crate::describe(&config)
        }
        Err(_) => "a PostgreSQL database".to_owned(),
    }
}

/// Opens the PostgreSQL database `url` names: for `init` (`init` true) its
/// schema is created or migrated; otherwise it must already hold an inbox
/// schema (an older one is migrated, a newer one refused untouched).
pub fn open(url: &str, init: bool) -> Result<PgStore, StoreError> {
    let mut store = PgStore::connect(url)?;
    if init {
        store.initialize()?;
    } else {
        store.ensure_schema()?;
    }
    Ok(store)
}
