//! From the aggregate to what one screen shows: per row (function, file,
//! line) its self and cumulative samples for all threads or one, filtered
//! and sorted; the header's numbers; each thread's share and state; and the
//! trend of each row's share; with `--opcodes`, the instructions each row
//! was at when it was the leaf.
//!
//! This is the heavy part (a walk over every distinct stack), and it runs
//! on the view's thread, at its redraw rate, never on the sampler's.

use std::time::{Duration, Instant};

use foldhash::{HashMap, HashMapExt};

use crate::model::status;
use crate::opcodes::OpTable;

use super::aggregate::{Aggregate, Ended, StateCounts};
use crate::collect::tree::short_file;

/// What the table is sorted by (the reference's order of sort keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortBy {
    /// Samples with the row at the top of the stack.
    #[default]
    SelfSamples,
    SelfPct,
    SelfTime,
    CumPct,
    CumTime,
}

impl SortBy {
    const ALL: [SortBy; 5] = [
        SortBy::SelfSamples,
        SortBy::SelfPct,
        SortBy::SelfTime,
        SortBy::CumPct,
        SortBy::CumTime,
    ];

    fn index(self) -> usize {
        SortBy::ALL.iter().position(|&s| s == self).unwrap_or(0)
    }

    pub fn next(self) -> SortBy {
        SortBy::ALL[(self.index() + 1) % SortBy::ALL.len()]
    }

    pub fn prev(self) -> SortBy {
        SortBy::ALL[(self.index() + SortBy::ALL.len() - 1) % SortBy::ALL.len()]
    }

    pub fn label(self) -> &'static str {
        match self {
            SortBy::SelfSamples => "Self samples",
            SortBy::SelfPct => "Self %",
            SortBy::SelfTime => "Self time",
            SortBy::CumPct => "Cumulative %",
            SortBy::CumTime => "Cumulative time",
        }
    }

    /// Sorted by cumulative rather than self samples.
    pub fn cumulative(self) -> bool {
        matches!(self, SortBy::CumPct | SortBy::CumTime)
    }
}

/// Which rows to show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewOptions {
    pub sort: SortBy,
    /// One thread's samples only; `None`: every thread's.
    pub thread: Option<u64>,
    /// Rows whose function or file contains this (case-insensitive).
    pub filter: Option<String>,
    /// The most rows kept (the screen shows fewer).
    pub limit: usize,
    /// Count each row's instructions (`--opcodes`).
    pub opcodes: bool,
}

/// A row's share rising or falling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trend {
    #[default]
    Flat,
    Up,
    Down,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The row's key in the aggregate: the same location keeps it across
    /// screens (a selection follows it).
    pub key: u32,
    pub func: String,
    pub file: String,
    pub line: i32,
    pub self_samples: u64,
    pub cum_samples: u64,
    pub trend: Trend,
    /// With `--opcodes`: the instructions its self samples were at, most
    /// samples first (samples whose instruction was not read are in none).
    pub ops: Vec<OpCount>,
}

/// One instruction of a row, as its leaf.
#[derive(Debug, Clone, PartialEq)]
pub struct OpCount {
    /// `NAME`, or `NAME (BASE)` for a specialised form.
    pub name: String,
    pub specialised: bool,
    pub samples: u64,
}

impl Row {
    /// Self samples with an instruction.
    pub fn op_samples(&self) -> u64 {
        self.ops.iter().map(|o| o.samples).sum()
    }
}

/// Cells of an instruction's bar in the panel.
pub const OP_BAR: usize = 20;

/// One line of the instruction panel: the instruction, its share of the
/// row's samples with an instruction, and its bar's filled cells (scaled
/// to the most sampled instruction, at least one for any sample).
#[derive(Debug, Clone, PartialEq)]
pub struct OpLine<'a> {
    pub op: &'a OpCount,
    pub pct: f64,
    pub filled: usize,
}

/// The panel's lines for `row`, at most `room` of them: all of its
/// instructions if they fit, else `room - 1` and the number left out.
pub fn op_lines(row: &Row, room: usize) -> (Vec<OpLine<'_>>, usize) {
    let total = row.op_samples();
    let max = row.ops.iter().map(|o| o.samples).max().unwrap_or(0);
    let shown = if row.ops.len() <= room {
        row.ops.len()
    } else {
        room.saturating_sub(1)
    };
    let lines = row
        .ops
        .iter()
        .take(shown)
        .map(|op| OpLine {
            op,
            pct: if total == 0 {
                0.0
            } else {
                op.samples as f64 * 100.0 / total as f64
            },
            filled: if max == 0 || op.samples == 0 {
                0
            } else {
                ((op.samples as u128 * OP_BAR as u128 / max as u128) as usize).max(1)
            },
        })
        .collect();
    (lines, row.ops.len() - shown)
}

