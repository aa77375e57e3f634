//! Differential flame graph (`--diff-flamegraph BASELINE.bin`): this run's
//! flame graph, coloured by how each box's self samples changed against a
//! baseline recorded earlier with `--binary`. One self-contained HTML file,
//! drawn by `inferno`'s differential mode with the same page and script as
//! [`super::flamegraph`].
//!
//! * Box **width** is this run's samples (threads merged, as in the plain
//!   flame graph). **Colour** is the change in the box's *self* samples:
//!   red grew, blue shrank, white unchanged; the deepest colour is the
//!   largest change in the graph (inferno's scale).
//! * Frames are matched by `(file, function)` per frame, root first, lines
//!   ignored, as the reference does: a function whose lines moved between
//!   the runs still matches. Boxes are labelled `func (file)`, without a
//!   line, since that is the unit compared.
//! * The baseline's counts are multiplied by `baseline interval / current
//!   interval` (the reference's scale), so a baseline taken at 2 ms counts
//!   double against a run at 1 ms. Runs are not normalised by their length:
//!   a longer run shows growth everywhere, as it does in the reference.
//!   Scaled counts are kept to 1/100 of a sample (inferno reads integer
//!   counts: everything is handed over ×100 and shown ÷100).
//! * Each box's tooltip gives its samples and share, the baseline's
//!   (scaled) samples for the same path, and the self-sample change, e.g.
//!   `work (/app/m.py) (60 samples, 60.00%; baseline 20; self 60 vs 20:
//!   +40, +200.0%)`.
//! * **Call paths only in the baseline** are handled as inferno does: they
//!   have no width in this run, so they are not drawn (they still count
//!   towards the colour scale). The page and the closing line say how many
//!   there were and how many scaled samples they held.
//! * The baseline must have been recorded in the same `--mode` (checked by
//!   [`DiffFlamegraphCollector::check`] before sampling and again at the
//!   end), as the reference requires. Capture settings that change which
//!   stacks or frames exist (`-a`, `--native`, GC frames, `--blocking`)
//!   must match as well; `--opcodes` may differ, since it does not change
//!   the stacks of a graph that ignores lines. Where either side does not
//!   record a setting, nothing is checked.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use inferno::flamegraph::Options;
use inferno::flamegraph::color::{BackgroundColor, Color};

use super::flamegraph::{clean, draw, page, short_file, swatch};
use super::stacks::StackCounts;
use super::{Collector, Output};
use crate::binfmt::CaptureConfig;
use crate::binfmt::reader::BinaryReader;
use crate::error::{Error, Result};
use crate::model::{FrameId, FrameKind, FrameTable, Mode, RunStats, Sample};

/// The page's and the graph's title.
pub const TITLE: &str = "tachyon differential flame graph";

/// Counts are handed to inferno in hundredths of a sample.
const FIXED: f64 = 100.0;

/// The reference's default output name, `diff_flamegraph_<pid>.html`.
pub fn default_output_name(pid: u32) -> String {
    format!("diff_flamegraph_{pid}.html")
}

/// A frame as matched between runs: file and function, lines ignored.
/// Synthetic frames (`<GC>`, `<native>`, unreadable) match by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    file: Option<Box<str>>,
    func: Box<str>,
}

/// Keys interned across both runs.
#[derive(Default)]
struct Keys {
    list: Vec<Key>,
    index: HashMap<Key, u32>,
}

impl Keys {
    fn of(&mut self, frames: &FrameTable, id: FrameId) -> u32 {
        let f = frames.frame(id);
        let (file, func) = (frames.str(f.file), frames.str(f.func));
        let synthetic = f.kind != FrameKind::Python || (file == "~" && f.location.is_none());
        let key = Key {
            file: (!synthetic).then(|| file.into()),
            func: func.into(),
        };
        if let Some(&k) = self.index.get(&key) {
            return k;
        }
        let k = self.list.len() as u32;
        self.list.push(key.clone());
        self.index.insert(key, k);
        k
    }

