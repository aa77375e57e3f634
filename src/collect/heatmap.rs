//! `--heatmap`: a directory with `index.html` (the profiled files grouped
//! as your code, the standard library and installed packages, with their
//! self and total samples) and one page per source file (`file_NNNN.html`,
//! as the reference names them): the source with each line's self and total
//! samples painted on it, a self/total toggle, a hot-lines-only filter and
//! links from a line to its callers and callees. With opcodes
//! ([`HeatmapCollector::with_opcodes`]) each line with samples also gets a
//! panel listing the bytecode instructions its frames were at (specialised
//! forms with their base) and their samples.
//!
//! Source is read the first time a frame of a file is seen, while the
//! target still lives (through `/proc/PID/root`), or, on replay, from this
//! file system; a file that cannot be read gets a page that says so and
//! still lists its per-line counts.
//!
//! Everything is sorted, so the same samples give the same pages, live or
//! replayed. Pages are plain HTML with a few hundred bytes of inline CSS
//! and script: no network, and a page grows with its file's lines only.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::path::{Path, PathBuf};

use super::diff_flamegraph::escape;
use super::flamegraph::{Kind, classify};
use super::stacks::{KeyCounts, StackCounts};
use super::{Collector, RunStats, atomic};
use crate::dump::SourceReader;
use crate::error::{Error, Result};
use crate::model::{FrameId, FrameKind, FrameTable, Sample, StrId};
use crate::opcodes::OpTable;

/// A source line: file and 1-based line number.
type LineKey = (StrId, i32);

/// The key of frames that are not on a source line (`<GC>`, `<native>`,
/// unreadable frames, instructions without a location).
const NO_LINE: LineKey = (StrId::MAX, 0);

/// Callers and callees shown per line.
const NAV_LINKS: usize = 3;

pub struct HeatmapCollector {
    dir: PathBuf,
    counts: StackCounts,
    source: SourceReader,
    /// Frames already seen (their file's source read), by frame id.
    seen: Vec<bool>,
    /// Name the frames' opcodes with this table (`--opcodes`).
    opcodes: Option<&'static OpTable>,
}

impl HeatmapCollector {
    /// Write into `dir`; read source through `source` (the target's
    /// `/proc/PID/root` live, this file system on replay).
    pub fn new(dir: PathBuf, source: SourceReader) -> Self {
        HeatmapCollector {
            dir,
            counts: StackCounts::pooled(),
            source,
            seen: Vec::new(),
            opcodes: None,
        }
    }

    /// Give each line a panel of the instructions its frames were at,
    /// named with `table`.
    pub fn with_opcodes(mut self, table: Option<&'static OpTable>) -> Self {
        self.opcodes = table;
        self
    }

    /// The index page's path.
    pub fn index_path(dir: &Path) -> PathBuf {
        dir.join("index.html")
    }
}

/// The source line a frame stands on, or [`NO_LINE`].
fn line_key(frames: &FrameTable, id: FrameId) -> LineKey {
    let f = frames.frame(id);
    match (f.kind, f.location) {
        (FrameKind::Python, Some(l)) if l.line > 0 => (f.file, l.line),
        _ => NO_LINE,
    }
}

/// One line's counts and its heaviest callers and callees.
struct LineRow {
    line: i32,
    self_: u64,
    total: u64,
    callers: Vec<(LineKey, u64)>,
    callees: Vec<(LineKey, u64)>,
    /// Opcodes of the frames on this line and their samples, most first.
    ops: Vec<(u8, u64)>,
}

struct FileInfo {
    id: StrId,
    name: String,
    kind: Kind,
    self_: u64,
    total: u64,
    /// Lines with samples, by line number.
    rows: Vec<LineRow>,
}

/// Everything the pages show, sorted.
struct Report {
    /// By total samples, then self, then name; a file's page is its
    /// position here.
    files: Vec<FileInfo>,
    page_of: HashMap<StrId, usize>,
    /// A name for the function on each line with samples.
    func_of: HashMap<LineKey, String>,
    stacks: u64,
    opcodes: Option<&'static OpTable>,
}

fn page_name(i: usize) -> String {
    format!("file_{i:04}.html")
}

