//! Why the kernel refused to let tachyon read a process, from what this
//! machine shows: who tachyon is (user, capabilities, seccomp, security
//! label, Yama) and what the target is (owner, capabilities, command line).
//! A cause is named only when something here points to it.

/// Facts about one process, from `/proc/PID/status` and friends (all
/// readable without ptrace rights). Missing facts are `None`.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProcFacts {
    pub uid: Option<u32>,
    /// Effective capabilities (for tachyon) or permitted ones (for a target).
    pub caps: Option<u64>,
    /// 0 none, 1 strict, 2 filter.
    pub seccomp: Option<u32>,
    pub ppid: Option<i32>,
}

impl ProcFacts {
    fn read(pid: &str, caps_field: &str) -> ProcFacts {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            return ProcFacts::default();
        };
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        ProcFacts {
            uid: field("Uid:").and_then(|v| v.split_whitespace().nth(1)?.parse().ok()),
            caps: field(caps_field).and_then(|v| u64::from_str_radix(&v, 16).ok()),
            seccomp: field("Seccomp:").and_then(|v| v.parse().ok()),
            ppid: field("PPid:").and_then(|v| v.parse().ok()),
        }
    }
}

/// What tachyon itself runs with.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tracer {
    pub facts: ProcFacts,
    /// Yama's ptrace_scope, when Yama is there.
    pub yama: Option<u32>,
    /// An SELinux or AppArmor label that confines tachyon.
    pub confined_by: Option<String>,
}

/// The target's name and command line, as `/proc` shows them to anyone.
#[derive(Debug, Default, Clone)]
pub(crate) struct TargetView {
    pub pid: i32,
    pub facts: ProcFacts,
    pub comm: String,
    pub cmdline: String,
}

const CAP_SYS_PTRACE: u32 = 19;

/// The reason to put after "permission denied reading process PID: ".
pub(crate) fn why_denied(pid: i32) -> String {
    let label = std::fs::read_to_string("/proc/self/attr/current")
        .ok()
        .map(|l| {
            l.trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_owned()
        })
        .filter(|l| !l.is_empty() && !l.contains("unconfined"));
    let tracer = Tracer {
        facts: ProcFacts::read("self", "CapEff:"),
        yama: std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        confined_by: label,
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            let words: Vec<String> = b
                .split(|&c| c == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            words.join(" ")
        })
        .unwrap_or_default();
    let target = TargetView {
        pid,
        facts: ProcFacts::read(&pid.to_string(), "CapPrm:"),
        comm: std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
        cmdline,
    };
    explain(&tracer, &target)
}

/// The reason, from the facts: the cause the facts point to, then what the
/// target looks like when that matters (not Python by its name, the init).
pub(crate) fn explain(me: &Tracer, t: &TargetView) -> String {
    let mut why = cause(me, t);
    if let Some(note) = target_note(t) {
        why.push_str("; ");
        why.push_str(&note);
    }
    why
}

fn cause(me: &Tracer, t: &TargetView) -> String {
    let root = me.facts.uid == Some(0);
    let my_caps = me.facts.caps.unwrap_or(0);
    let has_ptrace = my_caps & (1 << CAP_SYS_PTRACE) != 0;
    // Capabilities the target holds and tachyon lacks: without
    // CAP_SYS_PTRACE, the kernel refuses a process holding any.
    let lacking = t.facts.caps.map(|c| c & !my_caps).unwrap_or(0);
    if me.yama == Some(3) {
        return "Yama ptrace_scope is 3, which disables ptrace for everyone until reboot".into();
    }
    if !has_ptrace {
        if !root && t.facts.uid.is_some() && t.facts.uid != me.facts.uid {
            return format!(
                "it belongs to user {} and tachyon runs as user {}: run tachyon as that user or with sudo",
                user_name(t.facts.uid.unwrap_or(0)),
                user_name(me.facts.uid.unwrap_or(0))
            );
        }
        match me.yama {
            Some(1) if !root => return "Yama ptrace_scope is 1 (only a parent may read its child): run tachyon with sudo, grant it the capability (sudo setcap cap_sys_ptrace+ep $(command -v tachyon)), or start the program with `tachyon run`".into(),
            Some(2) => return "Yama ptrace_scope is 2 (admin only): run tachyon with sudo or grant it CAP_SYS_PTRACE (sudo setcap cap_sys_ptrace+ep $(command -v tachyon))".into(),
            _ => {}
        }
        if lacking != 0 {
            return format!(
                "it holds capabilities tachyon lacks ({}) and tachyon has no CAP_SYS_PTRACE: give tachyon CAP_SYS_PTRACE (sudo, or in a container --cap-add SYS_PTRACE)",
                cap_names(lacking)
            );
        }
        return "tachyon has no CAP_SYS_PTRACE and the process is protected from its own user (made undumpable, or set-uid): run tachyon with sudo or grant it CAP_SYS_PTRACE".into();
    }
    if me.facts.seccomp == Some(2) {
        return "tachyon runs under a seccomp filter (as in a container), which can forbid reading another process: run the container with --cap-add SYS_PTRACE, or --security-opt seccomp=unconfined".into();
    }
    if let Some(label) = &me.confined_by {
        return format!(
            "tachyon has CAP_SYS_PTRACE but runs confined by the security label {label} (SELinux or AppArmor), whose policy refuses: run it unconfined, or allow ptrace in that policy"
        );
    }
    "tachyon has CAP_SYS_PTRACE and no seccomp filter or SELinux/AppArmor label, so the kernel's own checks pass: a sandbox around tachyon that /proc does not show refuses (Landlock, a BPF security module); run tachyon outside it".into()
}