/// One thread of the thread list.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub tid: u64,
    pub name: Option<String>,
    /// Samples it was in.
    pub samples: u64,
    /// Its state in the last sample it was in, in words.
    pub state: &'static str,
}

/// Everything one screen shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub pid: i32,
    pub interval_us: u64,
    /// Since the first sample (or the last reset), to the end if ended.
    pub elapsed: Duration,
    pub good: u64,
    pub failed: u64,
    /// What percentages are of: the thread's samples when one is shown;
    /// for all threads the good samples, or, when several threads were
    /// sampled at once (`-a`), the thread samples with a stack, so that
    /// the shares add up to 100% rather than each thread's reading 100%.
    pub denominator: u64,
    /// The thread list's percentages are of this: the listed threads'
    /// samples together (each thread's share of them).
    pub thread_samples: u64,
    /// The Python sampled reports threads waiting for the GIL (3.13+);
    /// else the header says n/a.
    pub gil_wait: bool,
    /// The states of the threads shown.
    pub states: StateCounts,
    /// The samples are asyncio tasks: `states` holds only GC samples.
    pub tasks: bool,
    /// Rows with samples in this view, before the filter.
    pub functions: usize,
    /// ... of which some were at the top of a stack.
    pub executing: usize,
    /// Rows that pass the filter.
    pub shown: usize,
    /// The three functions with the most self samples (after the
    /// filter), the rows of one function (its lines) together; a name
    /// that two files define carries its file.
    pub top: Vec<(String, u64)>,
    pub rows: Vec<Row>,
    pub threads: Vec<ThreadRow>,
    pub ended: Option<Ended>,
}

impl Snapshot {
    /// Samples attempted per second.
    pub fn rate_hz(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            (self.good + self.failed) as f64 / s
        } else {
            0.0
        }
    }

    /// `n` samples as a percentage of the view's samples.
    pub fn pct(&self, n: u64) -> f64 {
        if self.denominator == 0 {
            0.0
        } else {
            n as f64 * 100.0 / self.denominator as f64
        }
    }

    /// `n` samples as seconds at the requested interval.
    pub fn seconds(&self, n: u64) -> f64 {
        n as f64 * self.interval_us as f64 / 1e6
    }
}

/// How often a trend is measured: a row's share over the last window
/// against its share before.
const TREND_WINDOW: Duration = Duration::from_secs(1);
/// A change smaller than this (in percentage points) is no trend.
const TREND_MIN_PP: f64 = 2.0;
/// A window with fewer samples says nothing.
const TREND_MIN_SAMPLES: u64 = 20;

/// Each row's self samples at the last trend measurement.
#[derive(Debug, Default)]
pub struct Trends {
    /// What the marks were measured on: (reset generation, thread).
    basis: Option<(u64, Option<u64>)>,
    at: Option<Instant>,
    denominator: u64,
    self_samples: Vec<u64>,
    marks: Vec<Trend>,
}

impl Trends {
    /// Measure again if a window passed; returns the marks by row key.
    fn update(
        &mut self,
        basis: (u64, Option<u64>),
        now: Instant,
        denominator: u64,
        self_samples: &[u64],
    ) -> &[Trend] {
        if self.basis != Some(basis) {
            *self = Trends {
                basis: Some(basis),
                ..Trends::default()
            };
        }
        let due = self
            .at
            .is_none_or(|at| now.duration_since(at) >= TREND_WINDOW);
        if due {
            self.marks = vec![Trend::Flat; self_samples.len()];
            let window = denominator.saturating_sub(self.denominator);
            if self.denominator > 0 && window >= TREND_MIN_SAMPLES {
                for (k, &now_n) in self_samples.iter().enumerate() {
                    let before_n = self.self_samples.get(k).copied().unwrap_or(0);
                    let before = before_n as f64 * 100.0 / self.denominator as f64;
                    let recent = now_n.saturating_sub(before_n) as f64 * 100.0 / window as f64;
                    self.marks[k] = if recent > before + TREND_MIN_PP {
                        Trend::Up
                    } else if recent + TREND_MIN_PP < before {
                        Trend::Down
                    } else {
                        Trend::Flat
                    };
                }
            }
            self.at = Some(now);
            self.denominator = denominator;
            self.self_samples = self_samples.to_vec();
        }
        &self.marks
    }
}