impl HeatmapCollector {
    fn report(&self, frames: &FrameTable) -> Report {
        let key = |id: FrameId| line_key(frames, id);
        let lines = self.counts.self_and_cumulative(key);
        let per_file = self.counts.self_and_cumulative(|id| key(id).0);
        let per_stack = samples_per_stack(&self.counts);
        // Caller line -> callee line, once per stack.
        let edges = self.once_per_stack(&per_stack, |stack, out| {
            for pair in stack.windows(2) {
                let (callee, caller) = (key(pair[0]), key(pair[1]));
                if callee != NO_LINE && caller != NO_LINE {
                    out.push((caller, callee));
                }
            }
        });
        let mut neighbours = Neighbours::of(&edges);
        let mut ops = match self.opcodes {
            Some(_) => self.ops_per_line(&per_stack, frames),
            None => HashMap::new(),
        };
        let mut files = file_infos(&per_file, frames);
        let file_at: HashMap<StrId, usize> =
            files.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
        for (i, &k) in lines.keys.iter().enumerate() {
            let Some(&f) = file_at.get(&k.0) else {
                continue;
            };
            files[f].rows.push(LineRow {
                line: k.1,
                self_: lines.direct[i],
                total: lines.cumulative[i],
                callers: heaviest(neighbours.callers.remove(&k), frames),
                callees: heaviest(neighbours.callees.remove(&k), frames),
                ops: ops.remove(&k).unwrap_or_default(),
            });
        }
        for f in &mut files {
            f.rows.sort_by_key(|r| r.line);
        }
        files.sort_by(|a, b| {
            b.total
                .cmp(&a.total)
                .then(b.self_.cmp(&a.self_))
                .then_with(|| a.name.cmp(&b.name))
        });
        let page_of = files.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
        Report {
            files,
            page_of,
            func_of: functions_of_lines(frames, &lines),
            stacks: self.counts.total(),
            opcodes: self.opcodes,
        }
    }

    /// For each distinct stack with samples, the items `each` finds in
    /// it, each counted once per stack with the stack's samples.
    fn once_per_stack<T: Ord + Hash + Copy>(
        &self,
        per_stack: &[u64],
        mut each: impl FnMut(&[FrameId], &mut Vec<T>),
    ) -> HashMap<T, u64> {
        let mut total: HashMap<T, u64> = HashMap::new();
        let mut in_stack: Vec<T> = Vec::new();
        for (s, &n) in per_stack.iter().enumerate().filter(|&(_, &n)| n > 0) {
            in_stack.clear();
            each(self.counts.stack(s as u32), &mut in_stack);
            in_stack.sort_unstable();
            in_stack.dedup();
            for e in &in_stack {
                let v = total.entry(*e).or_insert(0);
                *v = v.saturating_add(n);
            }
        }
        total
    }

    /// The instructions each line's frames were at (`--opcodes`), each
    /// (line, opcode) once per stack, most samples first.
    fn ops_per_line(
        &self,
        per_stack: &[u64],
        frames: &FrameTable,
    ) -> HashMap<LineKey, Vec<(u8, u64)>> {
        let at = self.once_per_stack(per_stack, |stack, out| {
            for &id in stack {
                let k = line_key(frames, id);
                if let (true, Some(op)) = (k != NO_LINE, frames.frame(id).opcode) {
                    out.push((k, op));
                }
            }
        });
        let mut ops: HashMap<LineKey, Vec<(u8, u64)>> = HashMap::new();
        for ((k, op), n) in at {
            ops.entry(k).or_default().push((op, n));
        }
        for v in ops.values_mut() {
            v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        ops
    }
}

/// Samples per distinct stack, over threads.
fn samples_per_stack(counts: &StackCounts) -> Vec<u64> {
    let mut per_stack: Vec<u64> = Vec::new();
    for c in counts.cells() {
        let s = c.stack as usize;
        if per_stack.len() <= s {
            per_stack.resize(s + 1, 0);
        }
        per_stack[s] = per_stack[s].saturating_add(c.count);
    }
    per_stack
}

/// Each line's callers and callees, with the samples of each edge.
struct Neighbours {
    callers: HashMap<LineKey, Vec<(LineKey, u64)>>,
    callees: HashMap<LineKey, Vec<(LineKey, u64)>>,
}

impl Neighbours {
    fn of(edges: &HashMap<(LineKey, LineKey), u64>) -> Self {
        let mut n = Neighbours {
            callers: HashMap::new(),
            callees: HashMap::new(),
        };
        for (&(caller, callee), &samples) in edges {
            n.callers.entry(callee).or_default().push((caller, samples));
            n.callees.entry(caller).or_default().push((callee, samples));
        }
        n
    }
}

/// The [`NAV_LINKS`] heaviest of a line's neighbours, ties by file and line.
fn heaviest(v: Option<Vec<(LineKey, u64)>>, frames: &FrameTable) -> Vec<(LineKey, u64)> {
    let mut v = v.unwrap_or_default();
    v.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| frames.str(a.0.0).cmp(frames.str(b.0.0)))
            .then(a.0.1.cmp(&b.0.1))
    });
    v.truncate(NAV_LINKS);
    v
}