/// What the target looks like, when it does not look like Python or is
/// the machine's init: the user may have the wrong PID.
fn target_note(t: &TargetView) -> Option<String> {
    let shown = if t.cmdline.is_empty() {
        t.comm.clone()
    } else {
        let mut s: String = t.cmdline.chars().take(40).collect();
        if t.cmdline.chars().count() > 40 {
            s.push_str("...");
        }
        s
    };
    let pythonish = [&t.comm, &t.cmdline]
        .iter()
        .any(|s| s.to_ascii_lowercase().contains("python"));
    let init = t.pid == 1 || t.facts.ppid == Some(0);
    match (init, pythonish) {
        (true, false) => Some(format!(
            "process {} is this machine's init ({shown}), whose command line names no Python: is it the PID you meant?",
            t.pid
        )),
        (true, true) => Some(format!(
            "process {} is this machine's init ({shown})",
            t.pid
        )),
        (false, false) if !shown.is_empty() => Some(format!(
            "its command line ({shown}) names no Python: is it the PID you meant?"
        )),
        _ => None,
    }
}

/// The names of the capabilities in `mask`, lower case as capabilities(7)
/// spells them without the prefix (at most a few, then "and N more").
fn cap_names(mask: u64) -> String {
    const NAMES: [&str; 41] = [
        "chown",
        "dac_override",
        "dac_read_search",
        "fowner",
        "fsetid",
        "kill",
        "setgid",
        "setuid",
        "setpcap",
        "linux_immutable",
        "net_bind_service",
        "net_broadcast",
        "net_admin",
        "net_raw",
        "ipc_lock",
        "ipc_owner",
        "sys_module",
        "sys_rawio",
        "sys_chroot",
        "sys_ptrace",
        "sys_pacct",
        "sys_admin",
        "sys_boot",
        "sys_nice",
        "sys_resource",
        "sys_time",
        "sys_tty_config",
        "mknod",
        "lease",
        "audit_write",
        "audit_control",
        "setfcap",
        "mac_override",
        "mac_admin",
        "syslog",
        "wake_alarm",
        "block_suspend",
        "audit_read",
        "perfmon",
        "bpf",
        "checkpoint_restore",
    ];
    let all: Vec<String> = (0..64)
        .filter(|b| mask & (1u64 << b) != 0)
        .map(|b| match NAMES.get(b) {
            Some(n) => format!("CAP_{}", n.to_ascii_uppercase()),
            None => format!("capability {b}"),
        })
        .collect();
    if all.len() > 4 {
        format!("{} and {} more", all[..4].join(", "), all.len() - 4)
    } else {
        all.join(", ")
    }
}

/// A user's name from /etc/passwd, else the number.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2)? == &uid.to_string().as_str()).then(|| f[0].to_owned())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(caps: u64, seccomp: u32) -> Tracer {
        Tracer {
            facts: ProcFacts {
                uid: Some(0),
                caps: Some(caps),
                seccomp: Some(seccomp),
                ppid: Some(5),
            },
            yama: None,
            confined_by: None,
        }
    }

    fn init(caps: u64) -> TargetView {
        TargetView {
            pid: 1,
            facts: ProcFacts {
                uid: Some(0),
                caps: Some(caps),
                seccomp: Some(0),
                ppid: Some(0),
            },
            comm: "process_api".into(),
            cmdline: "/process_api --firecracker-init".into(),
        }
    }

    #[test]
    fn seccomp_is_blamed_only_when_tachyon_runs_under_a_filter() {
        let all = (1u64 << 41) - 1;
        let mine = all & !(1 << 24);
        let free = explain(&root_with(mine, 0), &init(all));
        assert!(!free.contains("seccomp filter (as"), "{free}");
        assert!(free.contains("no seccomp filter"), "{free}");
        assert!(free.contains("this machine's init"), "{free}");
        assert!(free.contains("names no Python"), "{free}");
        let filtered = explain(&root_with(mine, 2), &init(all));
        assert!(
            filtered.contains("runs under a seccomp filter"),
            "{filtered}"
        );
    }

    #[test]
    fn missing_ptrace_rights_are_named_with_the_capabilities_lacking() {
        let all = (1u64 << 41) - 1;
        let mine = all & !(1 << CAP_SYS_PTRACE);
        let why = explain(&root_with(mine, 0), &init(all));
        assert!(why.contains("CAP_SYS_PTRACE"), "{why}");
        assert!(!why.contains("seccomp"), "{why}");
        assert_eq!(cap_names(1 << 24), "CAP_SYS_RESOURCE");
    }
}
