//! The pstats collector: the reference's default output.
//!
//! Aggregation is the reference's (`pstats_collector.py`): the key is
//! `(filename, lineno, funcname)` where `lineno` is the line executing in
//! that frame, so one function can have several rows. Per thread stack the
//! leaf gets a direct sample, every distinct key on the stack one
//! cumulative sample, and each adjacent pair a caller edge
//! `callers[callee][caller]`.
//!
//! To standard output it prints the reference's table, byte for byte:
//! `Profile Stats:`, the columns (`nsamples` direct/cumulative, `sample%`,
//! `tottime`, `cumul%`, `cumtime`, each time column in s, ms or μs chosen
//! by its largest shown value), the `Legend:` block and, unless disabled,
//! the "Summary of Interesting Functions". Filenames are shown as
//! basenames and rows that then coincide are merged, as `strip_dirs()` does.
//! Colours follow CPython's `_colorize.can_colorize()` for standard output
//! (`PYTHON_COLORS`, `NO_COLOR`, `FORCE_COLOR`, `TERM=dumb`, a terminal).
//!
//! To a file it writes a marshal dump that `pstats.Stats(path)` loads:
//! `{(file, line, func): (direct, cumulative, tottime, cumtime, {caller:
//! count})}` with full paths. The reference also stores a marker entry
//! `("__sampled__",): True`, which 3.15's `pstats` pops to switch to its
//! sampled column titles. Every older `pstats` (3.14, 3.13, ... 3.11)
//! crashes on that entry (it unpacks every value as a 5-tuple and formats
//! every key as a 3-tuple), and no value or key shape can satisfy both. As
//! tachyon profiles 3.13 and 3.14 programs, whose users' `pstats` (and
//! snakeviz, gprof2dot) cannot read the marker, the file is **portable by
//! default**: same entries and numbers as the reference, without the
//! marker; 3.15 then shows it with the classic `ncalls` titles.
//! [`PstatsCollector::with_sampled_marker`] writes the reference's file
//! exactly (marker included).

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::str::FromStr;

use super::stacks::StackCounts;
use super::{Collector, Output, write_stdout};
use crate::error::Result;
use crate::model::{FrameId, FrameTable, Mode, NO_FILE, RunStats, Sample, StrId};
use crate::pyrepr::str_repr;

/// Row order of the table: the reference's `--sort` choices, same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SortKey {
    /// Direct samples, most first (the default).
    #[default]
    Nsamples,
    /// Time directly in the function, most first.
    Tottime,
    /// Time with the function on the stack, most first.
    Cumtime,
    /// Direct samples as a percentage, most first.
    SamplePct,
    /// Cumulative samples as a percentage, most first.
    CumulPct,
    /// Cumulative samples, most first.
    NsamplesCumul,
    /// `(file, line, func)` as Python prints the tuple, ascending.
    Name,
}

impl SortKey {
    pub const ALL: [SortKey; 7] = [
        SortKey::Nsamples,
        SortKey::Tottime,
        SortKey::Cumtime,
        SortKey::SamplePct,
        SortKey::CumulPct,
        SortKey::NsamplesCumul,
        SortKey::Name,
    ];

    /// The reference's name for it (`--sort NAME`).
    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Nsamples => "nsamples",
            SortKey::Tottime => "tottime",
            SortKey::Cumtime => "cumtime",
            SortKey::SamplePct => "sample-pct",
            SortKey::CumulPct => "cumul-pct",
            SortKey::NsamplesCumul => "nsamples-cumul",
            SortKey::Name => "name",
        }
    }
}

impl fmt::Display for SortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SortKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        SortKey::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = SortKey::ALL.iter().map(|k| k.as_str()).collect();
                format!("invalid sort key '{s}' (choose from {})", names.join(", "))
            })
    }
}

/// The reference's pstats display options (`--sort`, `-l`, `--no-summary`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PstatsOptions {
    pub sort: SortKey,
    /// Rows shown; `None` shows all. The reference's default is 15.
    pub limit: Option<usize>,
    /// The "Summary of Interesting Functions" (`--no-summary` turns it off).
    pub show_summary: bool,
}

