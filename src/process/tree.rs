//! Watching a process's descendants appear (`--subprocesses`): a cheap,
//! repeatable scan of `/proc` and a fingerprint of what a process runs.
//!
//! A full scan reads every process's `stat` file; repeated every few
//! milliseconds that is most of a profiler's own CPU time. [`ProcessTree`]
//! keeps the parent of every process it has seen, so a scan lists `/proc`
//! and reads `stat` only for the processes that are new since the last one.
//! A process's parent changes only when its parent dies (it is re-parented
//! to a reaper): such orphans are re-read when their recorded parent is gone.

use std::collections::HashMap;

/// The parent of every process seen so far, updated by [`ProcessTree::scan`].
#[derive(Debug, Default)]
pub struct ProcessTree {
    parent_of: HashMap<i32, i32>,
}

impl ProcessTree {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bring the table up to date with `/proc`: processes that are gone are
    /// forgotten, new ones (and orphans, whose parent is gone) read.
    pub fn scan(&mut self) {
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return;
        };
        let live: Vec<i32> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        let live_set: std::collections::HashSet<i32> = live.iter().copied().collect();
        self.parent_of.retain(|pid, _| live_set.contains(pid));
        let orphans: Vec<i32> = self
            .parent_of
            .iter()
            .filter(|(_, ppid)| **ppid > 1 && !live_set.contains(ppid))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in orphans {
            self.parent_of.remove(&pid);
        }
        for pid in live {
            if let std::collections::hash_map::Entry::Vacant(v) = self.parent_of.entry(pid)
                && let Some(ppid) = parent_pid(pid)
            {
                v.insert(ppid);
            }
        }
    }

    /// The parent of `pid` when it was first seen.
    pub fn parent(&self, pid: i32) -> Option<i32> {
        self.parent_of.get(&pid).copied()
    }

    /// Every known process below `root` (not `root` itself), parents
    /// before children.
    pub fn descendants(&self, root: i32) -> Vec<i32> {
        let mut out = vec![root];
        let mut i = 0;
        while i < out.len() {
            let p = out[i];
            let mut kids: Vec<i32> = self
                .parent_of
                .iter()
                .filter(|&(&pid, &ppid)| ppid == p && !out.contains(&pid))
                .map(|(&pid, _)| pid)
                .collect();
            kids.sort_unstable();
            out.extend(kids);
            i += 1;
        }
        out.remove(0);
        out
    }
}

/// `root` and every process below it now, parents before children: one
/// scan of `/proc`.
pub fn descendants_and_self(root: i32) -> Vec<i32> {
    let mut tree = ProcessTree::new();
    tree.scan();
    let mut out = vec![root];
    out.extend(tree.descendants(root));
    out
}

/// The pid most recently given to a new process or thread, system-wide
/// (the last field of `/proc/loadavg`): while it stays the same, no
/// process has started, and a scan can be skipped.
pub fn last_pid() -> Option<i32> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().last()?.parse().ok()
}

/// Is `pid` waiting in a system call that creates a process (vfork, or
/// clone with `CLONE_VFORK` as `posix_spawn` uses)? A vfork parent waits
/// there until its child execs; a fork parent leaves it at once. (x86-64
/// system call numbers; elsewhere, never.)
#[cfg(target_arch = "x86_64")]
pub fn in_vfork(pid: i32) -> bool {
    const CLONE: &str = "56";
    const VFORK: &str = "58";
    const CLONE3: &str = "435";
    std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .is_ok_and(|s| matches!(s.split_whitespace().next(), Some(CLONE | VFORK | CLONE3)))
}

#[cfg(not(target_arch = "x86_64"))]
pub fn in_vfork(_pid: i32) -> bool {
    false
}

/// The parent of `pid`, from `/proc/PID/stat` (after the command name,
/// which may hold spaces and parentheses).
pub fn parent_pid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_ppid(&s)
}

fn parse_ppid(stat: &str) -> Option<i32> {
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// What a process runs, as far as reading it goes: its executable and
/// where its first mapping starts. Both change when it execs (the new
/// image is mapped afresh, at a new random address), so a change means
/// the runtime found before is no longer there. `None`: it is gone.
pub fn image(pid: i32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    // Only the first line: a large process's whole map is hundreds of
    // kilobytes, and this is asked every few milliseconds.
    use std::io::Read;
    let mut head = [0u8; 64];
    let mut f = std::fs::File::open(format!("/proc/{pid}/maps")).ok()?;
    let n = f.read(&mut head).ok()?;
    let head = String::from_utf8_lossy(&head[..n]);
    let first = head.split('-').next().unwrap_or("");
    Some(format!("{}|{first}", exe.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_is_read_past_a_strange_name() {
        assert_eq!(parse_ppid("42 (a) b) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("42 (x) R 1 1"), Some(1));
        assert_eq!(parse_ppid("garbage"), None);
        assert_eq!(parse_ppid("1 (x)"), None);
    }

    #[test]
    fn descendants_of_this_process_include_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep runs");
        let mut tree = ProcessTree::new();
        tree.scan();
        let me = std::process::id() as i32;
        let found = tree.descendants(me).contains(&(child.id() as i32));
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "the child was not found below this process");
        tree.scan();
        assert!(!tree.descendants(me).contains(&(child.id() as i32)));
        assert!(image(me).is_some_and(|s| s.contains('|')));
        assert!(last_pid().is_some_and(|p| p > 0));
    }
}