/// The state a thread was in at its last sample, in words.
fn state_word(bits: u32, gc: bool) -> &'static str {
    if gc {
        "in GC"
    } else if bits & status::HAS_EXCEPTION != 0 {
        "exception"
    } else if bits & status::HAS_GIL != 0 {
        "holds GIL"
    } else if bits & status::GIL_REQUESTED != 0 {
        "waits for GIL"
    } else {
        "released GIL"
    }
}

/// The three functions with the most self samples among rows `keep`: the
/// rows (lines) of one function and file counted together, since a user
/// asks which function is hot; ties go to the function seen first.
fn top_functions(agg: &Aggregate, keep: &[usize], self_n: &[u64]) -> Vec<(String, u64)> {
    let mut by: Vec<(&str, &str, u64, usize)> = Vec::new();
    for &k in keep.iter().filter(|&&k| self_n[k] > 0) {
        let key = &agg.keys[k];
        match by
            .iter_mut()
            .find(|(f, file, _, _)| *f == &*key.func && *file == &*key.file)
        {
            Some(e) => e.2 += self_n[k],
            None => by.push((&key.func, &key.file, self_n[k], k)),
        }
    }
    by.sort_by(|a, b| b.2.cmp(&a.2).then(a.3.cmp(&b.3)));
    by.truncate(3);
    by.iter()
        .map(|&(func, file, n, _)| {
            let twice = by.iter().filter(|e| e.0 == func).count() > 1;
            let name = if twice {
                format!("{func} ({})", short_file(file))
            } else {
                func.to_string()
            };
            (name, n)
        })
        .collect()
}

/// Each row's leaf instructions (`--opcodes`) in the thread shown (or all):
/// (the opcode table of the process it was sampled in, opcode) → samples.
fn leaf_ops_by_row(agg: &Aggregate, opts: &ViewOptions) -> Vec<Vec<(Named, u64)>> {
    if !opts.opcodes {
        return Vec::new();
    }
    let mut by: HashMap<(u32, u16, u8), u64> = HashMap::new();
    for (k, &count) in &agg.leaf_ops {
        if opts.thread.is_some_and(|t| t != k.tid) {
            continue;
        }
        if let Some(&row) = agg.frame_key.get(k.frame as usize) {
            *by.entry((row, k.table, k.op)).or_insert(0) += count;
        }
    }
    let mut ops_of: Vec<Vec<(Named, u64)>> = vec![Vec::new(); agg.keys.len()];
    for ((row, table, op), count) in by {
        let table = agg.tables.get(table as usize).copied().flatten();
        if let Some(v) = ops_of.get_mut(row as usize) {
            v.push((Named { table, op }, count));
        }
    }
    ops_of
}

/// An opcode byte and the table of the Python it was read from.
#[derive(Debug, Clone, Copy)]
struct Named {
    table: Option<&'static OpTable>,
    op: u8,
}

/// A row's instructions, most samples first (then by name), each named
/// with the table of the process it was sampled in (a byte the table does
/// not know shows as `<N>`); the same instruction from two processes is
/// one line.
fn op_counts(v: &mut [(Named, u64)]) -> Vec<OpCount> {
    let mut out: Vec<OpCount> = Vec::new();
    for &(n, samples) in v.iter() {
        let name = n
            .table
            .map_or_else(|| format!("<{}>", n.op), |t| t.format(n.op));
        match out.iter_mut().find(|o| o.name == name) {
            Some(o) => o.samples += samples,
            None => out.push(OpCount {
                name,
                specialised: n.table.is_some_and(|t| t.base_of(n.op).is_some()),
                samples,
            }),
        }
    }
    out.sort_unstable_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
    out
}

/// Each row's samples as the leaf (`self_n`) and anywhere in the stack
/// (`cum_n`, once per stack however often it recurs there), counted over
/// the shown thread's stacks (every thread's without one).
struct RowCounts {
    self_n: Vec<u64>,
    cum_n: Vec<u64>,
    /// Threads with a stack, in the order first seen: one that never had
    /// one (a thread state whose OS thread has not started yet) is not
    /// listed.
    with_stacks: Vec<u64>,
}