    /// One label per key, `func (file)`; a key whose short label is taken
    /// by another gets its full path (and, failing that, a number), so no
    /// two keys share a box.
    fn labels(&self) -> Vec<String> {
        let mut used: HashMap<String, ()> = HashMap::new();
        let mut out = Vec::with_capacity(self.list.len());
        for (i, k) in self.list.iter().enumerate() {
            let text = |full: bool| match &k.file {
                None => clean(k.func.to_string()),
                Some(f) if full => clean(format!("{} ({f})", k.func)),
                Some(f) => clean(format!("{} ({})", k.func, short_file(f))),
            };
            let mut l = text(false);
            if used.contains_key(&l) {
                l = text(true);
            }
            if used.contains_key(&l) {
                l = format!("{l} #{i}");
            }
            used.insert(l.clone(), ());
            out.push(l);
        }
        out
    }
}

/// Root-first key paths → samples ending there.
type Paths = HashMap<Box<[u32]>, u64>;

/// The counted stacks as root-first key paths, threads merged; keys are
/// interned in the order first seen, as a streaming count would.
fn key_paths(counts: &StackCounts, frames: &FrameTable, keys: &mut Keys) -> Paths {
    let mut key_of = vec![u32::MAX; frames.len()];
    let mut paths = Paths::new();
    let mut buf = Vec::new();
    for cell in counts.cells() {
        buf.clear();
        for &id in counts.stack(cell.stack).iter().rev() {
            let slot = &mut key_of[id as usize];
            if *slot == u32::MAX {
                *slot = keys.of(frames, id);
            }
            buf.push(*slot);
        }
        match paths.get_mut(&buf[..]) {
            Some(n) => *n += cell.count,
            None => {
                paths.insert(buf.as_slice().into(), cell.count);
            }
        }
    }
    paths
}

/// Renders this run against a baseline `.bin`; see the module
/// documentation.
pub struct DiffFlamegraphCollector {
    output: Output,
    baseline_path: PathBuf,
    baseline_stats: RunStats,
    baseline_mode: Option<Mode>,
    baseline_capture: Option<CaptureConfig>,
    keys: Keys,
    baseline: Paths,
    current: StackCounts,
}

impl DiffFlamegraphCollector {
    /// Read and aggregate the baseline now, so a missing, unreadable or
    /// corrupt file fails before sampling starts, with a one-line error
    /// naming the baseline.
    pub fn new(baseline: &Path, output: Output) -> Result<Self> {
        let named = |e: Error| match e {
            Error::InvalidProfile(msg) => {
                Error::InvalidProfile(format!("baseline {}: {msg}", baseline.display()))
            }
            Error::Io { context, cause } => Error::io(format!("baseline: {context}"), cause),
            e => e,
        };
        let mut reader = BinaryReader::open(baseline).map_err(named)?;
        let info = reader.info().clone();
        let mut counts = StackCounts::new();
        reader.replay(|s, _| counts.add(s)).map_err(named)?;
        let mut keys = Keys::default();
        let paths = key_paths(&counts, reader.frames(), &mut keys);
        Ok(DiffFlamegraphCollector {
            output,
            baseline_path: baseline.to_path_buf(),
            baseline_stats: info.run_stats(),
            baseline_mode: info.mode,
            baseline_capture: info.capture,
            keys,
            baseline: paths,
            current: StackCounts::new(),
        })
    }