impl Default for PstatsOptions {
    fn default() -> Self {
        PstatsOptions {
            sort: SortKey::Nsamples,
            limit: Some(15),
            show_summary: true,
        }
    }
}

/// `(file, line, func)`: what a row is keyed by, the file `None` for a
/// synthetic frame. Strings are interned in the [`FrameTable`], so equal
/// strings have equal ids.
type LocKey = (Option<StrId>, i32, StrId);

#[derive(Debug, Clone)]
struct LocStats {
    key: LocKey,
    direct: u64,
    cumulative: u64,
}

/// The rows and caller edges, from the distinct stacks at the end.
struct Aggregate {
    /// In the order the reference's dict first sees them (leaf to root).
    locs: Vec<LocStats>,
    /// `(callee, caller, count)` in first-seen order.
    edges: Vec<(u32, u32, u64)>,
}

/// Aggregates samples into pstats rows; see the module documentation.
pub struct PstatsCollector {
    output: Output,
    opts: PstatsOptions,
    sampled_marker: bool,
    color: Option<bool>,
    counts: StackCounts,
}

impl PstatsCollector {
    pub fn new(output: Output, opts: PstatsOptions) -> Self {
        PstatsCollector {
            output,
            opts,
            sampled_marker: false,
            color: None,
            counts: StackCounts::pooled(),
        }
    }

    /// Also write the reference's `("__sampled__",): True` entry to the
    /// file: Python 3.15's `pstats` then shows sampling column titles, and
    /// every older `pstats` fails to load the file.
    pub fn with_sampled_marker(mut self, marker: bool) -> Self {
        self.sampled_marker = marker;
        self
    }

    /// Force colours on or off (default: decided like CPython's
    /// `_colorize.can_colorize()` for standard output).
    pub fn with_color(mut self, color: Option<bool>) -> Self {
        self.color = color;
        self
    }

    /// Rows keyed by `(file, line, func)`, and the caller edges between
    /// them, counted once per distinct stack.
    fn aggregate(&self, frames: &FrameTable) -> Aggregate {
        let loc_key = |id: FrameId| {
            let f = frames.frame(id);
            (f.file(), f.line(), f.func)
        };
        let k = self.counts.self_and_cumulative(loc_key);
        let locs = (0..k.len())
            .map(|i| LocStats {
                key: k.keys[i],
                direct: k.direct[i],
                cumulative: k.cumulative[i],
            })
            .collect();
        let mut edge_index: HashMap<(u32, u32), usize> = HashMap::new();
        let mut edges: Vec<(u32, u32, u64)> = Vec::new();
        for cell in self.counts.cells() {
            let stack = self.counts.stack(cell.stack);
            for pair in stack.windows(2) {
                let pos = |id| k.position(&loc_key(id)).unwrap_or_default() as u32;
                let (callee, caller) = (pos(pair[0]), pos(pair[1]));
                let next = edges.len();
                let e = *edge_index.entry((callee, caller)).or_insert(next);
                if e == next {
                    edges.push((callee, caller, 0));
                }
                edges[e].2 += cell.count;
            }
        }
        Aggregate { locs, edges }
    }

    /// The table (and summary) exactly as the reference prints it.
    fn render_text(&self, frames: &FrameTable, stats: &RunStats, color: bool) -> String {
        let agg = self.aggregate(frames);
        let c = if color { Colors::ON } else { Colors::OFF };
        let mut rows = strip_dirs(&agg, frames, stats.interval_us as f64 / 1e6);
        if rows.is_empty() {
            let mut out = String::from("No samples were collected.\n");
            if stats.mode == Mode::Cpu {
                out.push_str("This can happen in CPU mode when all threads are idle.\n");
            }
            return out;
        }
        let total: u64 = rows.iter().map(|r| r.direct).sum();
        sort_rows(&mut rows, self.opts.sort, total);
        if let Some(limit) = self.opts.limit {
            rows.truncate(limit);
        }
        let mut out = String::new();
        table(&mut out, &rows, total, &c);
        let (b, r, y) = (c.bold_blue, c.reset, c.yellow);
        let _ = writeln!(out, "\n{b}Legend:{r}");
        for (name, what) in LEGEND {
            let _ = writeln!(out, "  {y}{name}{r}: {what}");
        }
        if self.opts.show_summary && !rows.is_empty() {
            summary(&mut out, &rows, total, &c);
        }
        out
    }