/// Count every row of `agg` for `thread` (all threads when `None`).
fn count_rows(agg: &Aggregate, thread: Option<u64>) -> RowCounts {
    let n = agg.keys.len();
    let mut c = RowCounts {
        self_n: vec![0; n],
        cum_n: vec![0; n],
        with_stacks: Vec::new(),
    };
    // The stack's number marks the rows already counted in it.
    let mut stamp = vec![0usize; n];
    let mut last_tid = None;
    for (i, cell) in agg.counts.cells().iter().enumerate() {
        if last_tid != Some(cell.tid) && !c.with_stacks.contains(&cell.tid) {
            c.with_stacks.push(cell.tid);
        }
        last_tid = Some(cell.tid);
        if thread.is_some_and(|t| t != cell.tid) {
            continue;
        }
        for (depth, &f) in agg.counts.stack(cell.stack).iter().enumerate() {
            let Some(&k) = agg.frame_key.get(f as usize) else {
                continue;
            };
            let k = k as usize;
            if depth == 0 {
                c.self_n[k] += cell.count;
            }
            if stamp[k] != i + 1 {
                stamp[k] = i + 1;
                c.cum_n[k] += cell.count;
            }
        }
    }
    c
}

/// The rows seen at all: how many functions (rows) there are, how many
/// of them were a leaf, and the ones `filter` lets through (a case-blind
/// match of function or file), in row order.
fn rows_seen(agg: &Aggregate, c: &RowCounts, filter: Option<&str>) -> (usize, usize, Vec<usize>) {
    let needle = filter.map(str::to_lowercase);
    let mut keep: Vec<usize> = Vec::new();
    let (mut functions, mut executing) = (0, 0);
    for k in (0..agg.keys.len()).filter(|&k| c.cum_n[k] > 0) {
        functions += 1;
        executing += usize::from(c.self_n[k] > 0);
        let key = &agg.keys[k];
        let passes = needle.as_ref().is_none_or(|s| {
            key.func.to_lowercase().contains(s) || key.file.to_lowercase().contains(s)
        });
        if passes {
            keep.push(k);
        }
    }
    (functions, executing, keep)
}

/// Order rows by the sort column, then the other, then first seen.
fn sort_rows(keep: &mut [usize], sort: SortBy, c: &RowCounts) {
    let (first, second) = if sort.cumulative() {
        (&c.cum_n, &c.self_n)
    } else {
        (&c.self_n, &c.cum_n)
    };
    keep.sort_by(|&a, &b| {
        first[b]
            .cmp(&first[a])
            .then(second[b].cmp(&second[a]))
            .then(a.cmp(&b))
    });
}

/// The table's rows: the first `opts.limit` of `keep`, as shown.
fn table_rows(
    agg: &Aggregate,
    opts: &ViewOptions,
    keep: &[usize],
    c: &RowCounts,
    marks: &[Trend],
) -> Vec<Row> {
    let mut ops_of = leaf_ops_by_row(agg, opts);
    keep.iter()
        .take(opts.limit)
        .map(|&k| {
            let key = &agg.keys[k];
            let ops = match ops_of.get_mut(k) {
                Some(v) => op_counts(v),
                None => Vec::new(),
            };
            Row {
                key: k as u32,
                ops,
                func: key.func.to_string(),
                file: short_file(&key.file).to_string(),
                line: key.line,
                self_samples: c.self_n[k],
                cum_samples: c.cum_n[k],
                trend: marks.get(k).copied().unwrap_or_default(),
            }
        })
        .collect()
}

/// The threads listed (those with a stack), each with its state word.
fn thread_rows(agg: &Aggregate, with_stacks: &[u64]) -> Vec<ThreadRow> {
    agg.threads
        .iter()
        .filter(|t| with_stacks.contains(&t.tid))
        .map(|t| ThreadRow {
            tid: t.tid,
            name: t.name.clone(),
            samples: t.states.seen,
            state: if t.states.seen == 0 {
                "no samples"
            } else if t.last_sample < agg.good {
                "not sampled"
            } else if agg.tasks {
                if t.last_gc { "in GC" } else { "runs tasks" }
            } else {
                state_word(t.last_status, t.last_gc)
            },
        })
        .collect()
}

