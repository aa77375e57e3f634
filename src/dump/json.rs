//! `tachyon dump --json`: one JSON document per dump, for scripts. Its
//! shape is versioned (`"version": 1`) and written down in
//! `docs/formats.md`; fields are only ever added within a version.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::{Dumped, FrameLocals, SourceReader, status_labels, values};
use crate::model::{FrameKind, FrameTable, ThreadSample, status};
use crate::opcodes::OpTable;

/// The version of the document's shape.
pub const VERSION: u32 = 1;

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    version: u32,
    pid: i32,
    python: String,
    /// UTC, RFC 3339, milliseconds.
    time: String,
    unix_time: f64,
    async_aware: bool,
    /// Per thread (not async-aware); empty otherwise.
    threads: Vec<Thread<'a>>,
    /// Per leaf task (async-aware); empty otherwise.
    tasks: Vec<Task<'a>>,
}

#[derive(Serialize)]
struct Thread<'a> {
    tid: u64,
    name: Option<&'a str>,
    interpreter_id: i64,
    status: Status,
    /// The reference's words for `status`, as the text dump shows them.
    labels: Vec<&'static str>,
    frames: Vec<Frame<'a>>,
    /// With `--locals`: the lock the thread waits for, where exactly
    /// known (3.14+); else `null`.
    waiting_for: Option<WaitingFor<'a>>,
}

/// A lock a thread waits for.
#[derive(Serialize)]
struct WaitingFor<'a> {
    /// `_thread.lock` or `_thread.RLock`.
    lock_type: &'static str,
    /// The lock's address (`id(lock)`).
    address: u64,
    locked: bool,
    /// An `RLock`'s owner: its `threading` ident, and, when the dump shows
    /// it, its tid and name.
    owner_ident: Option<u64>,
    owner_tid: Option<u64>,
    owner_name: Option<&'a str>,
}

#[derive(Serialize)]
struct Task<'a> {
    /// The leaf task's address in the target.
    task: u64,
    tid: u64,
    thread_name: Option<&'a str>,
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize)]
struct Status {
    main_thread: bool,
    has_gil: bool,
    on_cpu: bool,
    gil_requested: bool,
    has_exception: bool,
    /// The thread's state could not be read: the other flags say nothing.
    unknown: bool,
}

impl Status {
    fn of(bits: u32) -> Self {
        Status {
            main_thread: bits & status::MAIN_THREAD != 0,
            has_gil: bits & status::HAS_GIL != 0,
            on_cpu: bits & status::ON_CPU != 0,
            gil_requested: bits & status::GIL_REQUESTED != 0,
            has_exception: bits & status::HAS_EXCEPTION != 0,
            unknown: bits & status::UNKNOWN != 0,
        }
    }
}

/// One frame; absent facts are `null`.
#[derive(Serialize)]
struct Frame<'a> {
    /// `python`, `native`, `native_function` (`--native-frames`; its file
    /// and line are its source's when its module has debug information,
    /// else its file is the module), `gc`, `truncated`, `unreadable` or
    /// `task`.
    kind: &'static str,
    /// The function's qualified name, or the task's name.
    function: &'a str,
    file: Option<&'a str>,
    line: Option<i32>,
    end_line: Option<i32>,
    column: Option<i32>,
    end_column: Option<i32>,
    /// The source line, stripped of its indentation.
    source: Option<String>,
    /// With `--opcodes`: the instruction's name, and the instruction it
    /// specialises, if it is a specialised form.
    opcode: Option<String>,
    base_opcode: Option<String>,
    /// With `--locals` (Python frames): its arguments and other locals, in
    /// slot order; else `null`.
    locals: Option<Vec<serde_json::Value>>,
    /// Why this frame's locals could not be read, if they could not.
    locals_error: Option<String>,
}

fn kind_name(k: FrameKind) -> &'static str {
    match k {
        FrameKind::Python => "python",
        FrameKind::Gc => "gc",
        FrameKind::Native => "native",
        FrameKind::Truncated => "truncated",
        FrameKind::Unreadable => "unreadable",
        FrameKind::Task => "task",
        FrameKind::NativeFunction => "native_function",
    }
}

