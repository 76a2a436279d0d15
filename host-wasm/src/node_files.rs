//! [`NodeFiles`]: the file operations [`inbox_host_native::shared_file`]
//! needs, over Node's `fs` (and `os`, `process`), for the `file` store.
//!
//! The modules come from `process.getBuiltinModule` (Node 20.16 and later,
//! which every current VS Code ships), so the package imports nothing that
//! a browser build would trip over. Everything is synchronous: the engine
//! runs a command in one go, and the protocol's pauses are milliseconds
//! (`Atomics.wait`). This module only adapts calls; the protocol, and every
//! decision, is in `shared_file`.

use inbox_host_native::shared_file::{Files, Stat};
use inbox_host_native::writer_lock::{self, Me};
use js_sys::{Function, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

/// Node's `fs`, `os` and `process`.
pub struct NodeFiles {
    fs: JsValue,
    os: JsValue,
    process: JsValue,
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

fn bigint(value: &JsValue) -> i128 {
    js_sys::BigInt::new(value)
        .ok()
        .and_then(|b| b.to_string(10).ok())
        .and_then(|s| String::from(s).parse().ok())
        .unwrap_or(0)
}

impl NodeFiles {
    /// Node's modules, or a message saying the `file` store needs Node.
    pub fn new() -> Result<NodeFiles, String> {
        let process = get(&js_sys::global(), "process");
        let builtin = get(&process, "getBuiltinModule");
        if !builtin.is_function() {
            return Err(
                "store: \"file\" needs Node 20.16 or later (process.getBuiltinModule); in a \
                 browser use store: \"opfs\" or \"sqlite\""
                    .into(),
            );
        }
        let module = |name: &str| call(&process, "getBuiltinModule", &[JsValue::from_str(name)]);
        let fs = module("node:fs").map_err(|e| crate::js::error_text(&e))?;
        let os = module("node:os").map_err(|e| crate::js::error_text(&e))?;
        let constants = get(&fs, "constants");
        Ok(NodeFiles {
            fs,
            os,
            process,
            constants,
        })
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

    fn flag(&self, name: &str) -> u32 {
        get(&self.constants, name).as_f64().unwrap_or(0.0) as u32
    }

    /// Opens `path` with `flags`, runs `f` on the descriptor, closes it.
    fn with_fd<T>(
        &self,
        path: &str,
        flags: u32,
        f: impl FnOnce(&JsValue) -> Result<T, JsValue>,
    ) -> Result<T, JsValue> {
        let fd = call(
            &self.fs,
            "openSync",
            &[
                JsValue::from_str(path),
                JsValue::from(flags),
                JsValue::from(0o600),
            ],
        )?;
        let result = f(&fd);
        let _ = call(&self.fs, "closeSync", &[fd]);
        result
    }

    fn write_fd(&self, fd: &JsValue, offset: u64, bytes: &[u8]) -> Result<(), JsValue> {
        let buffer = Uint8Array::from(bytes);
        let mut done = 0usize;
        while done < bytes.len() {
            let written = call(
                &self.fs,
                "writeSync",
                &[
                    fd.clone(),
                    buffer.clone().into(),
                    JsValue::from(done as f64),
                    JsValue::from((bytes.len() - done) as f64),
                    JsValue::from((offset + done as u64) as f64),
                ],
            )?;
            done += written.as_f64().unwrap_or(0.0) as usize;
        }
        Ok(())
    }
}

impl Files for NodeFiles {
    fn stat(&mut self, path: &str) -> Result<Option<Stat>, String> {
        let options = js_sys::Object::new();
        let _ = Reflect::set(&options, &"bigint".into(), &JsValue::TRUE);
        let _ = Reflect::set(&options, &"throwIfNoEntry".into(), &JsValue::FALSE);
        let stat = call(
            &self.fs,
            "lstatSync",
            &[JsValue::from_str(path), options.into()],
        )
        .map_err(|e| message(path, &e))?;
        if stat.is_undefined() {
            return Ok(None);
        }
        let is_file = call(&stat, "isFile", &[]).is_ok_and(|v| v.is_truthy());
        Ok(Some(Stat {
            ino: bigint(&get(&stat, "ino")) as u64,
            size: bigint(&get(&stat, "size")) as u64,
            mtime_ns: bigint(&get(&stat, "mtimeNs")),
            uid: bigint(&get(&stat, "uid")) as u32,
            is_file,
        }))
    }

    fn read(&mut self, path: &str) -> Result<Option<Vec<u8>>, String> {
        match call(&self.fs, "readFileSync", &[JsValue::from_str(path)]) {
            Ok(buffer) => Ok(Some(Uint8Array::new(&buffer).to_vec())),
            Err(e) if code(&e).as_deref() == Some("ENOENT") => Ok(None),
            Err(e) => Err(message(path, &e)),
        }
    }

    fn create_new(&mut self, path: &str, bytes: &[u8]) -> Result<bool, String> {
        let flags = self.flag("O_WRONLY")
            | self.flag("O_CREAT")
            | self.flag("O_EXCL")
            | self.flag("O_NOFOLLOW");
        match self.with_fd(path, flags, |fd| self.write_fd(fd, 0, bytes)) {
            Ok(()) => Ok(true),
            Err(e) if code(&e).as_deref() == Some("EEXIST") => Ok(false),
            Err(e) => Err(message(path, &e)),
        }
    }

    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let flags = self.flag("O_WRONLY") | self.flag("O_CREAT") | self.flag("O_NOFOLLOW");
        self.with_fd(path, flags, |fd| self.write_fd(fd, offset, bytes))
            .map_err(|e| message(path, &e))
    }

    fn sync(&mut self, path: &str) -> Result<(), String> {
        let flags = self.flag("O_RDONLY") | self.flag("O_NOFOLLOW");
        self.with_fd(path, flags, |fd| {
            call(&self.fs, "fsyncSync", std::slice::from_ref(fd)).map(|_| ())
        })
        .map_err(|e| message(path, &e))
    }

    fn remove(&mut self, path: &str) -> Result<(), String> {
        call(&self.fs, "unlinkSync", &[JsValue::from_str(path)])
            .map(|_| ())
            .map_err(|e| message(path, &e))
    }

    fn proc_locks(&mut self) -> Option<String> {
        call(
            &self.fs,
            "readFileSync",
            &[JsValue::from_str("/proc/locks"), JsValue::from_str("utf8")],
        )
        .ok()
        .and_then(|text| text.as_string())
    }

    fn pause(&mut self, millis: u64) {
        // Atomics.wait on a private buffer: a synchronous sleep, allowed on
        // Node's main thread.
        let cell = js_sys::Int32Array::new(&js_sys::SharedArrayBuffer::new(4));
        let _ = js_sys::Atomics::wait_with_timeout(&cell, 0, 0, millis as f64);
    }

    fn ticks(&mut self) -> u64 {
        inbox_engine::Clock::ticks(&mut crate::js::JsClock::system())
    }

    fn now_ns(&mut self) -> i128 {
        js_sys::Date::now() as i128 * 1_000_000
    }

    fn me(&mut self) -> (u32, Me, u32) {
        let pid = get(&self.process, "pid").as_f64().unwrap_or(0.0) as u32;
        let pid_ns = call(
            &self.fs,
            "readlinkSync",
            &[JsValue::from_str("/proc/self/ns/pid")],
        )
        .ok()
        .and_then(|v| v.as_string());
        let host = call(&self.os, "hostname", &[])
            .ok()
            .and_then(|v| v.as_string())
            .unwrap_or_default();
        let uid = call(&self.process, "getuid", &[])
            .ok()
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0) as u32;
        (pid, Me { pid_ns, host }, uid)
    }

    /// As the native store judges it (`inbox_host_native::file`): a zombie
    /// does not run; where `/proc` cannot be read, a signal-0 probe, for
    /// which only `ESRCH` means gone.
    fn process_runs(&mut self, pid: u32) -> bool {
        if let Ok(Some(stat)) = self.read(&format!("/proc/{pid}/stat")) {
            return !writer_lock::stat_says_dead(&stat);
        }
        match call(
            &self.process,
            "kill",
            &[JsValue::from(pid), JsValue::from(0)],
        ) {
            Ok(_) => true,
            Err(e) => code(&e).as_deref() != Some("ESRCH"),
        }
    }

    fn random(&mut self) -> u64 {
        crate::js::random_seed()
    }
}
