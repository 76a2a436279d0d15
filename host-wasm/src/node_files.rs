//! [`NodeFiles`]: what the `file` store does with Node's `fs` before SQLite
//! opens the database: find the real file, and create a new one
//! owner-only (SQLite gives its `-wal` and `-shm` the database's
//! permissions). It never reads or writes a database's bytes: that is
//! SQLite's alone ([`crate::node_sqlite`]).
//!
//! The modules come from `process.getBuiltinModule`, so the package imports
//! nothing that a browser build would trip over.

use js_sys::{Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// Node's `fs` and `os`.
pub struct NodeFiles {
    fs: JsValue,
    os: JsValue,
    constants: JsValue,
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// Calls `object.name(...args)`.
fn call(object: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let function: Function = get(object, name)
        .dyn_into()
        .map_err(|_| JsValue::from_str(&format!("{name} is not a function here")))?;
    let array: js_sys::Array = args.iter().collect();
    function.apply(object, &array)
}

/// An exception's `code` (`"ENOENT"`), if it has one.
fn code(error: &JsValue) -> Option<String> {
    get(error, "code").as_string()
}

/// An exception as a message naming the file.
fn message(path: &str, error: &JsValue) -> String {
    let text = get(error, "message")
        .as_string()
        .unwrap_or_else(|| crate::js::error_text(error));
    format!("{path}: {text}")
}

impl NodeFiles {
    /// Node's modules, or a message saying the `file` store needs Node.
    pub fn new() -> Result<NodeFiles, String> {
        let process = get(&js_sys::global(), "process");
        let builtin = get(&process, "getBuiltinModule");
        if !builtin.is_function() {
            return Err(crate::node_sqlite::NEEDS_NODE.into());
        }
        let module = |name: &str| call(&process, "getBuiltinModule", &[JsValue::from_str(name)]);
        let fs = module("node:fs").map_err(|e| crate::js::error_text(&e))?;
        let os = module("node:os").map_err(|e| crate::js::error_text(&e))?;
        let constants = get(&fs, "constants");
        Ok(NodeFiles { fs, os, constants })
    }

    /// The absolute, real path of `path` (links followed once, here, so
    /// the companion files are found beside the real file, as the CLI does),
    /// or of its folder for a file that does not exist yet.
    pub fn resolve(&self, path: &str) -> Result<String, String> {
        let real = |p: &str| call(&self.fs, "realpathSync", &[JsValue::from_str(p)]);
        if let Ok(real) = real(path) {
            return real.as_string().ok_or_else(|| path.to_owned());
        }
        let (folder, name) = match path.rfind('/') {
            Some(0) => ("/", &path[1..]),
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (".", path),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(format!("`path` {path} names a folder, not a database file"));
        }
        let folder = real(folder)
            .map_err(|e| message(folder, &e))?
            .as_string()
            .unwrap_or_default();
        Ok(format!("{}/{name}", folder.trim_end_matches('/')))
    }

    /// The size in bytes of the file at `path` (links followed), or `None`
    /// when there is nothing there.
    pub fn size(&self, path: &str) -> Result<Option<f64>, String> {
        let options = js_sys::Object::new();
        let _ = Reflect::set(&options, &"throwIfNoEntry".into(), &false.into());
        let stats = call(
            &self.fs,
            "statSync",
            &[JsValue::from_str(path), options.into()],
        )
        .map_err(|e| message(path, &e))?;
        if stats.is_undefined() {
            return Ok(None);
        }
        Ok(Some(get(&stats, "size").as_f64().unwrap_or(0.0)))
    }

    /// Creates `path` empty and owner-only if nothing is there (never
    /// through a link), so that SQLite makes a new database in a file
    /// only this user can read; an existing file is left as it is.
    pub fn create_private(&self, path: &str) -> Result<(), String> {
        let flag = |name: &str| get(&self.constants, name).as_f64().unwrap_or(0.0) as u32;
        let flags = flag("O_WRONLY") | flag("O_CREAT") | flag("O_EXCL") | flag("O_NOFOLLOW");
        let args = [
            JsValue::from_str(path),
            JsValue::from(flags),
            JsValue::from(0o600),
        ];
        match call(&self.fs, "openSync", &args) {
            Ok(fd) => call(&self.fs, "closeSync", &[fd])
                .map(drop)
                .map_err(|e| message(path, &e)),
            Err(e) if code(&e).as_deref() == Some("EEXIST") => Ok(()),
            Err(e) => Err(message(path, &e)),
        }
    }

    /// The bytes of a file that `write` makes at the path it is given, in
    /// a new owner-only folder under the system's temporary folder that is
    /// removed afterwards, whatever happened.
    pub fn scratch_file(
        &self,
        write: impl FnOnce(&str) -> Result<(), String>,
    ) -> Result<Vec<u8>, String> {
        let tmp = call(&self.os, "tmpdir", &[])
            .ok()
            .and_then(|t| t.as_string())
            .unwrap_or_else(|| "/tmp".into());
        let prefix = format!("{}/inbox-export-", tmp.trim_end_matches('/'));
        let dir = call(&self.fs, "mkdtempSync", &[JsValue::from_str(&prefix)])
            .map_err(|e| message(&prefix, &e))?
            .as_string()
            .unwrap_or(prefix);
        let path = format!("{dir}/copy.db");
        let bytes = write(&path).and_then(|()| {
            call(&self.fs, "readFileSync", &[JsValue::from_str(&path)])
                .map(|b| js_sys::Uint8Array::new(&b).to_vec())
                .map_err(|e| message(&path, &e))
        });
        let options = js_sys::Object::new();
        let _ = Reflect::set(&options, &"recursive".into(), &true.into());
        let _ = Reflect::set(&options, &"force".into(), &true.into());
        let _ = call(
            &self.fs,
            "rmSync",
            &[JsValue::from_str(&dir), options.into()],
        );
        bytes
    }
}
