//! Who reserved an attempt, named so that another process can tell whether
//! it still runs: `HOST/BOOT/PID/START`, this machine's name, its boot id,
//! the process id and the process's start time in clock ticks since boot
//! (Linux's `/proc`). A process id alone is reused; with the boot id and
//! the start time it names one process for good.
//!
//! A holder of this machine's name is ended when the machine has booted
//! since, or when no process with that id and start time runs. One of
//! another machine (a team on PostgreSQL), or any holder where `/proc`
//! cannot be read, is never called ended: its reservation waits for the
//! engine's age bound. Written here rather than with a crate (`procfs`):
//! it reads two small files and one field.

use std::fs;

/// This process, or `None` where `/proc` cannot tell.
pub fn this_process() -> Option<String> {
    let host = rustix::system::uname().nodename().to_str().ok()?.to_owned();
    let boot = boot_id()?;
    let pid = std::process::id();
    let start = start_time(pid)?;
    Some(format!("{host}/{boot}/{pid}/{start}"))
}

/// Whether the process `holder` names has certainly ended.
pub fn has_ended(holder: &str) -> bool {
    let mut parts = holder.split('/');
    let (Some(host), Some(boot), Some(pid), Some(start), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let here = rustix::system::uname();
    if here.nodename().to_str().ok() != Some(host) {
        return false;
    }
    let Some(now_boot) = boot_id() else {
        return false;
    };
    if now_boot != boot {
        return true;
    }
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    start_time(pid).is_none_or(|now| now != start)
}

/// The kernel's id of this boot.
fn boot_id() -> Option<String> {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(text.trim().to_owned())
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks
/// since boot; `None` when no such process runs. The second field (the
/// command's name, in parentheses) may hold spaces and parentheses, so the
/// fields are counted from the last `)`.
fn start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: state (field 3) ... starttime (field 22). A zombie
    // (`Z`, or `X` on its way out) has ended; only its parent has not
    // looked yet.
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_child_that_exited_has_ended() {
        let me = this_process().expect("Linux has /proc");
        assert!(!has_ended(&me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid);
        child.wait().unwrap();
        if let Some(start) = start {
            let (host, boot) = (me.split('/').next().unwrap(), boot_id().unwrap());
            assert!(has_ended(&format!("{host}/{boot}/{pid}/{start}")));
        }
        // Another boot of this machine: ended. Another machine: unknown.
        let host = me.split('/').next().unwrap();
        assert!(has_ended(&format!("{host}/another-boot/1/1")));
        assert!(!has_ended("another-host/b/1/1"));
        assert!(!has_ended("not a holder"));
    }
}