/// One entry per file with samples, its rows still to be added.
fn file_infos(per_file: &KeyCounts<StrId>, frames: &FrameTable) -> Vec<FileInfo> {
    let mut files: Vec<FileInfo> = Vec::new();
    for (i, &file) in per_file.keys.iter().enumerate() {
        if file == NO_LINE.0 {
            continue;
        }
        let name = frames.str(file).to_string();
        files.push(FileInfo {
            id: file,
            kind: classify(&name),
            name,
            self_: per_file.direct[i],
            total: per_file.cumulative[i],
            rows: Vec::new(),
        });
    }
    files
}

/// The function on each line with samples: the least name, should
/// several share it.
fn functions_of_lines(frames: &FrameTable, lines: &KeyCounts<LineKey>) -> HashMap<LineKey, String> {
    let mut func_of: HashMap<LineKey, String> = HashMap::new();
    for (id, _) in frames.frames().iter().enumerate() {
        let k = line_key(frames, id as FrameId);
        if k == NO_LINE || lines.position(&k).is_none() {
            continue;
        }
        let name = frames.str(frames.frame(id as FrameId).func);
        match func_of.get_mut(&k) {
            Some(f) if f.as_str() <= name => {}
            Some(f) => *f = name.to_string(),
            None => {
                func_of.insert(k, name.to_string());
            }
        }
    }
    func_of
}

impl Collector for HeatmapCollector {
    fn collect(&mut self, sample: &Sample, frames: &FrameTable) {
        // Read each file the first time one of its frames is seen: the
        // target may be gone by the end.
        for t in &sample.threads {
            for &id in &t.frames {
                let i = id as usize;
                if i >= self.seen.len() {
                    self.seen.resize(i + 1, false);
                }
                if !self.seen[i] {
                    self.seen[i] = true;
                    let k = line_key(frames, id);
                    if k != NO_LINE {
                        let _ = self.source.file(frames.str(k.0));
                    }
                }
            }
        }
        self.counts.add(sample);
    }

    fn target_changed(&mut self, pid: i32) {
        self.source.follow(pid);
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        let report = self.report(frames);
        let cannot = |e| Error::io(format!("cannot create {}", self.dir.display()), e);
        std::fs::create_dir_all(&self.dir).map_err(cannot)?;
        for (i, f) in report.files.iter().enumerate() {
            let source = self.source.file(&f.name);
            let html = file_page(&report, f, source, frames);
            atomic::write_file(&self.dir.join(page_name(i)), html.as_bytes())?;
        }
        let index = Self::index_path(&self.dir);
        atomic::write_file(&index, index_page(&report, stats).as_bytes())?;
        let n = report.files.len();
        crate::outln!("Heatmap output written to {}/", self.dir.display());
        crate::outln!("  - Index: {}", index.display());
        crate::outln!(
            "  - {n} source file{} analyzed",
            if n == 1 { "" } else { "s" }
        );
        Ok(())
    }
}