    /// Refuse a baseline recorded in another mode or with capture settings
    /// that change the stacks (see the module documentation). Call before
    /// sampling; `finish` checks the mode again.
    pub fn check(&self, mode: Mode, capture: Option<CaptureConfig>) -> Result<()> {
        let name = self.baseline_path.display();
        if let Some(b) = self.baseline_mode
            && b != mode
        {
            return Err(Error::InvalidProfile(format!(
                "baseline {name} was recorded in {} mode, this run is in {} mode: record both with the same --mode",
                b.as_str(),
                mode.as_str()
            )));
        }
        if let (Some(b), Some(c)) = (self.baseline_capture, capture) {
            let differs: Vec<&str> = [
                (b.all_threads != c.all_threads, "all threads (-a)"),
                (b.native != c.native, "--native"),
                (b.gc != c.gc, "GC frames (--no-gc)"),
                (b.blocking != c.blocking, "--blocking"),
            ]
            .into_iter()
            .filter_map(|(d, what)| d.then_some(what))
            .collect();
            if !differs.is_empty() {
                return Err(Error::InvalidProfile(format!(
                    "baseline {name} was recorded with different capture settings ({}): record both the same way",
                    differs.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The scale applied to the baseline: its interval over this run's.
    fn scale(&self, current_interval_us: u64) -> f64 {
        let b = self.baseline_stats.interval_us;
        if b == 0 || current_interval_us == 0 {
            1.0
        } else {
            b as f64 / current_interval_us as f64
        }
    }

    /// The page and the numbers for the closing line; `None` when this run
    /// has no samples.
    fn render(
        &mut self,
        frames: &FrameTable,
        stats: &RunStats,
    ) -> Result<Option<(String, Summary)>> {
        let scale = self.scale(stats.interval_us);
        let current = key_paths(&self.current, frames, &mut self.keys);
        let tree = Tree::build(&current, &self.baseline, scale, &self.keys);
        let root = &tree.nodes[0];
        if root.cur_total == 0 {
            return Ok(None);
        }
        let mut sum = Summary {
            current: root.cur_total,
            baseline: self.baseline.values().sum(),
            scale,
            grew: 0,
            shrank: 0,
            vanished: 0,
            vanished_samples: 0.0,
        };
        for n in &tree.nodes[1..] {
            if n.cur_total == 0 {
                if n.base_self > 0.0 {
                    sum.vanished += 1;
                    sum.vanished_samples += n.base_self;
                }
                continue;
            }
            let d = n.cur_self as f64 - n.base_self;
            if d >= 0.005 {
                sum.grew += 1;
            } else if d <= -0.005 {
                sum.shrank += 1;
            }
        }
        let (lines, at) = tree.folded_lines();

        let mut opts = Options::default();
        opts.title = TITLE.to_string();
        opts.subtitle = Some(subtitle(stats, &self.baseline_stats, &sum));
        opts.bgcolors = Some(BackgroundColor::Grey);
        opts.deterministic = true;
        opts.factor = 1.0 / FIXED;
        let svg = draw(&mut opts, &lines, "differential flame graph")?;
        let svg = retitle(&svg, &tree, &at);
        Ok(Some((html_page(&svg, &sum), sum)))
    }
}

impl Collector for DiffFlamegraphCollector {
    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        self.current.add(sample);
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        self.check(stats.mode, None)?;
        let on_stdout = self.output == Output::Stdout;
        let say = move |s: String| {
            if on_stdout {
                crate::errln!("{s}")
            } else {
                crate::outln!("{s}")
            }
        };
        let Some((html, sum)) = self.render(frames, stats)? else {
            say("Warning: No functions found in profiling data. \
                 Check if sampling captured any data. No flame graph written."
                .into());
            return Ok(());
        };
        say(sum.line());
        self.output.write(html.as_bytes(), "Flamegraph saved to: ")
    }
}

/// What the closing line and the page report.
struct Summary {
    current: u64,
    /// Unscaled.
    baseline: u64,
    scale: f64,
    /// Drawn boxes whose self samples grew / shrank.
    grew: usize,
    shrank: usize,
    /// Call paths with samples only in the baseline, and their scaled
    /// samples.
    vanished: usize,
    vanished_samples: f64,
}

impl Summary {
    fn line(&self) -> String {
        let mut s = format!(
            "Differential flame graph: {} current samples vs {} baseline samples (×{} = {}); {} frame{} grew, {} shrank",
            self.current,
            self.baseline,
            num(self.scale),
            num(self.baseline as f64 * self.scale),
            self.grew,
            if self.grew == 1 { "" } else { "s" },
            self.shrank,
        );
        if self.vanished > 0 {
            let _ = write!(
                s,
                "; {} call path{} only in the baseline ({} samples) not drawn",
                self.vanished,
                if self.vanished == 1 { "" } else { "s" },
                num(self.vanished_samples)
            );
        }
        s
    }
}

/// A count for people: integral values without decimals, others with
/// up to two.
fn num(x: f64) -> String {
    if (x - x.round()).abs() < 0.005 {
        format!("{}", x.round() as i64)
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').to_string()
    }
}

fn interval(us: u64) -> String {
    match us {
        0 => "?".to_string(),
        us if us % 1000 == 0 => format!("{} ms", us / 1000),
        us => format!("{us} µs"),
    }
}

/// The line under the title: both runs and the scale.
fn subtitle(cur: &RunStats, base: &RunStats, sum: &Summary) -> String {
    format!(
        "current {} samples in {:.2} s at {} · baseline {} samples in {:.2} s at {}, scaled ×{} · mode {} · red: more self samples, blue: fewer",
        sum.current,
        cur.duration_s,
        interval(cur.interval_us),
        sum.baseline,
        base.duration_s,
        interval(base.interval_us),
        num(sum.scale),
        cur.mode.as_str(),
    )
}

#[derive(Default)]
struct Node {
    /// `u32::MAX` for the root.
    key: u32,
    cur_self: u64,
    cur_total: u64,
    /// Scaled.
    base_self: f64,
    base_total: f64,
    children: Vec<usize>,
}

/// Both runs merged into one tree over keys.
struct Tree {
    nodes: Vec<Node>,
    labels: Vec<String>,
}

impl Tree {
    fn build(cur: &Paths, base: &Paths, scale: f64, keys: &Keys) -> Tree {
        let mut nodes = vec![Node {
            key: u32::MAX,
            ..Node::default()
        }];
        let mut index: HashMap<(usize, u32), usize> = HashMap::new();
        let mut all: Vec<(&[u32], u64, bool)> = cur
            .iter()
            .map(|(p, &n)| (&p[..], n, true))
            .chain(base.iter().map(|(p, &n)| (&p[..], n, false)))
            .collect();
        all.sort_unstable();
        for (path, n, is_cur) in all {
            let mut node = 0;
            for &k in path {
                node = match index.get(&(node, k)) {
                    Some(&c) => c,
                    None => {
                        let c = nodes.len();
                        nodes.push(Node {
                            key: k,
                            ..Node::default()
                        });
                        nodes[node].children.push(c);
                        index.insert((node, k), c);
                        c
                    }
                };
            }
            if is_cur {
                nodes[node].cur_self += n;
            } else {
                nodes[node].base_self += n as f64 * scale;
            }
        }
        // Children come after their parents: sum bottom-up.
        for i in (0..nodes.len()).rev() {
            let (mut c, mut b) = (nodes[i].cur_self, nodes[i].base_self);
            for &ch in &nodes[i].children {
                c += nodes[ch].cur_total;
                b += nodes[ch].base_total;
            }
            nodes[i].cur_total = c;
            nodes[i].base_total = b;
        }
        let labels = keys.labels();
        // Widest first (this run, then the baseline), then by label.
        for i in 0..nodes.len() {
            let mut ch = std::mem::take(&mut nodes[i].children);
            ch.sort_by(|&a, &b| {
                let (a, b) = (&nodes[a], &nodes[b]);
                b.cur_total
                    .cmp(&a.cur_total)
                    .then(b.base_total.total_cmp(&a.base_total))
                    .then_with(|| labels[a.key as usize].cmp(&labels[b.key as usize]))
            });
            nodes[i].children = ch;
        }
        Tree { nodes, labels }
    }

    /// `stack before after` lines (hundredths of samples) in depth-first
    /// order, and where each drawn box lands: (depth, start) → node.
    fn folded_lines(&self) -> (Vec<String>, HashMap<(usize, u64), usize>) {
        let mut lines = Vec::new();
        let mut at = HashMap::new();
        let mut path: Vec<u32> = Vec::new();
        let mut x: u64 = 0;
        let mut todo: Vec<(usize, usize)> = self.nodes[0]
            .children
            .iter()
            .rev()
            .map(|&c| (c, 1))
            .collect();
        while let Some((i, depth)) = todo.pop() {
            let node = &self.nodes[i];
            path.truncate(depth - 1);
            path.push(node.key);
            if node.cur_total > 0 {
                at.insert((depth, x), i);
            }
            if node.cur_self > 0 || node.base_self > 0.0 {
                let mut line = String::new();
                for (k, &key) in path.iter().enumerate() {
                    if k > 0 {
                        line.push(';');
                    }
                    line.push_str(&self.labels[key as usize]);
                }
                let after = node.cur_self * FIXED as u64;
                let before = (node.base_self * FIXED).round() as u64;
                let _ = write!(line, " {before} {after}");
                lines.push(line);
                x += after;
            }
            todo.extend(node.children.iter().rev().map(|&c| (c, depth + 1)));
        }
        at.insert((0, 0), 0);
        (lines, at)
    }

    /// A box's tooltip.
    fn title(&self, i: usize) -> String {
        let n = &self.nodes[i];
        let total = self.nodes[0].cur_total as f64;
        if i == 0 {
            return format!(
                "all ({} samples, 100%; baseline {})",
                n.cur_total,
                num(n.base_total)
            );
        }
        let d = n.cur_self as f64 - n.base_self;
        let pct = if n.base_self > 0.0 {
            format!("{:+.1}%", d * 100.0 / n.base_self)
        } else if n.cur_self > 0 {
            "new".to_string()
        } else {
            "+0.0%".to_string()
        };
        let sign = if d >= 0.005 { "+" } else { "" };
        format!(
            "{} ({} samples, {:.2}%; baseline {}; self {} vs {}: {sign}{}, {pct})",
            self.labels[n.key as usize],
            n.cur_total,
            n.cur_total as f64 * 100.0 / total,
            num(n.base_total),
            n.cur_self,
            num(n.base_self),
            num(d),
        )
    }
}

/// The value of attribute `name` in the tag `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let pat = format!(" {name}=\"");
    let start = tag.find(&pat)? + pat.len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// Replace inferno's tooltips (`name (N samples, P%; +D%)`) with ours,
/// which add the baseline's samples and the self-sample change. A box is
/// found by its depth (the rank of its `y`, root lowest) and its start
/// (`fg:x`); one not found keeps inferno's text.
fn retitle(svg: &str, tree: &Tree, at: &HashMap<(usize, u64), usize>) -> String {
    const OPEN: &str = "<g><title>";
    // (title start, title end, y, fg:x) per box.
    let mut boxes: Vec<(usize, usize, f64, u64)> = Vec::new();
    let mut pos = 0;
    while let Some(o) = svg[pos..].find(OPEN) {
        let start = pos + o + OPEN.len();
        let Some(len) = svg[start..].find("</title>") else {
            break;
        };
        let end = start + len;
        pos = end;
        let Some(r) = svg[end..].find("<rect ") else {
            break;
        };
        let rect = &svg[end + r..];
        let rect = &rect[..rect.find("/>").unwrap_or(rect.len())];
        let (Some(y), Some(x)) = (
            attr(rect, "y").and_then(|v| v.parse::<f64>().ok()),
            attr(rect, "fg:x").and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        boxes.push((start, end, y, x));
    }
    let mut ys: Vec<f64> = boxes.iter().map(|b| b.2).collect();
    ys.sort_by(|a, b| b.total_cmp(a));
    ys.dedup();
    let mut out = String::with_capacity(svg.len() + boxes.len() * 40);
    let mut last = 0;
    for (start, end, y, x) in boxes {
        let depth = ys.iter().position(|&v| v == y).unwrap_or(usize::MAX);
        if let Some(&i) = at.get(&(depth, x)) {
            out.push_str(&svg[last..start]);
            out.push_str(&escape(&tree.title(i)));
            last = end;
        }
    }
    out.push_str(&svg[last..]);
    out
}

pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// The page: the SVG inline (its script runs there too), then a legend.
fn html_page(svg: &str, sum: &Summary) -> String {
    let mut legend = [
        swatch(
            Color {
                r: 255,
                g: 90,
                b: 90,
            },
            "more self samples than the baseline",
        ),
        swatch(
            Color {
                r: 90,
                g: 90,
                b: 255,
            },
            "fewer",
        ),
        swatch(
            Color {
                r: 255,
                g: 255,
                b: 255,
            },
            "unchanged",
        ),
    ]
    .join("\n");
    if sum.vanished > 0 {
        let _ = write!(
            legend,
            "\n<span class=\"key\">{} call path{} seen only in the baseline ({} samples after scaling) ha{} no width here and {} not drawn</span>",
            sum.vanished,
            if sum.vanished == 1 { "" } else { "s" },
            num(sum.vanished_samples),
            if sum.vanished == 1 { "s" } else { "ve" },
            if sum.vanished == 1 { "is" } else { "are" },
        );
    }
    page(TITLE, svg, &legend, HELP)
}

const HELP: &str = "Box width is this run's samples, summed over threads; colour is the change in a box's self samples against the baseline (scaled by the ratio of the sampling intervals), frames matched by file and function, lines ignored. Click a box to zoom in, \"Reset Zoom\" to zoom out; Ctrl-F or \"Search\" to highlight functions by regular expression.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::Collector;
    use crate::collect::binary::{BinaryCollector, BinaryOptions};
    use crate::collect::scenarios::{py, sample};

    fn stats(interval_us: u64, n: u64, mode: Mode) -> RunStats {
        RunStats {
            interval_us,
            duration_s: n as f64 * interval_us as f64 / 1e6,
            attempts: n,
            failures: 0,
            mode,
            interrupted: false,
        }
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tachyon-diff-{}-{name}", std::process::id()))
    }

    /// A baseline at `interval_us`: `work` 10, `parse` 20, `gone` 5
    /// samples under `main`.
    fn baseline(name: &str, interval_us: u64, mode: Mode, capture: CaptureConfig) -> PathBuf {
        let path = temp(name);
        let mut t = FrameTable::new();
        let main = py(&mut t, "/app/main.py", "main", 1);
        let work = py(&mut t, "/app/main.py", "work", 3);
        let parse = py(&mut t, "/usr/lib/python3.15/json/decoder.py", "decode", 353);
        let gone = py(&mut t, "/app/main.py", "gone", 30);
        let mut c = BinaryCollector::new(
            Output::File(path.clone()),
            BinaryOptions {
                capture: Some(capture),
                ..BinaryOptions::default()
            },
        )
        .unwrap();
        c.print_encoding_stats = false;
        for (stack, n) in [([main, work], 10), ([main, parse], 20), ([main, gone], 5)] {
            for _ in 0..n {
                c.collect(&sample(&stack), &t);
            }
        }
        c.finish(&t, &stats(interval_us, 35, mode)).unwrap();
        path
    }

    /// The current run: `work` 60 (its line moved), `decode` 10, `main`
    /// itself 5.
    fn current(c: &mut DiffFlamegraphCollector) -> FrameTable {
        let mut t = FrameTable::new();
        // Other ids than the baseline's, on purpose.
        let _pad = py(&mut t, "/app/other.py", "pad", 1);
        let main = py(&mut t, "/app/main.py", "main", 2);
        let work = py(&mut t, "/app/main.py", "work", 4);
        let parse = py(&mut t, "/usr/lib/python3.15/json/decoder.py", "decode", 360);
        for (stack, n) in [(&[main, work][..], 60), (&[main, parse], 10), (&[main], 5)] {
            for _ in 0..n {
                c.collect(&sample(stack), &t);
            }
        }
        t
    }

    /// Each box's title and fill, from the SVG.
    fn boxes(svg: &str) -> Vec<(String, (u8, u8, u8))> {
        let mut out = Vec::new();
        for part in svg.split("<g><title>").skip(1) {
            let title = &part[..part.find("</title>").unwrap()];
            let f = part.find("fill=\"rgb(").unwrap() + "fill=\"rgb(".len();
            let rgb: Vec<u8> = part[f..f + part[f..].find(')').unwrap()]
                .split(',')
                .map(|x| x.trim().parse().unwrap())
                .collect();
            out.push((title.to_string(), (rgb[0], rgb[1], rgb[2])));
        }
        out
    }

    fn find<'a>(b: &'a [(String, (u8, u8, u8))], prefix: &str) -> &'a (String, (u8, u8, u8)) {
        b.iter()
            .find(|(t, _)| t.starts_with(prefix))
            .unwrap_or_else(|| panic!("no box {prefix}: {b:?}"))
    }

    #[test]
    fn grown_is_red_shrunk_is_blue_with_interval_scaling() {
        let path = baseline("scale.bin", 2000, Mode::Cpu, CaptureConfig::default());
        let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout).unwrap();
        let _ = std::fs::remove_file(&path);
        c.check(Mode::Cpu, Some(CaptureConfig::default())).unwrap();
        let t = current(&mut c);
        let (page, sum) = c.render(&t, &stats(1000, 75, Mode::Cpu)).unwrap().unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>tachyon differential flame graph</title>"));
        let start = page.find("<svg").unwrap();
        let svg = &page[start..page.rfind("</svg>").unwrap() + 6];
        assert!(svg.contains("onload=\"init(evt)\""));
        assert!(svg.contains(super::super::flamegraph::ZOOM_LOOKUP_HTML));
        let b = boxes(svg);
        // Baseline ×2: work 20 → 60, decode 40 → 10, gone 10 → (not drawn).
        let (work_t, work_c) = find(&b, "work (/app/main.py)");
        assert_eq!(
            work_t,
            "work (/app/main.py) (60 samples, 80.00%; baseline 20; self 60 vs 20: +40, +200.0%)"
        );
        assert!(work_c.0 == 255 && work_c.2 < 200, "grew is red: {work_c:?}");
        let (dec_t, dec_c) = find(&b, "decode (");
        assert_eq!(
            dec_t,
            "decode (/usr/lib/python3.15/json/decoder.py) (10 samples, 13.33%; baseline 40; self 10 vs 40: -30, -75.0%)"
        );
        assert!(dec_c.2 == 255 && dec_c.0 < 255, "shrank is blue: {dec_c:?}");
        // The strongest change gets the deepest colour.
        assert!(work_c.1 < dec_c.1, "{work_c:?} vs {dec_c:?}");
        let (main_t, main_c) = find(&b, "main (/app/main.py)");
        assert_eq!(
            main_t,
            "main (/app/main.py) (75 samples, 100.00%; baseline 70; self 5 vs 0: +5, new)"
        );
        assert!(main_c.0 == 255 && main_c.1 > work_c.1, "{main_c:?}");
        assert_eq!(find(&b, "all (").0, "all (75 samples, 100%; baseline 70)");
        assert!(!svg.contains("gone"), "baseline-only paths are not drawn");
        assert_eq!(b.len(), 4);
        // Subtitle and summary.
        assert!(svg.contains(
            "current 75 samples in 0.07 s at 1 ms · baseline 35 samples in 0.07 s at 2 ms, scaled ×2 · mode cpu"
        ), "{svg}");
        assert_eq!(
            sum.line(),
            "Differential flame graph: 75 current samples vs 35 baseline samples (×2 = 70); 2 frames grew, 1 shrank; 1 call path only in the baseline (10 samples) not drawn"
        );
        assert!(page.contains("1 call path seen only in the baseline (10 samples after scaling)"));
    }

    #[test]
    fn finer_baseline_scales_down_and_keeps_fractions() {
        let path = baseline("half.bin", 500, Mode::Wall, CaptureConfig::default());
        let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout).unwrap();
        let _ = std::fs::remove_file(&path);
        let t = current(&mut c);
        let (page, sum) = c.render(&t, &stats(1000, 75, Mode::Wall)).unwrap().unwrap();
        assert_eq!(sum.scale, 0.5);
        let b = boxes(&page);
        // decode: 20 × 0.5 = 10 → unchanged, (inferno's) white.
        let (dec_t, dec_c) = find(&b, "decode (");
        assert!(dec_t.ends_with("self 10 vs 10: 0, +0.0%)"), "{dec_t}");
        assert!(
            dec_c.0 >= 250 && dec_c.0 == dec_c.1 && dec_c.1 == dec_c.2,
            "{dec_c:?}"
        );
        // gone: 5 × 0.5 = 2.5 samples.
        assert!(
            sum.line().ends_with("(2.5 samples) not drawn"),
            "{}",
            sum.line()
        );
    }

    #[test]
    fn mode_mismatch_is_refused() {
        let path = baseline("mode.bin", 1000, Mode::Wall, CaptureConfig::default());
        let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout).unwrap();
        let _ = std::fs::remove_file(&path);
        let e = c.check(Mode::Cpu, None).unwrap_err().to_string();
        assert!(e.contains("wall mode, this run is in cpu mode"), "{e}");
        assert!(!e.contains('\n'));
        current(&mut c);
        let e = c
            .finish(&FrameTable::new(), &stats(1000, 75, Mode::Cpu))
            .unwrap_err();
        assert!(e.to_string().contains("--mode"), "{e}");
    }