    /// The marshal bytes of the stats dict (full paths, callers).
    fn marshal_bytes(&self, frames: &FrameTable, interval_us: u64) -> Vec<u8> {
        let Aggregate { locs, edges } = self.aggregate(frames);
        let interval_s = interval_us as f64 / 1e6;
        let mut callers: Vec<Vec<(u32, u64)>> = vec![Vec::new(); locs.len()];
        for &(callee, caller, n) in &edges {
            callers[callee as usize].push((caller, n));
        }
        let mut m = Marshal::default();
        m.dict_start();
        for (l, callers) in locs.iter().zip(&callers) {
            m.key(l.key, frames);
            m.tuple(5);
            m.int(l.direct);
            m.int(l.cumulative);
            m.float(l.direct as f64 * interval_s);
            m.float(l.cumulative as f64 * interval_s);
            m.dict_start();
            for &(caller, n) in callers {
                m.key(locs[caller as usize].key, frames);
                m.int(n);
            }
            m.dict_end();
        }
        if self.sampled_marker {
            m.tuple(1);
            m.str("__sampled__");
            m.buf.push(b'T');
        }
        m.dict_end();
        m.buf
    }
}

impl Collector for PstatsCollector {
    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        self.counts.add(sample);
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        match &self.output {
            // The reference says nothing when it writes the file.
            Output::File(_) => self
                .output
                .write(&self.marshal_bytes(frames, stats.interval_us), ""),
            Output::Stdout => {
                let color = self.color.unwrap_or_else(stdout_can_colorize);
                let text = self.render_text(frames, stats, color);
                write_stdout(text.as_bytes())
            }
        }
    }
}

/// `os.path.basename`: everything after the last `/`.
pub(crate) fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

struct Row<'a> {
    /// `None` for a synthetic frame.
    file: Option<&'a str>,
    line: i32,
    func: &'a str,
    direct: u64,
    cumulative: u64,
    tottime: f64,
    cumtime: f64,
}

const LEGEND: [(&str, &str); 6] = [
    (
        "nsamples",
        "Direct/Cumulative samples (direct executing / on call stack)",
    ),
    (
        "sample%",
        "Percentage of total samples this function was directly executing",
    ),
    (
        "tottime",
        "Estimated total time spent directly in this function",
    ),
    (
        "cumul%",
        "Percentage of total samples when this function was on the call stack",
    ),
    (
        "cumtime",
        "Estimated cumulative time (including time in called functions)",
    ),
    ("filename:lineno(function)", "Function location and name"),
];

/// The unit for a time column from its largest value.
fn best_unit(max: f64) -> (&'static str, f64) {
    if max >= 1.0 {
        ("s", 1.0)
    } else if max >= 0.001 {
        ("ms", 1000.0)
    } else {
        ("μs", 1e6)
    }
}

struct Colors {
    bold_blue: &'static str,
    green: &'static str,
    yellow: &'static str,
    cyan: &'static str,
    reset: &'static str,
}

impl Colors {
    const ON: Colors = Colors {
        bold_blue: "\x1b[1;34m",
        green: "\x1b[32m",
        yellow: "\x1b[33m",
        cyan: "\x1b[36m",
        reset: "\x1b[0m",
    };
    const OFF: Colors = Colors {
        bold_blue: "",
        green: "",
        yellow: "",
        cyan: "",
        reset: "",
    };
}

/// CPython's `_colorize.can_colorize()` for standard output.
fn stdout_can_colorize() -> bool {
    let var = |k: &str| std::env::var_os(k);
    match var("PYTHON_COLORS").as_deref().and_then(|v| v.to_str()) {
        Some("0") => return false,
        Some("1") => return true,
        _ => {}
    }
    if var("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    if var("FORCE_COLOR").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    if var("TERM").is_some_and(|v| v == "dumb") {
        return false;
    }
    std::io::stdout().is_terminal()
}