/// The dump as one JSON document, frames most recent call first.
pub fn format_json(d: &Dumped, src: &mut SourceReader, ops: Option<&OpTable>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut doc = Document {
        schema: "tachyon-dump",
        version: VERSION,
        pid: d.pid,
        python: d.python.clone(),
        time: rfc3339_millis(now.as_millis() as u64),
        unix_time: now.as_secs_f64(),
        async_aware: d.leaves.is_some(),
        threads: Vec::new(),
        tasks: Vec::new(),
    };
    let table = d.table;
    let name = |t: &ThreadSample| t.name.map(|n| table.str(n));
    for (i, t) in d.threads.iter().enumerate() {
        let frames = frames(d, i, src, ops);
        match d.leaves {
            Some(leaves) => doc.tasks.push(Task {
                task: leaves.get(i).copied().unwrap_or(0),
                tid: t.tid,
                thread_name: name(t),
                frames,
            }),
            None => doc.threads.push(Thread {
                tid: t.tid,
                name: name(t),
                interpreter_id: t.interpreter_id,
                status: Status::of(t.status),
                labels: status_labels(t.status),
                frames,
                waiting_for: d.wait_of(i).map(|w| {
                    let owner = w.owner.and_then(|o| d.threads.get(o));
                    WaitingFor {
                        lock_type: w.lock.kind.type_name(),
                        address: w.lock.addr,
                        locked: w.lock.locked,
                        owner_ident: w.lock.owner_ident,
                        owner_tid: owner.map(|o| o.tid),
                        owner_name: owner.and_then(name),
                    }
                }),
            }),
        }
    }
    // Serializing plain structs of strings and numbers cannot fail.
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// A frame's locals as the document holds them: (locals, error).
fn locals_json(l: Option<&FrameLocals>) -> (Option<Vec<serde_json::Value>>, Option<String>) {
    match l {
        None => (None, None),
        Some(Ok(l)) => (Some(l.iter().map(values::local_json).collect()), None),
        Some(Err(why)) => (None, Some(why.clone())),
    }
}

/// A stack's frames, most recent call first.
fn frames<'a>(
    d: &Dumped<'a>,
    i: usize,
    src: &mut SourceReader,
    ops: Option<&OpTable>,
) -> Vec<Frame<'a>> {
    let table: &'a FrameTable = d.table;
    d.threads[i]
        .frames
        .iter()
        .enumerate()
        .map(|(index, &id)| {
            let (locals, locals_error) = locals_json(d.locals_of(i, index));
            let f = table.frame(id);
            let file = f.file().filter(|_| f.kind != FrameKind::Task);
            let loc = f.location;
            let known = |v: i32| (v >= 0).then_some(v);
            let source = match (f.kind, file, loc) {
                (FrameKind::Python, Some(file), Some(l)) => src
                    .line(table.str(file), l.line)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
                _ => None,
            };
            Frame {
                kind: kind_name(f.kind),
                function: table.str(f.func),
                file: file.map(|s| table.str(s)),
                line: loc.and_then(|l| (l.line > 0).then_some(l.line)),
                end_line: loc.and_then(|l| (l.end_line > 0).then_some(l.end_line)),
                column: loc.and_then(|l| known(l.col)),
                end_column: loc.and_then(|l| known(l.end_col)),
                source,
                opcode: f.opcode.zip(ops).map(|(op, t)| t.name(op).into_owned()),
                base_opcode: f
                    .opcode
                    .zip(ops)
                    .and_then(|(op, t)| Some(t.name(t.base_of(op)?).into_owned())),
                locals,
                locals_error,
            }
        })
        .collect()
}

/// `ms` milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn rfc3339_millis(ms: u64) -> String {
    let (secs, ms) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard
/// Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29 12:34:56.789 UTC, a leap day.
        assert_eq!(
            rfc3339_millis(1_709_210_096_789),
            "2024-02-29T12:34:56.789Z"
        );
        assert_eq!(rfc3339_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