/// Colour level 0 (no samples) to 10 (the file's most).
fn level(v: u64, max: u64) -> u64 {
    if v == 0 || max == 0 {
        0
    } else {
        (v.saturating_mul(10).div_ceil(max)).clamp(1, 10)
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn css() -> String {
    let mut s = String::from(
        "body{font:14px system-ui,sans-serif;margin:0;color:#222;background:#fff}\
         header{padding:8px 16px;background:#2b3a55;color:#fff}header a{color:#fff}\
         .path{font-family:monospace}main{padding:8px 16px}\
         .stats span{display:inline-block;margin-right:18px}\
         .bar button{font:inherit;padding:2px 10px;border:1px solid #888;background:#eee;cursor:pointer}\
         .bar button.on{background:#2b3a55;color:#fff}.bar label{margin-left:14px}\
         .warn{background:#fff3cd;border:1px solid #e0c36a;padding:6px 10px}\
         details.ops{display:inline-block;margin-left:8px;font-size:12px}details.ops table td{padding:0 6px}\
         table{border-collapse:collapse}td,th{padding:0 6px;white-space:pre;vertical-align:top}\
         th{text-align:left;border-bottom:1px solid #ccc}\
         .code td{font:13px/1.4 monospace}.code td:nth-child(-n+3){text-align:right;color:#666}\
         .code a{text-decoration:none;margin-left:2px}tr:target{outline:2px solid #36c}\
         .hot tbody tr:not([class]),.hot.self tr.s0{display:none}\
         .files td:nth-child(n+2){text-align:right}.files td:first-child a{font-family:monospace}\
         .fill{height:10px;background:#e8590c}h2 small{font-weight:normal;color:#666}",
    );
    for k in 1..=10 {
        let _ = write!(
            s,
            ".self .s{k},.total .t{k}{{background:rgba(232,89,12,{:.2})}}",
            0.06 + 0.07 * k as f64
        );
    }
    s
}

const FILE_JS: &str = "(function(){var b=document.body,s=document.getElementById('bs'),\
t=document.getElementById('bt'),h=document.getElementById('hot');\
function m(x){b.classList.toggle('self',x);b.classList.toggle('total',!x);\
s.classList.toggle('on',x);t.classList.toggle('on',!x)}\
s.onclick=function(){m(true)};t.onclick=function(){m(false)};\
h.onchange=function(){b.classList.toggle('hot',h.checked)};\
function show(){var r=location.hash&&document.getElementById(location.hash.slice(1));\
if(r&&r.offsetParent===null){h.checked=false;b.classList.remove('hot');r.scrollIntoView()}}\
window.addEventListener('hashchange',show)})();";

const INDEX_JS: &str = "(function(){var q=document.getElementById('q'),\
r=document.querySelectorAll('tr[data-n]');if(!q)return;q.oninput=function(){\
var v=q.value.toLowerCase();for(var i=0;i<r.length;i++){\
r[i].style.display=r[i].getAttribute('data-n').indexOf(v)<0?'none':''}}})();";

fn head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{}</style></head>\n",
        escape(title),
        css()
    )
}

/// A link to a caller's or callee's line.
fn nav_link(
    report: &Report,
    frames: &FrameTable,
    arrow: &str,
    what: &str,
    (k, n): (LineKey, u64),
) -> String {
    let Some(&page) = report.page_of.get(&k.0) else {
        return String::new();
    };
    let file = frames.str(k.0);
    let func = report.func_of.get(&k).map_or("?", String::as_str);
    let base = file.rsplit('/').next().unwrap_or(file);
    format!(
        "<a href=\"{}#L{}\" title=\"{what} {} ({}:{}), {n} sample{}\">{arrow}</a>",
        page_name(page),
        k.1,
        escape(func),
        escape(base),
        k.1,
        if n == 1 { "" } else { "s" }
    )
}