    #[test]
    fn capture_mismatch_is_refused_but_opcodes_may_differ() {
        let path = baseline("cap.bin", 1000, Mode::Wall, CaptureConfig::default());
        let c = DiffFlamegraphCollector::new(&path, Output::Stdout).unwrap();
        let _ = std::fs::remove_file(&path);
        let e = c
            .check(
                Mode::Wall,
                Some(CaptureConfig {
                    all_threads: true,
                    ..CaptureConfig::default()
                }),
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("different capture settings (all threads (-a))"),
            "{e}"
        );
        c.check(
            Mode::Wall,
            Some(CaptureConfig {
                opcodes: true,
                ..CaptureConfig::default()
            }),
        )
        .unwrap();
        c.check(Mode::Wall, None).unwrap();
    }

    #[test]
    fn missing_and_corrupt_baselines_fail_in_one_line() {
        let missing = temp("missing.bin");
        let e = DiffFlamegraphCollector::new(&missing, Output::Stdout)
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("baseline: cannot open"), "{e}");
        assert!(!e.contains('\n'));
        let junk = temp("junk.bin");
        std::fs::write(&junk, b"this is not a profile at all, just some text").unwrap();
        let e = DiffFlamegraphCollector::new(&junk, Output::Stdout)
            .err()
            .unwrap()
            .to_string();
        let _ = std::fs::remove_file(&junk);
        assert!(
            e.starts_with(&format!("baseline {}: ", junk.display())),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn writes_the_file_and_nothing_when_empty() {
        let path = baseline("write.bin", 1000, Mode::Wall, CaptureConfig::default());
        let out = temp("out.html");
        let mut c = DiffFlamegraphCollector::new(&path, Output::File(out.clone())).unwrap();
        c.finish(&FrameTable::new(), &stats(1000, 0, Mode::Wall))
            .unwrap();
        assert!(!out.exists(), "no samples, no file");
        let mut c = DiffFlamegraphCollector::new(&path, Output::File(out.clone())).unwrap();
        let _ = std::fs::remove_file(&path);
        let t = current(&mut c);
        c.finish(&t, &stats(1000, 75, Mode::Wall)).unwrap();
        let got = std::fs::read_to_string(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert!(got.trim_end().ends_with("</html>"));
        assert!(got.contains("work (/app/main.py)"));
        assert_eq!(default_output_name(42), "diff_flamegraph_42.html");
    }

    #[test]
    fn colliding_short_labels_stay_apart() {
        let mut keys = Keys::default();
        let mut t = FrameTable::new();
        let a = py(
            &mut t,
            "/home/someone/projects/number/one/very/long/pkg/mod.py",
            "f",
            1,
        );
        let b = py(
            &mut t,
            "/home/someone/projects/number/two/very/long/pkg/mod.py",
            "f",
            1,
        );
        keys.of(&t, a);
        keys.of(&t, b);
        let l = keys.labels();
        assert_eq!(l[0], "f (.../pkg/mod.py)");
        assert_eq!(
            l[1],
            "f (/home/someone/projects/number/two/very/long/pkg/mod.py)"
        );
    }
}