/// The rows as `strip_dirs()` leaves them: basenames, coinciding rows
/// merged in first-seen order, times at `interval_s` a sample.
fn strip_dirs<'f>(agg: &Aggregate, frames: &'f FrameTable, interval_s: f64) -> Vec<Row<'f>> {
    let mut rows: Vec<Row<'_>> = Vec::with_capacity(agg.locs.len());
    let mut index: HashMap<(Option<&str>, i32, &str), usize> = HashMap::new();
    for l in &agg.locs {
        let (file, line, func) = l.key;
        let file = file.map(|f| basename(frames.str(f)));
        let key = (file, line, frames.str(func));
        let tt = l.direct as f64 * interval_s;
        let ct = l.cumulative as f64 * interval_s;
        match index.get(&key) {
            Some(&i) => {
                let r = &mut rows[i];
                r.direct += l.direct;
                r.cumulative += l.cumulative;
                r.tottime += tt;
                r.cumtime += ct;
            }
            None => {
                index.insert(key, rows.len());
                rows.push(Row {
                    file: key.0,
                    line,
                    func: key.2,
                    direct: l.direct,
                    cumulative: l.cumulative,
                    tottime: tt,
                    cumtime: ct,
                });
            }
        }
    }
    rows
}

/// Order rows by `sort` with stable sorts, as Python's list.sort
/// (reverse=True keeps ties in their original order too).
fn sort_rows(rows: &mut [Row<'_>], sort: SortKey, total: u64) {
    let pct = |n: u64| pct_of(n, total);
    let desc = |a: f64, b: f64| b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal);
    match sort {
        SortKey::Nsamples => rows.sort_by_key(|r| std::cmp::Reverse(r.direct)),
        SortKey::Tottime => rows.sort_by(|a, b| desc(a.tottime, b.tottime)),
        SortKey::Cumtime => rows.sort_by(|a, b| desc(a.cumtime, b.cumtime)),
        SortKey::SamplePct => rows.sort_by(|a, b| desc(pct(a.direct), pct(b.direct))),
        SortKey::CumulPct => rows.sort_by(|a, b| desc(pct(a.cumulative), pct(b.cumulative))),
        SortKey::NsamplesCumul => rows.sort_by_key(|r| std::cmp::Reverse(r.cumulative)),
        SortKey::Name => rows.sort_by_cached_key(|r| {
            let file = r.file.unwrap_or(NO_FILE);
            format!("({}, {}, {})", str_repr(file), r.line, str_repr(r.func))
        }),
    }
}