fn file_page(
    report: &Report,
    f: &FileInfo,
    source: Option<&[String]>,
    frames: &FrameTable,
) -> String {
    let mut out = head(&format!("{} - tachyon heatmap", f.name));
    file_page_top(&mut out, report, f, source.is_some());
    out.push_str(
        "<table class=\"code\"><thead><tr><th>line<th>self<th>total<th>source<th></thead><tbody>\n",
    );
    let page = CodeTable {
        report,
        frames,
        max_self: f.rows.iter().map(|r| r.self_).max().unwrap_or(0),
        max_total: f.rows.iter().map(|r| r.total).max().unwrap_or(0),
    };
    match source {
        Some(src) => {
            let mut rows = f.rows.iter().peekable();
            for (i, text) in src.iter().enumerate() {
                let r = rows.next_if(|r| r.line as usize == i + 1);
                page.row(&mut out, i + 1, r, text);
            }
            // Lines past the end (the file changed since): their counts
            // only, however far a bogus line number points.
            for r in rows {
                page.row(&mut out, r.line as usize, Some(r), "");
            }
        }
        None => {
            for r in f.rows.iter() {
                page.row(&mut out, r.line as usize, Some(r), "");
            }
        }
    }
    let _ = writeln!(
        out,
        "</tbody></table></main><script>{FILE_JS}</script></body></html>"
    );
    out
}

/// A file page's header, its stats and switches, and a warning when its
/// source could not be read.
fn file_page_top(out: &mut String, report: &Report, f: &FileInfo, readable: bool) {
    let _ = write!(
        out,
        "<body class=\"self\"><header><a href=\"index.html\">tachyon heatmap</a> › \
         <span class=\"path\">{}</span></header><main>\n\
         <p class=\"stats\"><span><b>{}</b> self samples</span><span><b>{}</b> total samples</span>\
         <span><b>{}</b> lines hit</span><span><b>{:.2}%</b> of samples</span></p>\n\
         <p class=\"bar\"><button id=\"bs\" class=\"on\">Self</button><button id=\"bt\">Total</button>\
         <label><input type=\"checkbox\" id=\"hot\"> hot lines only</label></p>\n",
        escape(&f.name),
        f.self_,
        f.total,
        f.rows.len(),
        pct(f.total, report.stacks),
    );
    if !readable {
        let _ = writeln!(
            out,
            "<p class=\"warn\">Source unavailable: {} could not be read. The lines with samples are listed.</p>",
            escape(&f.name)
        );
    }
}

/// What a file page's rows are drawn with: the report they link into and
/// the file's largest counts, which the colours are relative to.
struct CodeTable<'a> {
    report: &'a Report,
    frames: &'a FrameTable,
    max_self: u64,
    max_total: u64,
}

impl CodeTable<'_> {
    /// Source line `line`, with its counts, links and instructions when
    /// it has samples (`r`).
    fn row(&self, out: &mut String, line: usize, r: Option<&LineRow>, text: &str) {
        let (s, t) = r.map_or((0, 0), |r| (r.self_, r.total));
        let num = |v: u64| if v == 0 { String::new() } else { v.to_string() };
        // Most lines have no samples: no class, the shortest row.
        if t == 0 {
            let _ = write!(
                out,
                "<tr id=\"L{line}\"><td>{line}<td><td><td>{}<td>",
                escape(text)
            );
        } else {
            let _ = write!(
                out,
                "<tr id=\"L{line}\" class=\"s{} t{}\"><td>{line}<td>{}<td>{}<td>{}<td>",
                level(s, self.max_self),
                level(t, self.max_total),
                num(s),
                num(t),
                escape(text)
            );
        }
        if let Some(r) = r {
            let (report, frames) = (self.report, self.frames);
            for &c in &r.callers {
                out.push_str(&nav_link(report, frames, "▲", "called from", c));
            }
            for &c in &r.callees {
                out.push_str(&nav_link(report, frames, "▼", "calls", c));
            }
            if let (Some(t), false) = (report.opcodes, r.ops.is_empty()) {
                out.push_str(&ops_panel(t, &r.ops));
            }
        }
        out.push('\n');
    }
}

/// A line's bytecode panel: the instructions its frames were at, with
/// their samples and share, folded until opened.
fn ops_panel(t: &OpTable, ops: &[(u8, u64)]) -> String {
    let sum: u64 = ops.iter().map(|o| o.1).sum();
    let mut out = format!(
        "<details class=\"ops\"><summary>{} instruction{}</summary><table>",
        ops.len(),
        if ops.len() == 1 { "" } else { "s" }
    );
    for &(op, n) in ops {
        let _ = write!(
            out,
            "<tr><td>{}<td>{n}<td>{:.1}%",
            escape(&t.format(op)),
            pct(n, sum)
        );
    }
    out.push_str("</table></details>");
    out
}

