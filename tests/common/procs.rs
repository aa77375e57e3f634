//! What the tests read of other processes in `/proc`: parents, children,
//! threads and scheduler states. The tests read `/proc` themselves rather
//! than through tachyon's own process tree, so that they check it.

/// The fields of `/proc/PID/stat` after the command (`state ppid ...`);
/// the command, in parentheses, may hold spaces and `)`.
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(path).ok()?;
    let after = &s[s.rfind(')')? + 1..];
    Some(after.split_whitespace().map(String::from).collect())
}

/// The scheduler state letter of `pid` (`R`, `S`, `T` stopped, `t` in a
/// ptrace stop, `Z` a zombie...), or `None` once it is gone.
pub fn state(pid: i32) -> Option<char> {
    stat_fields(&format!("/proc/{pid}/stat"))?
        .first()?
        .chars()
        .next()
}

/// The parent of `pid`, from `/proc/PID/stat`.
pub fn ppid(pid: i32) -> Option<i32> {
    stat_fields(&format!("/proc/{pid}/stat"))?
        .get(1)?
        .parse()
        .ok()
}

/// Whether `pid` is there and not a zombie (nor dead).
pub fn alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| !matches!(s, 'Z' | 'X'))
}

/// Every process and its parent, as `/proc` lists them now.
fn all_parents() -> Vec<(i32, i32)> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(|p| Some((p, ppid(p)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The processes whose parent is `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    all_parents()
        .into_iter()
        .filter(|(_, pp)| *pp == pid)
        .map(|(c, _)| c)
        .collect()
}

/// Every process below `root` (not `root` itself), parents first.
pub fn descendants(root: i32) -> Vec<i32> {
    let all = all_parents();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}

/// The thread ids of `pid` (none once it is gone).
pub fn tids(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// How many threads `pid` has (0 once it is gone).
pub fn threads(pid: i32) -> usize {
    tids(pid).len()
}

/// The state letter of every thread of `pid` still there, by thread id.
pub fn thread_states(pid: i32) -> Vec<(i32, char)> {
    tids(pid)
        .into_iter()
        .filter_map(|tid| {
            let f = stat_fields(&format!("/proc/{pid}/task/{tid}/stat"))?;
            Some((tid, f.first()?.chars().next()?))
        })
        .collect()
}

/// The value of field `name` (`TracerPid`, `State`, `Uid`...) in
/// `/proc/PID/status`, trimmed; `None` when the process is gone.
pub fn status_field(pid: i32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let prefix = format!("{name}:");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_string())
}