/// `Profile Stats:`, the heading and a line a row, the time columns in
/// the unit that suits their largest value.
fn table(out: &mut String, rows: &[Row<'_>], total: u64, c: &Colors) {
    let pct = |n: u64| pct_of(n, total);
    let max_tt = rows.iter().map(|r| r.tottime).fold(0.0, f64::max);
    let max_ct = rows.iter().map(|r| r.cumtime).fold(0.0, f64::max);
    let (tt_unit, tt_scale) = best_unit(max_tt);
    let (ct_unit, ct_scale) = best_unit(max_ct);
    let tt_head = format!("tottime ({tt_unit})");
    let ct_head = format!("cumtime ({ct_unit})");
    let tt_w = tt_head.chars().count().max(12);
    let ct_w = ct_head.chars().count().max(12);

    let (b, r) = (c.bold_blue, c.reset);
    let _ = writeln!(out, "{b}Profile Stats:{r}");
    let _ = writeln!(
        out,
        "{b}{:>15}{r}  {b}{:>8}{r}  {b}{tt_head:>tt_w$}{r}  {b}{:>8}{r}  {b}{ct_head:>ct_w$}{r}  {b}filename:lineno(function){r}",
        "nsamples", "sample%", "cumul%"
    );
    for row in rows {
        let ns = format!("{}/{}", row.direct, row.cumulative);
        let _ = writeln!(
            out,
            "{ns:>15}  {:8.1}  {:tt_w$.3}  {:8.1}  {:ct_w$.3}  {}",
            pct(row.direct),
            row.tottime * tt_scale,
            pct(row.cumulative),
            row.cumtime * ct_scale,
            place(row.file, Some(row.line), row.func, c),
        );
    }
}

/// "Summary of Interesting Functions": the shown rows aggregated by
/// `file:func` (the reference joins and re-splits at the last `:`, so a
/// `:` in a name moves the split; kept for identical output).
fn summary(out: &mut String, rows: &[Row<'_>], total: u64, c: &Colors) {
    let funcs = by_function(rows);
    let (b, r) = (c.bold_blue, c.reset);
    let _ = writeln!(out, "\n{b}Summary of Interesting Functions:{r}");
    for list in &SUMMARY_LISTS {
        let _ = writeln!(out, "\n{b}{}:{r}", list.title);
        let mut sorted: Vec<&FuncTotals> = funcs.iter().collect();
        sorted.sort_by(|x, y| {
            (list.key)(y)
                .partial_cmp(&(list.key)(x))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        // The top three are taken first, then the ones that qualify shown.
        for a in sorted.into_iter().take(3) {
            if let Some(l) = (list.line)(a, total, &a.place(c)) {
                let _ = writeln!(out, "  {l}");
            }
        }
    }
}

/// The samples of one `file:func` in the summary.
struct FuncTotals {
    name: String,
    /// The rows are of a synthetic frame, whose name has no file.
    synthetic: bool,
    direct: u64,
    cumulative: u64,
}

impl FuncTotals {
    /// Where the function is, split back out of its name.
    fn place(&self, c: &Colors) -> String {
        let (file, func) = self.name.rsplit_once(':').unwrap_or(("", &self.name));
        place((!self.synthetic).then_some(file), None, func, c)
    }
}

/// The rows summed by `file:func`, in first-seen order.
fn by_function(rows: &[Row<'_>]) -> Vec<FuncTotals> {
    let mut funcs: Vec<FuncTotals> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for r in rows {
        let name = format!("{}:{}", r.file.unwrap_or(NO_FILE), r.func);
        match index.get(&name) {
            Some(&i) => {
                funcs[i].direct += r.direct;
                funcs[i].cumulative += r.cumulative;
            }
            None => {
                index.insert(name.clone(), funcs.len());
                funcs.push(FuncTotals {
                    name,
                    synthetic: r.file.is_none(),
                    direct: r.direct,
                    cumulative: r.cumulative,
                });
            }
        }
    }
    funcs
}

/// One list of the summary: its title, what it ranks by, and the line a
/// function gets in it (none when it does not qualify), given the total
/// of samples and where the function is.
struct SummaryList {
    title: &'static str,
    key: fn(&FuncTotals) -> f64,
    line: fn(&FuncTotals, u64, &str) -> Option<String>,
}

/// `n` as a percentage of `total` (0 of none).
fn pct_of(n: u64, total: u64) -> f64 {
    if total > 0 {
        n as f64 / total as f64 * 100.0
    } else {
        0.0
    }
}

const SUMMARY_LISTS: [SummaryList; 3] = [
    SummaryList {
        title: "Functions with Highest Direct/Cumulative Ratio (Hot Spots)",
        key: |a| {
            if a.cumulative > 0 {
                a.direct as f64 / a.cumulative as f64
            } else {
                0.0
            }
        },
        line: |a, total, place| {
            (a.direct > 0 && a.cumulative > 0).then(|| {
                format!(
                    "{:.3} direct/cumulative ratio, {:.1}% direct samples: {place}",
                    a.direct as f64 / a.cumulative as f64,
                    pct_of(a.direct, total),
                )
            })
        },
    },
    SummaryList {
        title: "Functions with Highest Call Frequency (Indirect Calls)",
        // cumulative >= direct always (the leaf is on its own stack).
        key: |a| a.cumulative.saturating_sub(a.direct) as f64,
        line: |a, total, place| {
            (a.cumulative > a.direct).then(|| {
                format!(
                    "{} indirect calls, {:.1}% total stack presence: {place}",
                    a.cumulative - a.direct,
                    pct_of(a.cumulative, total),
                )
            })
        },
    },
    SummaryList {
        title: "Functions with Highest Call Magnification (Cumulative/Direct)",
        key: |a| {
            if a.direct > 0 {
                a.cumulative as f64 / a.direct as f64
            } else {
                0.0
            }
        },
        line: |a, _, place| {
            (a.direct > 0 && a.cumulative > a.direct).then(|| {
                format!(
                    "{:.1}x call magnification, {} indirect calls from {} direct: {place}",
                    a.cumulative as f64 / a.direct as f64,
                    a.cumulative - a.direct,
                    a.direct,
                )
            })
        },
    },
];

/// Where a row's function is, as the table shows it: `file:line(func)`
/// (`file:(func)` in the summary, which has no line), as the reference
/// prints it, but a frame without a file by its name alone (`<GC>`, not
/// the reference's `~:0(<GC>)`).
fn place(file: Option<&str>, line: Option<i32>, func: &str, c: &Colors) -> String {
    let (g, y, cy, r) = (c.green, c.yellow, c.cyan, c.reset);
    let Some(file) = file else {
        return format!("{cy}{func}{r}");
    };
    let line = line.map(|l| l.to_string()).unwrap_or_default();
    format!("{g}{file}{r}:{y}{line}{r}({cy}{func}{r})")
}

/// A plain marshal writer: only the codes any `marshal` reader since
/// Python 3.4 accepts, no back-references.
#[derive(Default)]
struct Marshal {
    buf: Vec<u8>,
}

impl Marshal {
    fn dict_start(&mut self) {
        self.buf.push(b'{');
    }

    fn dict_end(&mut self) {
        self.buf.push(b'0');
    }

    /// A tuple header (`)`, the small tuple: one byte of length).
    fn tuple(&mut self, n: u8) {
        self.buf.push(b')');
        self.buf.push(n);
    }

    fn str(&mut self, s: &str) {
        self.buf.push(b'u');
        self.buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(s.as_bytes());
    }

    fn int(&mut self, v: u64) {
        if let Ok(small) = i32::try_from(v) {
            self.i32(small);
        } else {
            // `l`: a count of 15-bit digits, then the digits, low first.
            let mut digits = Vec::new();
            let mut rest = v;
            while rest > 0 {
                digits.push((rest & 0x7fff) as u16);
                rest >>= 15;
            }
            self.buf.push(b'l');
            self.buf
                .extend_from_slice(&(digits.len() as i32).to_le_bytes());
            for d in digits {
                self.buf.extend_from_slice(&d.to_le_bytes());
            }
        }
    }

    fn i32(&mut self, v: i32) {
        self.buf.push(b'i');
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn float(&mut self, v: f64) {
        self.buf.push(b'g');
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// `(file, line, func)` with the full file name; a synthetic frame's
    /// file is the reference's `~` (Python's `pstats` prints such a key,
    /// `("~", 0, "<GC>")`, as `{GC}`).
    fn key(&mut self, (file, line, func): LocKey, frames: &FrameTable) {
        self.tuple(3);
        self.str(file.map_or(NO_FILE, |f| frames.str(f)));
        self.i32(line);
        self.str(frames.str(func));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios as fixtures;

    fn run(sc: &fixtures::Scenario, opts: PstatsOptions, mode: Mode, color: bool) -> String {
        let mut c = PstatsCollector::new(Output::Stdout, opts);
        for s in &sc.samples {
            c.collect(s, &sc.frames);
        }
        let stats = RunStats {
            interval_us: sc.interval_us,
            mode,
            ..Default::default()
        };
        c.render_text(&sc.frames, &stats, color)
    }

    fn options(v: &serde_json::Value) -> (PstatsOptions, Mode, bool) {
        let mut o = PstatsOptions::default();
        if let Some(s) = v.get("sort") {
            o.sort = s.as_str().unwrap().parse().unwrap();
        }
        if let Some(l) = v.get("limit") {
            o.limit = l.as_u64().map(|l| l as usize);
        }
        if let Some(s) = v.get("summary") {
            o.show_summary = s.as_bool().unwrap();
        }
        let mode = match v.get("mode").and_then(|m| m.as_str()) {
            Some("cpu") => Mode::Cpu,
            _ => Mode::Wall,
        };
        let color = v.get("color").and_then(|c| c.as_bool()).unwrap_or(false);
        (o, mode, color)
    }

    /// The reference's text with its one deliberate difference undone:
    /// a frame without a file, `~:0(<GC>)` (`~:(<GC>)` in the summary,
    /// coloured or not), is shown by its name, `<GC>`.
    fn without_no_file(text: &str) -> String {
        let (g, y, r) = ("\x1b[32m", "\x1b[33m", "\x1b[0m");
        let coloured = [format!(" {g}~{r}:{y}0{r}("), format!(" {g}~{r}:{y}{r}(")];
        let plain = [" ~:0(".to_string(), " ~:(".to_string()];
        let mut out = text.to_string();
        for p in coloured.iter().chain(&plain) {
            while let Some(at) = out.find(p.as_str()) {
                let start = at + p.len();
                let end = start + out[start..].find(')').unwrap();
                out = format!("{} {}{}", &out[..at], &out[start..end], &out[end + 1..]);
            }
        }
        out
    }

    #[test]
    fn frames_without_a_file_are_shown_by_name() {
        let mut t = FrameTable::new();
        let f = crate::collect::scenarios::py(&mut t, "/app/main.py", "main", 3);
        let gc = t.synthetic(crate::model::FrameKind::Gc, "<GC>");
        let mut c = PstatsCollector::new(Output::Stdout, PstatsOptions::default());
        for root_first in [&[f, gc][..], &[f, gc], &[f]] {
            c.collect(&crate::collect::scenarios::sample(root_first), &t);
        }
        let stats = RunStats {
            interval_us: 1000,
            ..Default::default()
        };
        let text = c.render_text(&t, &stats, false);
        assert!(!text.contains('~'), "{text}");
        assert!(text.contains("  main.py:3(main)\n"), "{text}");
        assert!(text.contains("  <GC>\n"), "{text}");
        assert!(text.contains("direct samples: <GC>\n"), "{text}");
        let text = c.render_text(&t, &stats, true);
        assert!(!text.contains('~'), "{text}");
        assert!(text.contains("  \x1b[36m<GC>\x1b[0m\n"), "{text}");
    }

    #[test]
    fn text_matches_reference_byte_for_byte() {
        let mut checked = 0;
        for sc in fixtures::scenarios() {
            for v in sc.raw["pstats"].as_array().unwrap() {
                let (opts, mode, color) = options(v);
                let got = run(&sc, opts, mode, color);
                let file = v["out"].as_str().unwrap();
                let want = without_no_file(&fixtures::read(file));
                assert_eq!(got, want, "{}: output differs from the reference's", file);
                checked += 1;
            }
        }
        assert!(checked >= 20, "only {checked} fixtures checked");
    }

    #[test]
    fn sort_key_names() {
        for k in SortKey::ALL {
            assert_eq!(k.as_str().parse::<SortKey>(), Ok(k));
            let v = <SortKey as clap::ValueEnum>::from_str(k.as_str(), false).unwrap();
            assert_eq!(v, k);
        }
        assert!(
            "bogus"
                .parse::<SortKey>()
                .unwrap_err()
                .contains("nsamples-cumul")
        );
        assert_eq!(SortKey::default(), SortKey::Nsamples);
    }

    #[test]
    fn marshal_of_big_counts() {
        let mut m = Marshal::default();
        m.int(1 << 40);
        // 2^40 = digit 2^10 at position 2 (15-bit digits): 0, 0, 1024.
        assert_eq!(m.buf, [b'l', 3, 0, 0, 0, 0, 0, 0, 0, 0, 4]);
    }
}