fn index_page(report: &Report, stats: &RunStats) -> String {
    let mut out = head("tachyon heatmap");
    let rate = stats.rate();
    let _ = write!(
        out,
        "<body><header>tachyon heatmap</header><main>\n\
         <p class=\"stats\"><span><b>{}</b> files profiled</span><span><b>{}</b> samples</span>\
         <span><b>{:.2} s</b> duration</span><span><b>{rate:.1}</b> samples/sec</span>\
         <span><b>{:.2}%</b> error rate</span><span><b>{:.2}%</b> missed samples</span>\
         <span>mode <b>{}</b></span></p>\n",
        report.files.len(),
        stats.attempts,
        stats.duration_s,
        stats.error_rate_pct(),
        stats.missed_pct(),
        stats.mode.as_str(),
    );
    if report.files.is_empty() {
        out.push_str("<p class=\"warn\">No samples fell on Python source lines.</p>\n");
    } else {
        out.push_str("<p><input id=\"q\" placeholder=\"filter files\" size=\"40\"></p>\n");
    }
    let max_total = report.files.iter().map(|f| f.total).max().unwrap_or(0);
    for (kind, title) in [
        (Kind::User, "Your code"),
        (Kind::Stdlib, "Standard library"),
        (Kind::ThirdParty, "Installed packages"),
    ] {
        let group: Vec<(usize, &FileInfo)> = report
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kind == kind)
            .collect();
        if group.is_empty() {
            continue;
        }
        let self_sum = group
            .iter()
            .fold(0u64, |a, (_, f)| a.saturating_add(f.self_));
        let _ = write!(
            out,
            "<section><h2>{title} <small>({} file{}, {self_sum} self samples)</small></h2>\n\
             <table class=\"files\"><thead><tr><th>file<th>self<th>total<th>% of samples<th></thead><tbody>\n",
            group.len(),
            if group.len() == 1 { "" } else { "s" },
        );
        for (i, f) in group {
            let width = f
                .total
                .saturating_mul(200)
                .checked_div(max_total)
                .map_or(0, |w| w.max(1));
            let _ = writeln!(
                out,
                "<tr data-n=\"{}\"><td><a href=\"{}\">{}</a><td>{}<td>{}<td>{:.2}%<td><div class=\"fill\" style=\"width:{width}px\"></div>",
                escape(&f.name.to_lowercase()),
                page_name(i),
                escape(&f.name),
                f.self_,
                f.total,
                pct(f.total, report.stacks),
            );
        }
        out.push_str("</tbody></table></section>\n");
    }
    let _ = writeln!(out, "</main><script>{INDEX_JS}</script></body></html>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios::{py, sample};
    use crate::model::Mode;

    fn stats() -> RunStats {
        RunStats {
            interval_us: 1000,
            duration_s: 1.0,
            attempts: 10,
            failures: 0,
            mode: Mode::Wall,
            interrupted: false,
            ..RunStats::default()
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tachyon-heatmap-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn lines_are_counted_recursion_once_and_callers_link_both_ways() {
        let d = scratch("counts");
        let src = d.join("app.py");
        std::fs::write(&src, "def f():\n    g()\ndef g():\n    pass\nf()\n").unwrap();
        let file = src.to_str().unwrap();
        let mut t = FrameTable::new();
        let top = py(&mut t, file, "<module>", 5);
        let f = py(&mut t, file, "f", 2);
        let g = py(&mut t, file, "g", 4);
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let mut c = HeatmapCollector::new(d.join("out"), SourceReader::local());
        for _ in 0..3 {
            c.collect(&sample(&[top, f, g]), &t);
        }
        // Recursion through f counts f's line once per sample.
        c.collect(&sample(&[top, f, f]), &t);
        c.collect(&sample(&[top, gc]), &t);
        let r = c.report(&t);
        assert_eq!(r.files.len(), 1);
        let fi = &r.files[0];
        assert_eq!((fi.self_, fi.total), (5 - 1, 5));
        let rows: Vec<(i32, u64, u64)> =
            fi.rows.iter().map(|r| (r.line, r.self_, r.total)).collect();
        assert_eq!(rows, [(2, 1, 4), (4, 3, 3), (5, 0, 5)]);
        // Per-line self counts add up to the file's.
        assert_eq!(fi.rows.iter().map(|r| r.self_).sum::<u64>(), fi.self_);
        let line2 = &fi.rows[0];
        assert_eq!(line2.callees[0], ((fi.id, 4), 3));
        assert_eq!(line2.callers[0], ((fi.id, 5), 4));

        c.finish(&t, &stats()).unwrap();
        let page = std::fs::read_to_string(d.join("out/file_0000.html")).unwrap();
        assert!(page.contains("<td>4<td>3<td>3<td>    pass<td>"), "{page}");
        assert!(page.contains("href=\"file_0000.html#L4\""));
        assert!(!page.contains("Source unavailable"));
        let index = std::fs::read_to_string(d.join("out/index.html")).unwrap();
        assert!(index.contains("Your code"));
        assert!(index.contains("<a href=\"file_0000.html\">"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn names_and_source_from_the_target_are_escaped_and_missing_source_is_said() {
        let d = scratch("escape");
        let src = d.join("a<b>&\"c\".py");
        std::fs::write(&src, "x = '<script>alert(1)</script>'\n").unwrap();
        let mut t = FrameTable::new();
        let a = py(&mut t, src.to_str().unwrap(), "<lambda>", 1);
        let gone = py(&mut t, "/nonexistent/<gone>.py", "f", 7);
        let mut c = HeatmapCollector::new(d.join("out"), SourceReader::local());
        c.collect(&sample(&[a]), &t);
        c.collect(&sample(&[gone]), &t);
        c.collect(&sample(&[gone]), &t);
        c.finish(&t, &stats()).unwrap();
        let mut all = String::new();
        for name in ["index.html", "file_0000.html", "file_0001.html"] {
            all += &std::fs::read_to_string(d.join("out").join(name)).unwrap();
        }
        assert!(!all.contains("<script>alert"));
        assert!(!all.contains("<gone>") && !all.contains("a<b>"));
        assert!(all.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        // The file with more samples comes first; its source is gone.
        let gone_page = std::fs::read_to_string(d.join("out/file_0000.html")).unwrap();
        assert!(gone_page.contains("Source unavailable"));
        assert!(gone_page.contains("<tr id=\"L7\" class=\"s10 t10\"><td>7<td>2<td>2<td><td>"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_line_past_the_end_of_its_file_is_listed_alone() {
        let d = scratch("past");
        let src = d.join("short.py");
        std::fs::write(&src, "a = 1\nb = 2\n").unwrap();
        let mut t = FrameTable::new();
        let far = py(&mut t, src.to_str().unwrap(), "f", i32::MAX);
        let near = py(&mut t, src.to_str().unwrap(), "f", 2);
        let mut c = HeatmapCollector::new(d.join("out"), SourceReader::local());
        c.collect(&sample(&[near, far]), &t);
        c.finish(&t, &stats()).unwrap();
        let page = std::fs::read_to_string(d.join("out/file_0000.html")).unwrap();
        let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("<tr id=")).collect();
        assert_eq!(rows.len(), 3, "{page}");
        assert!(
            rows[1].contains("<td>2<td><td>1<td>b = 2<td>"),
            "{}",
            rows[1]
        );
        assert!(rows[2].starts_with(&format!("<tr id=\"L{}\"", i32::MAX)));
        assert!(page.len() < 10_000);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_samples_still_writes_an_index_that_says_so() {
        let d = scratch("empty");
        let mut c = HeatmapCollector::new(d.join("out"), SourceReader::local());
        c.finish(&FrameTable::new(), &stats()).unwrap();
        let index = std::fs::read_to_string(d.join("out/index.html")).unwrap();
        assert!(index.contains("No samples fell on Python source lines"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