/// How long the run has been sampled: to its end once it ended.
fn elapsed(agg: &Aggregate, now: Instant) -> Duration {
    match (agg.since, agg.ended) {
        (Some(s), Some((e, _))) => e.saturating_duration_since(s),
        (Some(s), None) => now.saturating_duration_since(s),
        (None, _) => Duration::ZERO,
    }
}

/// Compute the screen for `opts` from `agg` (read under its lock).
pub fn snapshot(
    agg: &Aggregate,
    opts: &ViewOptions,
    now: Instant,
    trends: &mut Trends,
) -> Snapshot {
    let counts = count_rows(agg, opts.thread);
    let thread = opts
        .thread
        .and_then(|tid| agg.threads.iter().find(|t| t.tid == tid));
    let (denominator, states) = match thread {
        Some(t) => (t.states.seen, t.states),
        None => (agg.good.max(agg.counts.total()), agg.states),
    };
    let marks = trends.update(
        (agg.generation, opts.thread),
        now,
        denominator,
        &counts.self_n,
    );
    let (functions, executing, mut keep) = rows_seen(agg, &counts, opts.filter.as_deref());
    let shown = keep.len();
    let top = top_functions(agg, &keep, &counts.self_n);
    sort_rows(&mut keep, opts.sort, &counts);
    let rows = table_rows(agg, opts, &keep, &counts, marks);
    let threads = thread_rows(agg, &counts.with_stacks);
    Snapshot {
        pid: agg.pid,
        interval_us: agg.interval_us,
        elapsed: elapsed(agg, now),
        good: agg.good,
        failed: agg.failed,
        denominator,
        thread_samples: threads.iter().map(|t| t.samples).sum(),
        gil_wait: agg.gil_wait,
        states,
        tasks: agg.tasks,
        functions,
        executing,
        shown,
        top,
        rows,
        threads,
        ended: agg.ended.map(|(_, how)| how),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::aggregate::{LeafOp, Pending, RowKey};

    /// Frames 0 `leaf`, 1 `mid`, 2 `main`, 3 `worker`, 4 `other`.
    fn agg() -> Aggregate {
        let mut a = Aggregate::new(1, 1000);
        let mut p = Pending::default();
        for f in ["leaf", "mid", "main", "worker", "other"] {
            p.frames.push(RowKey {
                func: f.into(),
                file: format!("{f}.py").into(),
                line: 1,
            });
        }
        // Thread 1: leaf <- mid <- main, 6 times; mid <- mid <- main
        // (recursion) twice.
        p.counts.add_stack(1, &[0, 1, 2], 6);
        p.counts.add_stack(1, &[1, 1, 2], 2);
        // Thread 2: other <- worker, 4 times.
        p.counts.add_stack(2, &[4, 3], 4);
        // Thread 3: no stack in any sample.
        for (tid, n) in [(1, 8), (2, 4), (3, 8)] {
            let d = p.thread(tid);
            for _ in 0..n {
                d.states.add(status::HAS_GIL, false);
            }
            d.last_sample = 8;
            d.last_status = status::HAS_GIL;
        }
        p.good = 8;
        a.merge(&mut p);
        a
    }

    fn opts(sort: SortBy, thread: Option<u64>, filter: Option<&str>) -> ViewOptions {
        ViewOptions {
            sort,
            thread,
            filter: filter.map(str::to_string),
            limit: 100,
            opcodes: false,
        }
    }

    fn names(s: &Snapshot) -> Vec<&str> {
        s.rows.iter().map(|r| r.func.as_str()).collect()
    }

    #[test]
    fn task_samples_name_no_thread_state() {
        // The same samples, as --async-aware gives them: the threads' rows
        // say they run tasks, not that they released the GIL.
        let mut a = agg().with_tasks(true);
        a.threads.iter_mut().for_each(|t| t.last_status = 0);
        let s = snapshot(
            &a,
            &opts(SortBy::SelfSamples, None, None),
            Instant::now(),
            &mut Trends::default(),
        );
        assert!(s.tasks);
        let states: Vec<&str> = s.threads.iter().map(|t| t.state).collect();
        assert_eq!(states, ["runs tasks", "runs tasks"]);
        let plain = snapshot(
            &agg(),
            &opts(SortBy::SelfSamples, None, None),
            Instant::now(),
            &mut Trends::default(),
        );
        assert!(!plain.tasks);
        assert!(plain.threads.iter().all(|t| t.state == "holds GIL"));
    }

    #[test]
    fn rows_count_self_and_cumulative_once_per_stack_and_sort_by_either() {
        let a = agg();
        let now = Instant::now();
        let mut t = Trends::default();
        let s = snapshot(&a, &opts(SortBy::SelfSamples, None, None), now, &mut t);
        assert_eq!(names(&s), ["leaf", "other", "mid", "main", "worker"]);
        let mid = &s.rows[2];
        assert_eq!(
            (mid.self_samples, mid.cum_samples),
            (2, 8),
            "recursion once"
        );
        assert_eq!((s.functions, s.executing, s.shown), (5, 3, 5));
        assert_eq!(s.top[0], ("leaf".to_string(), 6));
        // Two threads sampled at once: of their 12 stacks, not the 8
        // samples.
        assert_eq!(s.denominator, 12);
        assert!((s.pct(6) - 50.0).abs() < 1e-9);

        let s = snapshot(&a, &opts(SortBy::CumTime, None, None), now, &mut t);
        assert_eq!(names(&s), ["mid", "main", "leaf", "other", "worker"]);
    }

    #[test]
    fn a_thread_view_counts_that_thread_against_its_own_samples() {
        let a = agg();
        let mut t = Trends::default();
        let s = snapshot(
            &a,
            &opts(SortBy::SelfSamples, Some(2), None),
            Instant::now(),
            &mut t,
        );
        assert_eq!(names(&s), ["other", "worker"]);
        assert_eq!(s.denominator, 4);
        assert_eq!(s.pct(4), 100.0);
        assert_eq!(s.threads.len(), 2, "a thread without a stack is not listed");
        assert_eq!(s.threads[1].state, "holds GIL");
    }

    #[test]
    fn the_filter_matches_function_or_file_whatever_the_case() {
        let a = agg();
        let mut t = Trends::default();
        let now = Instant::now();
        let s = snapshot(
            &a,
            &opts(SortBy::SelfSamples, None, Some("WORK")),
            now,
            &mut t,
        );
        assert_eq!(names(&s), ["worker"]);
        assert_eq!((s.functions, s.shown), (5, 1));
        let s = snapshot(
            &a,
            &opts(SortBy::SelfSamples, None, Some("leaf.py")),
            now,
            &mut t,
        );
        assert_eq!(names(&s), ["leaf"]);
    }

    #[test]
    fn trends_mark_a_rising_and_a_falling_share() {
        let mut a = agg();
        let mut t = Trends::default();
        let o = opts(SortBy::SelfSamples, None, None);
        let t0 = Instant::now();
        let s = snapshot(&a, &o, t0, &mut t);
        assert!(
            s.rows.iter().all(|r| r.trend == Trend::Flat),
            "no window yet"
        );
        // A window in which only `other` runs: it rises, `leaf` falls.
        let mut p = Pending::default();
        p.counts.add_stack(2, &[4, 3], 40);
        p.good = 40;
        a.merge(&mut p);
        let s = snapshot(&a, &o, t0 + TREND_WINDOW, &mut t);
        let trend = |f: &str| s.rows.iter().find(|r| r.func == f).unwrap().trend;
        assert_eq!(trend("other"), Trend::Up);
        assert_eq!(trend("leaf"), Trend::Down);
        // A reset forgets them.
        a.reset(t0);
        let s = snapshot(&a, &o, t0 + 2 * TREND_WINDOW, &mut t);
        assert!(s.rows.iter().all(|r| r.trend == Trend::Flat));
    }

    /// Count `n` samples of thread `tid` at `frames` in a batch, as the
    /// collector does: the stack, and its leaf's instruction (the frame's
    /// opcode) read with opcode table `table`.
    fn stack(p: &mut Pending, tid: u64, frames: &[u32], n: u64, table: u16) {
        p.counts.add_stack(tid, frames, n);
        // Frames of this batch are numbered from 0 (one batch per test).
        if let Some(Some(op)) = p.ops.get(frames[0] as usize) {
            let k = LeafOp {
                tid,
                frame: frames[0],
                table,
                op: *op,
            };
            *p.leaf_ops.entry(k).or_insert(0) += n;
        }
    }

    #[test]
    fn instructions_are_named_with_the_table_of_the_process_they_came_from() {
        // `run` followed from a 3.13 process into a 3.15 one; both ran the
        // same line at the same byte, interned as one frame: 3.13's and
        // 3.15's names for that byte differ, and each sample is named with
        // its own process's.
        let t13 = crate::opcodes::table(3, 13).unwrap();
        let t15 = crate::opcodes::table(3, 15).unwrap();
        let byte = (0..=255u8)
            .find(|&b| {
                let (a, b2) = (t13.format(b), t15.format(b));
                !a.starts_with('<') && !b2.starts_with('<') && a != b2
            })
            .expect("a byte the two versions name differently");
        let mut a = Aggregate::new(1, 1000).with_opcodes(Some(t13));
        let mut p = Pending::default();
        p.frames.push(RowKey {
            func: "hot".into(),
            file: "w.py".into(),
            line: 3,
        });
        p.ops.push(Some(byte));
        p.pythons.push(crate::live::aggregate::PythonInfo::new(
            crate::offsets::PyVersion::from_hex(0x030d00f0),
            false,
        ));
        stack(&mut p, 1, &[0], 5, 1);
        p.pythons.push(crate::live::aggregate::PythonInfo::new(
            crate::offsets::PyVersion::from_hex(0x030f00f0),
            false,
        ));
        stack(&mut p, 1, &[0], 3, 2);
        p.good = 8;
        a.merge(&mut p);
        let mut o = opts(SortBy::SelfSamples, None, None);
        o.opcodes = true;
        let s = snapshot(&a, &o, Instant::now(), &mut Trends::default());
        let got: Vec<(String, u64)> = s.rows[0]
            .ops
            .iter()
            .map(|o| (o.name.clone(), o.samples))
            .collect();
        assert_eq!(got, [(t13.format(byte), 5), (t15.format(byte), 3)]);
        assert!(s.gil_wait, "3.15 reports GIL waits");
    }

    #[test]
    fn several_threads_share_the_percentages_and_a_function_is_one_top_entry() {
        // -a in wall mode: two threads in every one of 10 samples. Thread 1
        // at two lines of `iterencode`, thread 2 waiting in `wait`.
        let mut a = Aggregate::new(1, 1000);
        let mut p = Pending::default();
        for (f, line) in [("iterencode", 10), ("iterencode", 20), ("wait", 5)] {
            p.frames.push(RowKey {
                func: f.into(),
                file: if f == "wait" {
                    "threading.py"
                } else {
                    "json/encoder.py"
                }
                .into(),
                line,
            });
        }
        p.counts.add_stack(1, &[0], 6);
        p.counts.add_stack(1, &[1], 4);
        p.counts.add_stack(2, &[2], 10);
        for tid in [1, 2] {
            let d = p.thread(tid);
            for _ in 0..10 {
                d.states.add(0, false);
            }
            d.last_sample = 10;
        }
        p.good = 10;
        p.pythons.push(crate::live::aggregate::PythonInfo::new(
            crate::offsets::PyVersion::from_hex(0x030b00f0),
            false,
        ));
        a.merge(&mut p);
        let s = snapshot(
            &a,
            &opts(SortBy::SelfSamples, None, None),
            Instant::now(),
            &mut Trends::default(),
        );
        // Shares of the thread samples: 50% each, not 100% each.
        assert_eq!(s.denominator, 20);
        assert_eq!(s.pct(10), 50.0);
        assert_eq!(s.thread_samples, 20);
        // `iterencode` once, its two lines together.
        assert_eq!(
            s.top,
            [("iterencode".to_string(), 10), ("wait".to_string(), 10)]
        );
        // 3.11 cannot tell a thread waiting for the GIL.
        assert!(!s.gil_wait);
    }

    #[test]
    fn with_opcodes_a_row_counts_the_instructions_it_was_at_as_the_leaf() {
        let table = crate::opcodes::table(3, 15).unwrap();
        let op = |name: &str| table.names.iter().position(|n| *n == name).unwrap() as u8;
        let (add, store, call) = (op("BINARY_OP_ADD_INT"), op("STORE_FAST"), op("CALL"));
        let mut a = Aggregate::new(1, 1000).with_opcodes(Some(table));
        let mut p = Pending::default();
        // Frames: 0 `hot` line 3 at the add, 1 the same line at the store,
        // 2 `main` at a call, 3 `hot` line 3 whose instruction was not read.
        for (f, o) in [
            ("hot", Some(add)),
            ("hot", Some(store)),
            ("main", Some(call)),
            ("hot", None),
        ] {
            p.frames.push(RowKey {
                func: f.into(),
                file: "w.py".into(),
                line: if f == "hot" { 3 } else { 9 },
            });
            p.ops.push(o);
        }
        stack(&mut p, 1, &[0, 2], 5, 0);
        stack(&mut p, 1, &[1, 2], 3, 0);
        stack(&mut p, 1, &[3, 2], 2, 0);
        // `hot` below the leaf: its instruction is not counted for it.
        stack(&mut p, 1, &[2, 0], 7, 0);
        stack(&mut p, 2, &[1, 2], 4, 0);
        p.good = 21;
        a.merge(&mut p);
        assert_eq!(a.frame_op, [Some(add), Some(store), Some(call), None]);

        let mut t = Trends::default();
        let now = Instant::now();
        let mut o = opts(SortBy::SelfSamples, None, None);
        let s = snapshot(&a, &o, now, &mut t);
        assert!(
            s.rows.iter().all(|r| r.ops.is_empty()),
            "not without --opcodes"
        );
        o.opcodes = true;
        let s = snapshot(&a, &o, now, &mut t);
        let ops = |s: &Snapshot, f: &str| -> Vec<(String, bool, u64)> {
            let r = s.rows.iter().find(|r| r.func == f).unwrap();
            r.ops
                .iter()
                .map(|o| (o.name.clone(), o.specialised, o.samples))
                .collect()
        };
        assert_eq!(
            ops(&s, "hot"),
            [
                ("STORE_FAST".to_string(), false, 7),
                ("BINARY_OP_ADD_INT (BINARY_OP)".to_string(), true, 5)
            ]
        );
        let hot = s.rows.iter().find(|r| r.func == "hot").unwrap();
        assert_eq!((hot.self_samples, hot.op_samples()), (14, 12));
        assert_eq!(ops(&s, "main"), [("CALL".to_string(), false, 7)]);
        // Rows keep their key from screen to screen.
        assert_eq!(hot.key, a.frame_key[0]);

        // One thread's view: that thread's instructions only.
        o.thread = Some(2);
        let s = snapshot(&a, &o, now, &mut t);
        assert_eq!(ops(&s, "hot"), [("STORE_FAST".to_string(), false, 4)]);

        // Unknown bytes (an unknown table) show their number.
        let mut b = Aggregate::new(1, 1000);
        let mut p = Pending::default();
        p.frames.push(RowKey {
            func: "f".into(),
            file: "w.py".into(),
            line: 1,
        });
        p.ops.push(Some(255));
        stack(&mut p, 1, &[0], 1, 0);
        b.merge(&mut p);
        let s = snapshot(&b, &o, now, &mut t);
        assert!(s.rows.is_empty(), "thread 2 has no samples here");
        o.thread = None;
        let s = snapshot(&b, &o, now, &mut t);
        assert_eq!(ops(&s, "f"), [("<255>".to_string(), false, 1)]);

        // A reset forgets them with the counts.
        a.reset(now);
        let s = snapshot(&a, &o, now, &mut t);
        assert!(s.rows.is_empty());
    }

    #[test]
    fn the_panel_lines_give_each_instruction_its_share_and_bar() {
        let op = |name: &str, samples| OpCount {
            name: name.into(),
            specialised: false,
            samples,
        };
        let row = Row {
            key: 0,
            func: "hot".into(),
            file: "w.py".into(),
            line: 3,
            self_samples: 1001,
            cum_samples: 1001,
            trend: Trend::Flat,
            ops: vec![op("A", 700), op("B", 300), op("C", 1)],
        };
        let (lines, more) = op_lines(&row, 5);
        assert_eq!(more, 0);
        let got: Vec<(&str, String, usize)> = lines
            .iter()
            .map(|l| (l.op.name.as_str(), format!("{:.1}", l.pct), l.filled))
            .collect();
        assert_eq!(
            got,
            [
                ("A", "69.9".to_string(), OP_BAR),
                ("B", "30.0".to_string(), 8),
                ("C", "0.1".to_string(), 1)
            ]
        );
        // Too many for the room: one line says how many are left out.
        let (lines, more) = op_lines(&row, 2);
        assert_eq!((lines.len(), more), (1, 2));
        let (lines, more) = op_lines(&row, 3);
        assert_eq!((lines.len(), more), (3, 0));
        let empty = Row {
            ops: Vec::new(),
            ..row
        };
        assert_eq!(op_lines(&empty, 5).0.len(), 0);
    }
}
