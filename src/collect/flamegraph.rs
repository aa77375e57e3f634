//! Flame graph (`--flamegraph`): one self-contained HTML file holding an
//! interactive SVG drawn by the `inferno` crate (click to zoom, Ctrl-F or the
//! "Search" button for a regex search, tooltips, "Reset Zoom"), as the
//! reference writes one self-contained HTML file.
//!
//! * Samples are counted by frame-id sequence per thread (no strings per
//!   sample, as in [`super::collapsed`]); labels are built once per frame at
//!   the end.
//! * A frame is labelled `func (file:line)`, the file shortened to
//!   `.../dir/name.py` when longer than 50 characters (the reference's
//!   rule); synthetic frames (`<GC>`, `<native>`) and unreadable ones carry
//!   just their name. Frames with the same label at the same place in the
//!   tree are one box, so frames differing only in column merge, as in the
//!   reference's tree keyed by `(file, line, func)`.
//! * Threads are merged by default, like the reference's tree: a box's width
//!   is its samples summed over threads (with `-a`, thread-samples).
//!   [`FlamegraphCollector::with_thread_roots`] puts a `thread <tid>` box
//!   under each thread's stacks instead.
//! * Siblings are ordered widest first (the reference's order), not
//!   alphabetically as `flamegraph.pl` does.
//! * Colours follow the frame's file: your code in reds, the standard
//!   library in yellows, installed packages (`site-packages`,
//!   `dist-packages`) in aquas; the shade is a hash of file and function, so
//!   a function keeps its colour between runs. `<GC>` is green, `<native>`
//!   blue, unreadable frames grey.
//! * Boxes narrower than 0.01% of the total are not drawn (0.05% above 5,000
//!   distinct stacks, 0.1% above 20,000) to keep big profiles loadable; the
//!   reference drops nodes under 0.1%.

use std::collections::HashMap;
use std::fmt::Write as _;

use inferno::flamegraph::color::{BackgroundColor, Color, PaletteMap};
use inferno::flamegraph::{self as inferno_fg, Options, Palette, TextTruncateDirection};

use super::stacks::StackCounts;
use super::{Collector, Output, RunStats};
use crate::error::{Error, Result};
use crate::model::{FrameId, FrameKind, FrameTable, Sample, status};

/// The page's and the graph's title.
pub const TITLE: &str = "tachyon flame graph";

/// Counts distinct stacks per thread and renders them as an HTML flame
/// graph; see the module documentation.
pub struct FlamegraphCollector {
    output: Output,
    thread_roots: bool,
    counts: StackCounts,
    /// Threads seen with the main-thread flag.
    main_threads: Vec<u64>,
}

impl FlamegraphCollector {
    pub fn new(output: Output) -> Self {
        FlamegraphCollector {
            output,
            thread_roots: false,
            counts: StackCounts::new(),
            main_threads: Vec::new(),
        }
    }

    /// One tower per thread, under a `thread <tid>` box, instead of all
    /// threads merged (the default).
    pub fn with_thread_roots(mut self, on: bool) -> Self {
        self.thread_roots = on;
        self
    }

    /// The call tree, labelled; `None` when nothing was sampled.
    fn tree(&self, frames: &FrameTable) -> Option<Tree> {
        let mut tree = Tree::default();
        tree.nodes.push(Node::default());
        let mut label_of: Vec<u32> = vec![u32::MAX; frames.len()];
        // Threads in id order, each one's stacks in frame order: the same
        // tree, box for box, whatever order the samples came in.
        let mut cells: Vec<(u64, &[FrameId], u64)> = self
            .counts
            .cells()
            .iter()
            .map(|c| (c.tid, self.counts.stack(c.stack), c.count))
            .collect();
        cells.sort_unstable();
        let mut thread_base: Option<(u64, usize)> = None;
        for (tid, stack, n) in cells {
            let base = if !self.thread_roots {
                0
            } else if let Some((t, b)) = thread_base
                && t == tid
            {
                b
            } else {
                let main = if self.main_threads.contains(&tid) {
                    " (main)"
                } else {
                    ""
                };
                let label = tree.intern(format!("thread {tid}{main}"), Kind::Thread);
                let b = tree.child(0, label);
                thread_base = Some((tid, b));
                b
            };
            let mut node = base;
            for &id in stack.iter().rev() {
                let slot = &mut label_of[id as usize];
                if *slot == u32::MAX {
                    let (text, kind) = label(frames, id);
                    *slot = tree.intern(text, kind);
                }
                node = tree.child(node, *slot);
            }
            tree.nodes[node].self_samples += n;
            tree.total += n;
        }
        if tree.total == 0 {
            return None;
        }
        tree.sum_totals();
        Some(tree)
    }

    /// The HTML page and the numbers for the closing message; `None` when
    /// nothing was sampled.
    fn render(&self, frames: &FrameTable, stats: &RunStats) -> Result<Option<(String, Summary)>> {
        let Some(tree) = self.tree(frames) else {
            return Ok(None);
        };
        let lines = tree.folded_lines();
        let summary = Summary {
            roots: tree.nodes[0].children.len(),
            samples: tree.total,
            frames: tree.labels.len(),
        };

        let mut palette = PaletteMap::default();
        // inferno's root box ("all") has the empty name.
        palette.insert("", ROOT_COLOR);
        for (text, &kind) in tree.labels.iter().zip(&tree.kinds) {
            palette.insert(text, color_for(kind, text));
        }
        let mut opts = Options::default();
        opts.title = TITLE.to_string();
        opts.subtitle = Some(subtitle(stats, self.counts.threads()));
        opts.colors = Palette::Multi(inferno_fg::color::MultiPalette::Python);
        opts.bgcolors = Some(BackgroundColor::Grey);
        opts.deterministic = true;
        opts.palette_map = Some(&mut palette);
        let svg = draw(&mut opts, &lines, "flame graph")?;
        Ok(Some((html_page(&svg), summary)))
    }
}

/// What the closing message reports.
struct Summary {
    roots: usize,
    samples: u64,
    frames: usize,
}

impl Collector for FlamegraphCollector {
    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        for t in &sample.threads {
            if t.status & status::MAIN_THREAD != 0 && !self.main_threads.contains(&t.tid) {
                self.main_threads.push(t.tid);
            }
        }
        self.counts.add(sample);
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        // With the page on stdout, the messages go to stderr.
        let say = |s: String| match self.output {
            Output::Stdout => crate::errln!("{s}"),
            Output::File(_) => crate::outln!("{s}"),
        };
        let Some((html, sum)) = self.render(frames, stats)? else {
            say("Flamegraph data: 0 root functions, 0 total samples, 0 unique frames".into());
            say("Warning: No functions found in profiling data. \
                 Check if sampling captured any data. No flame graph written."
                .into());
            return Ok(());
        };
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        say(format!(
            "Flamegraph data: {} root function{}, {} total sample{}, {} unique frame{}",
            sum.roots,
            plural(sum.roots as u64),
            sum.samples,
            plural(sum.samples),
            sum.frames,
            plural(sum.frames as u64),
        ));
        self.output.write(html.as_bytes(), "Flamegraph saved to: ")
    }
}

/// What a box stands for, which decides its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    User,
    Stdlib,
    ThirdParty,
    Gc,
    Native,
    Unreadable,
    Thread,
}

#[derive(Default)]
struct Node {
    label: u32,
    self_samples: u64,
    total: u64,
    children: Vec<usize>,
}

/// The call tree over interned labels.
#[derive(Default)]
struct Tree {
    nodes: Vec<Node>,
    /// node → label → child node.
    child_index: HashMap<(usize, u32), usize>,
    labels: Vec<String>,
    kinds: Vec<Kind>,
    label_index: HashMap<String, u32>,
    total: u64,
}

impl Tree {
    fn intern(&mut self, text: String, kind: Kind) -> u32 {
        if let Some(&id) = self.label_index.get(&text) {
            return id;
        }
        let id = self.labels.len() as u32;
        self.labels.push(text.clone());
        self.kinds.push(kind);
        self.label_index.insert(text, id);
        id
    }

    fn child(&mut self, parent: usize, label: u32) -> usize {
        if let Some(&c) = self.child_index.get(&(parent, label)) {
            return c;
        }
        let c = self.nodes.len();
        self.nodes.push(Node {
            label,
            ..Node::default()
        });
        self.nodes[parent].children.push(c);
        self.child_index.insert((parent, label), c);
        c
    }

    /// Fill in `total` bottom-up (children always come after their parent)
    /// and order siblings widest first, then by label.
    fn sum_totals(&mut self) {
        for i in (0..self.nodes.len()).rev() {
            let below: u64 = self.nodes[i]
                .children
                .iter()
                .map(|&c| self.nodes[c].total)
                .sum();
            self.nodes[i].total = self.nodes[i].self_samples + below;
        }
        for i in 0..self.nodes.len() {
            let mut children = std::mem::take(&mut self.nodes[i].children);
            children.sort_by(|&a, &b| {
                let (a, b) = (&self.nodes[a], &self.nodes[b]);
                b.total
                    .cmp(&a.total)
                    .then_with(|| self.labels[a.label as usize].cmp(&self.labels[b.label as usize]))
            });
            self.nodes[i].children = children;
        }
    }

    /// `root;...;leaf count` lines in depth-first order, so `inferno`
    /// lays the boxes out in the tree's order.
    fn folded_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut path: Vec<u32> = Vec::new();
        let mut todo: Vec<(usize, usize)> = self.nodes[0]
            .children
            .iter()
            .rev()
            .map(|&c| (c, 0))
            .collect();
        while let Some((i, depth)) = todo.pop() {
            let node = &self.nodes[i];
            path.truncate(depth);
            path.push(node.label);
            if node.self_samples > 0 {
                let mut line = String::new();
                for (k, &l) in path.iter().enumerate() {
                    if k > 0 {
                        line.push(';');
                    }
                    line.push_str(&self.labels[l as usize]);
                }
                let _ = write!(line, " {}", node.self_samples);
                out.push(line);
            }
            todo.extend(node.children.iter().rev().map(|&c| (c, depth + 1)));
        }
        out
    }
}

/// A frame's label and kind.
fn label(frames: &FrameTable, id: FrameId) -> (String, Kind) {
    let f = frames.frame(id);
    let (file, func) = (frames.str(f.file), frames.str(f.func));
    let synthetic = file == "~" && f.location.is_none();
    let kind = match f.kind {
        FrameKind::Gc => Kind::Gc,
        FrameKind::Native => Kind::Native,
        FrameKind::Unreadable => Kind::Unreadable,
        FrameKind::Python if synthetic => Kind::Native,
        FrameKind::Python => classify(file),
    };
    let text = if synthetic || f.kind != FrameKind::Python {
        func.to_string()
    } else {
        format!("{func} ({}:{})", short_file(file), f.line())
    };
    (clean(text), kind)
}

/// The reference's shortening: a path over 50 characters becomes
/// `.../<parent>/<name>`.
pub(super) fn short_file(file: &str) -> std::borrow::Cow<'_, str> {
    if file.chars().count() > 50 {
        let parts: Vec<&str> = file.split('/').collect();
        if parts.len() > 2 {
            let n = parts.len();
            return format!(".../{}/{}", parts[n - 2], parts[n - 1]).into();
        }
    }
    file.into()
}

/// Make a label safe for a folded line: `;` separates frames there, and
/// control characters have no place in XML.
pub(super) fn clean(text: String) -> String {
    if text.is_empty() {
        return "<unnamed>".into();
    }
    if !text.chars().any(|c| c == ';' || c.is_control()) {
        return text;
    }
    text.chars()
        .map(|c| match c {
            ';' => '\u{ff1b}', // fullwidth semicolon
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// User code, the standard library or an installed package, by path.
pub(crate) fn classify(file: &str) -> Kind {
    let mut parts = file.split(['/', '\\']);
    if file
        .split(['/', '\\'])
        .any(|p| p == "site-packages" || p == "dist-packages")
    {
        return Kind::ThirdParty;
    }
    let stdlib_dir = |p: &str| {
        p.strip_prefix("python").is_some_and(|v| {
            let mut v = v.split('.');
            matches!((v.next(), v.next(), v.next()),
                (Some(major), Some(minor), None)
                    if !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit())
                        && minor.bytes().take_while(u8::is_ascii_digit).count() > 0)
        })
    };
    if file.starts_with("<frozen") || parts.any(stdlib_dir) {
        Kind::Stdlib
    } else {
        Kind::User
    }
}

/// The root box's colour.
const ROOT_COLOR: Color = Color {
    r: 200,
    g: 200,
    b: 200,
};

/// `<GC>`'s colour, also used in tests.
const GC_COLOR: Color = Color {
    r: 60,
    g: 170,
    b: 90,
};

/// A box's colour: the hue from its kind, the shade from its function and
/// file (the label without its line number), so it is stable across runs.
fn color_for(kind: Kind, label: &str) -> Color {
    let key = match label.rfind(':') {
        Some(i) if label.ends_with(')') => &label[..i],
        _ => label,
    };
    // FNV-1a: stable across machines and runs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let v = (h >> 40) as f32 / (1u64 << 24) as f32; // 0..1
    let w = ((h >> 16) & 0xff_ffff) as f32 / (1u64 << 24) as f32;
    let s = |base: u8, span: f32, x: f32| base.saturating_add((span * x) as u8);
    match kind {
        Kind::User => Color {
            r: s(205, 50.0, v),
            g: s(75, 90.0, w),
            b: s(45, 40.0, v),
        },
        Kind::Stdlib => Color {
            r: s(200, 40.0, v),
            g: s(180, 50.0, v),
            b: s(40, 40.0, w),
        },
        Kind::ThirdParty => Color {
            r: s(60, 50.0, w),
            g: s(175, 50.0, v),
            b: s(185, 50.0, v),
        },
        Kind::Gc => GC_COLOR,
        Kind::Native => Color {
            r: 120,
            g: 140,
            b: 215,
        },
        Kind::Unreadable => Color {
            r: 175,
            g: 175,
            b: 175,
        },
        Kind::Thread => Color {
            r: 205,
            g: 200,
            b: 185,
        },
    }
}

/// The line under the title: the run's statistics.
fn subtitle(stats: &RunStats, threads: usize) -> String {
    let n = stats.attempts;
    let t = stats.duration_s;
    let rate = if t > 0.0 { n as f64 / t } else { 0.0 };
    let interval = match stats.interval_us {
        0 => "?".to_string(),
        us if us % 1000 == 0 => format!("{} ms", us / 1000),
        us => format!("{us} µs"),
    };
    let mut s = format!(
        "{n} sample{} in {t:.2} s · {rate:.2} samples/sec · error rate {:.2}% · mode {} · interval {interval} · {threads} thread{}",
        if n == 1 { "" } else { "s" },
        stats.error_rate_pct(),
        stats.mode.as_str(),
        if threads == 1 { "" } else { "s" },
    );
    let missed = stats.missed_pct();
    if missed > 0.0 && !stats.interrupted {
        let _ = write!(s, " · missed {missed:.2}%");
    }
    s
}

/// The script's lookup of the zoomed box, and its replacement for HTML.
pub(super) const ZOOM_LOOKUP_SVG: &str = r#"querySelector('[*|x="' + params.x"#;
pub(super) const ZOOM_LOOKUP_HTML: &str = r#"querySelector('[fg\\:x="' + params.x"#;

/// Draw folded `lines` (widest first, root first) as an SVG with inferno,
/// in the given order and with tachyon's settings on top of `opts`.
pub(super) fn draw(opts: &mut Options<'_>, lines: &[String], what: &str) -> Result<String> {
    // Keep our (widest-first) order: inferno's sort would make it
    // alphabetical, and its `no_sort` rejects lines not in byte order.
    // Flame-chart mode takes lines as given, after reversing them (it
    // expects time order): hand them over reversed.
    opts.flame_chart = true;
    opts.min_width = match lines.len() {
        0..=5_000 => 0.01,
        5_001..=20_000 => 0.05,
        _ => 0.1,
    };
    opts.count_name = "samples".into();
    // Keep the function name when a label does not fit its box.
    opts.text_truncate_direction = TextTruncateDirection::Right;
    let fail = |e| Error::io(format!("cannot draw the {what}"), e);
    let mut svg = Vec::new();
    inferno_fg::from_lines(opts, lines.iter().rev().map(String::as_str), &mut svg).map_err(fail)?;
    String::from_utf8(svg)
        .map_err(|e| fail(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// A legend entry: a colour swatch and what it means.
pub(super) fn swatch(c: Color, what: &str) -> String {
    format!(
        "<span class=\"key\"><span class=\"swatch\" style=\"background:rgb({},{},{})\"></span>{what}</span>",
        c.r, c.g, c.b
    )
}

/// A flame graph page: the SVG inline (its script runs there too), then
/// the legend and a line of help. The SVG must stay the page's first
/// `<svg>`: its script looks it up so.
pub(super) fn page(title: &str, svg: &str, legend: &str, help: &str) -> String {
    // The XML declaration and DOCTYPE have no place inside HTML.
    let svg = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    // Inside HTML `fg:x` is an attribute with a colon in its name, not `x`
    // in the `fg` namespace, so the script's `[*|x=...]` lookup that
    // restores a zoom from the URL (`?x=..&y=..`) finds nothing: select by
    // the literal name instead.
    let svg = svg.replacen(ZOOM_LOOKUP_SVG, ZOOM_LOOKUP_HTML, 1);
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tachyon {version}">
<title>{title}</title>
<style>
body {{ margin: 0; padding: 8px; background: #fff; font-family: sans-serif; font-size: 13px; color: #333; }}
body > svg {{ display: block; width: 100%; }}
.legend {{ margin: 6px 10px; }}
.key {{ display: inline-block; margin-right: 18px; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; margin-right: 5px; vertical-align: -1px; border: 1px solid #999; }}
.help {{ margin: 6px 10px; color: #777; }}
</style>
</head>
<body>
{svg}
<div class="legend">
{legend}
</div>
<div class="help">{help}</div>
</body>
</html>
"#,
        version = env!("CARGO_PKG_VERSION"),
    )
}

fn html_page(svg: &str) -> String {
    let legend = [
        swatch(color_for(Kind::User, "x"), "your code"),
        swatch(color_for(Kind::Stdlib, "x"), "standard library"),
        swatch(color_for(Kind::ThirdParty, "x"), "installed packages"),
        swatch(GC_COLOR, "&lt;GC&gt; garbage collection"),
        swatch(
            color_for(Kind::Native, ""),
            "&lt;native&gt; C calling Python",
        ),
    ]
    .join("\n");
    page(
        TITLE,
        svg,
        &legend,
        "Click a box to zoom in, \"Reset Zoom\" to zoom out; Ctrl-F or \"Search\" to highlight functions by regular expression. Box width is samples, summed over threads.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mode;
    use crate::model::{Frame, ThreadSample};

    struct Fixture {
        t: FrameTable,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                t: FrameTable::new(),
            }
        }

        fn py(&mut self, file: &str, func: &str, line: i32) -> FrameId {
            let (file, func) = (self.t.intern_str(file), self.t.intern_str(func));
            self.t.intern(Frame {
                kind: FrameKind::Python,
                file,
                func,
                location: Some(crate::model::Location {
                    line,
                    end_line: line,
                    col: 0,
                    end_col: 1,
                }),
            })
        }
    }

    /// A sample of one thread; `frames` root first.
    fn sample(tid: u64, root_first: &[FrameId]) -> Sample {
        Sample {
            timestamp_us: 0,
            threads: vec![ThreadSample {
                tid,
                frames: root_first.iter().rev().copied().collect(),
                ..Default::default()
            }],
        }
    }

    fn stats(attempts: u64) -> RunStats {
        RunStats {
            interval_us: 1000,
            duration_s: attempts as f64 / 1000.0,
            attempts,
            failures: 1,
            mode: Mode::Cpu,
            interrupted: false,
        }
    }

    fn html(c: &FlamegraphCollector, t: &FrameTable, st: &RunStats) -> String {
        c.render(t, st).unwrap().expect("a profile").0
    }

    /// The inline `<svg>…</svg>`, checked to be well-formed XML.
    fn svg_of(html: &str) -> &str {
        let start = html.find("<svg").expect("an svg");
        let end = html.rfind("</svg>").expect("a closing svg") + "</svg>".len();
        let svg = &html[start..end];
        let mut r = quick_xml::Reader::from_str(svg);
        let mut depth = 0i64;
        loop {
            match r.read_event().expect("well-formed svg") {
                quick_xml::events::Event::Start(_) => depth += 1,
                quick_xml::events::Event::End(_) => depth -= 1,
                quick_xml::events::Event::Text(t) => {
                    t.decode().expect("text decodes");
                }
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0, "unbalanced tags");
        svg
    }

    /// Every frame box's `<title>` text (unescaped), root first, then
    /// level by level, left to right.
    fn titles(svg: &str) -> Vec<String> {
        use quick_xml::events::Event;
        let mut boxes: Vec<(i64, u64, String)> = Vec::new();
        let mut r = quick_xml::Reader::from_str(svg);
        let mut title: Option<String> = None;
        let mut in_title = false;
        loop {
            match r.read_event().unwrap() {
                Event::Start(e) if e.name().as_ref() == b"title" => {
                    in_title = true;
                    title = Some(String::new());
                }
                Event::End(e) if e.name().as_ref() == b"title" => in_title = false,
                Event::Text(t) if in_title => {
                    title.as_mut().unwrap().push_str(&t.decode().unwrap());
                }
                Event::GeneralRef(e) if in_title => {
                    let s = match &*e.decode().unwrap() {
                        "lt" => "<",
                        "gt" => ">",
                        "amp" => "&",
                        "quot" => "\"",
                        "apos" => "'",
                        other => panic!("unexpected entity {other}"),
                    };
                    title.as_mut().unwrap().push_str(s);
                }
                Event::Empty(e) if e.name().as_ref() == b"rect" => {
                    let Some(t) = title.take() else { continue };
                    let attr = |name: &[u8]| -> String {
                        let a = e.try_get_attribute(name).unwrap().unwrap();
                        String::from_utf8(a.value.to_vec()).unwrap()
                    };
                    let y: i64 = attr(b"y").parse().unwrap();
                    let x: u64 = attr(b"fg:x").parse().unwrap();
                    // Flames grow upwards: the root is at the bottom.
                    boxes.push((-y, x, t));
                }
                Event::Eof => break,
                _ => {}
            }
        }
        boxes.sort();
        boxes.into_iter().map(|b| b.2).collect()
    }

    fn frame_count(svg: &str) -> usize {
        svg.matches("<g><title>").count()
    }

    #[test]
    fn draws_the_tree_with_counts_and_percentages() {
        let mut f = Fixture::new();
        let main = f.py("/app/main.py", "<module>", 10);
        let work = f.py("/app/main.py", "work", 3);
        let parse = f.py("/usr/lib/python3.15/json/decoder.py", "decode", 353);
        let idle = f.py("/app/main.py", "idle", 20);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        for _ in 0..6 {
            c.collect(&sample(1, &[main, work, parse]), &f.t);
        }
        for _ in 0..2 {
            c.collect(&sample(1, &[main, work]), &f.t);
        }
        for _ in 0..2 {
            c.collect(&sample(2, &[main, idle]), &f.t);
        }
        let page = html(&c, &f.t, &stats(11));
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>tachyon flame graph</title>"));
        assert!(!page.contains("<?xml"), "no XML declaration inside HTML");
        let svg = svg_of(&page);
        assert!(
            svg.contains("onload=\"init(evt)\""),
            "interactive script hooked"
        );
        assert!(svg.contains("id=\"search\""));
        assert!(svg.contains("id=\"unzoom\""));
        assert!(svg.contains(ZOOM_LOOKUP_HTML), "zoom restore patched");
        assert!(!svg.contains(ZOOM_LOOKUP_SVG));
        // all, <module>, work, decode, idle
        assert_eq!(frame_count(svg), 5);
        let titles = titles(svg);
        assert_eq!(titles[0], "all (10 samples, 100%)");
        assert_eq!(
            titles[1],
            "<module> (/app/main.py:10) (10 samples, 100.00%)"
        );
        // Widest first: work (8) before idle (2).
        assert_eq!(titles[2], "work (/app/main.py:3) (8 samples, 80.00%)");
        assert_eq!(titles[3], "idle (/app/main.py:20) (2 samples, 20.00%)");
        assert_eq!(
            titles[4],
            "decode (/usr/lib/python3.15/json/decoder.py:353) (6 samples, 60.00%)"
        );
        // The subtitle carries the run's statistics.
        assert!(svg.contains(
            "11 samples in 0.01 s · 1000.00 samples/sec · error rate 9.09% · mode cpu · interval 1 ms · 2 threads"
        ));
        // Standard library in yellows, user code in reds.
        let fill = |name: &str| {
            let at = svg.find(&format!("<title>{name}")).unwrap();
            let rest = &svg[at..];
            let f = rest.find("fill=\"rgb(").unwrap() + "fill=\"rgb(".len();
            let rgb: Vec<u8> = rest[f..rest[f..].find(')').unwrap() + f]
                .split(',')
                .map(|x| x.parse().unwrap())
                .collect();
            rgb
        };
        let (user, std) = (fill("work"), fill("decode"));
        assert!(user[0] > 200 && user[2] < 100, "user code is red: {user:?}");
        assert!(
            std[0] > 190 && std[1] > 170 && std[2] < 90,
            "stdlib is yellow: {std:?}"
        );
    }

    #[test]
    fn long_paths_are_shortened_like_the_reference() {
        assert_eq!(short_file("/app/x.py"), "/app/x.py");
        let long = "/home/someone/projects/with/a/very/long/path/pkg/mod.py";
        assert!(long.len() > 50);
        assert_eq!(short_file(long), ".../pkg/mod.py");
        let long_flat = "x".repeat(60);
        assert_eq!(short_file(&long_flat), long_flat);
        assert_eq!(classify(long), Kind::User);
        assert_eq!(
            classify("/venv/lib/python3.15/site-packages/req/api.py"),
            Kind::ThirdParty
        );
        assert_eq!(
            classify("/usr/lib/python3/dist-packages/req/api.py"),
            Kind::ThirdParty
        );
        assert_eq!(classify("/usr/lib/python3.13/os.py"), Kind::Stdlib);
        assert_eq!(classify("<frozen runpy>"), Kind::Stdlib);
        assert_eq!(classify("/home/me/python3.x/app.py"), Kind::User);
    }

    #[test]
    fn escapes_markup_quotes_and_keeps_non_ascii() {
        let mut f = Fixture::new();
        let a = f.py("/tmp/a&b/\"q\"'s.py", "<lambda>", 1);
        let b = f.py("/tmp/ünïcode/数据.py", "größe_関数", 2);
        let c_ = f.py("/tmp/semi;colon.py", "f", 3);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        c.collect(&sample(1, &[a, b, c_]), &f.t);
        let page = html(&c, &f.t, &stats(1));
        let svg = svg_of(&page);
        assert!(!svg.contains("<lambda>"), "raw < must not reach the markup");
        assert!(svg.contains("&lt;lambda&gt;"));
        let titles = titles(svg);
        assert_eq!(
            titles[1],
            "<lambda> (/tmp/a&b/\"q\"'s.py:1) (1 samples, 100.00%)"
        );
        assert_eq!(
            titles[2],
            "größe_関数 (/tmp/ünïcode/数据.py:2) (1 samples, 100.00%)"
        );
        // `;` separates frames in inferno's input: it must not split one.
        assert_eq!(
            titles[3],
            "f (/tmp/semi\u{ff1b}colon.py:3) (1 samples, 100.00%)"
        );
        assert_eq!(frame_count(svg), 4);
    }

    #[test]
    fn synthetic_frames_are_labelled_and_gc_has_its_colour() {
        let mut f = Fixture::new();
        let m = f.py("/app/m.py", "main", 1);
        let gc = f.t.synthetic(FrameKind::Gc, "<GC>");
        let native = f.t.synthetic(FrameKind::Native, "<native>");
        let cb = f.py("/app/m.py", "callback", 7);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        for _ in 0..3 {
            c.collect(&sample(1, &[m, gc]), &f.t);
        }
        c.collect(&sample(1, &[m, native, cb]), &f.t);
        let page = html(&c, &f.t, &stats(4));
        let svg = svg_of(&page);
        let titles = titles(svg);
        assert_eq!(titles[2], "<GC> (3 samples, 75.00%)");
        assert_eq!(titles[3], "<native> (1 samples, 25.00%)");
        assert_eq!(titles[4], "callback (/app/m.py:7) (1 samples, 25.00%)");
        let gc_box = &svg[svg.find("<title>&lt;GC&gt;").unwrap()..];
        let gc_box = &gc_box[..gc_box.find("</g>").unwrap()];
        assert!(
            gc_box.contains(&format!(
                "fill=\"rgb({},{},{})\"",
                GC_COLOR.r, GC_COLOR.g, GC_COLOR.b
            )),
            "{gc_box}"
        );
        // The legend names both.
        assert!(page.contains("&lt;GC&gt; garbage collection"));
        assert!(page.contains("&lt;native&gt;"));
    }

    #[test]
    fn frames_differing_in_column_only_are_one_box() {
        let mut f = Fixture::new();
        let (file, func) = (f.t.intern_str("/a/x.py"), f.t.intern_str("f"));
        let mk = |col| Frame {
            kind: FrameKind::Python,
            file,
            func,
            location: Some(crate::model::Location {
                line: 3,
                end_line: 3,
                col,
                end_col: col + 1,
            }),
        };
        let (a, b) = (f.t.intern(mk(1)), f.t.intern(mk(9)));
        let mut c = FlamegraphCollector::new(Output::Stdout);
        c.collect(&sample(1, &[a]), &f.t);
        c.collect(&sample(1, &[b]), &f.t);
        let svg_page = html(&c, &f.t, &stats(2));
        let svg = svg_of(&svg_page);
        assert_eq!(frame_count(svg), 2);
        assert_eq!(titles(svg)[1], "f (/a/x.py:3) (2 samples, 100.00%)");
    }

    #[test]
    fn thread_roots_split_threads() {
        let mut f = Fixture::new();
        let m = f.py("/app/m.py", "main", 1);
        let mut c = FlamegraphCollector::new(Output::Stdout).with_thread_roots(true);
        let mut s = sample(7, &[m]);
        s.threads[0].status = status::MAIN_THREAD;
        c.collect(&s, &f.t);
        c.collect(&sample(8, &[m]), &f.t);
        c.collect(&sample(8, &[m]), &f.t);
        let page = html(&c, &f.t, &stats(3));
        let titles = titles(svg_of(&page));
        assert_eq!(titles[1], "thread 8 (2 samples, 66.67%)");
        assert_eq!(titles[2], "thread 7 (main) (1 samples, 33.33%)");
        assert_eq!(titles[3], "main (/app/m.py:1) (2 samples, 66.67%)");
        assert_eq!(titles[4], "main (/app/m.py:1) (1 samples, 33.33%)");
    }

    #[test]
    fn empty_profile_writes_no_file() {
        let path =
            std::env::temp_dir().join(format!("tachyon-fg-empty-{}.html", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let t = FrameTable::new();
        let mut c = FlamegraphCollector::new(Output::File(path.clone()));
        c.collect(
            &Sample {
                timestamp_us: 0,
                threads: vec![ThreadSample::default()],
            },
            &t,
        );
        c.finish(&t, &stats(1)).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn writes_the_file() {
        let mut f = Fixture::new();
        let m = f.py("/app/m.py", "main", 1);
        let path = std::env::temp_dir().join(format!("tachyon-fg-{}.html", std::process::id()));
        let mut c = FlamegraphCollector::new(Output::File(path.clone()));
        c.collect(&sample(1, &[m]), &f.t);
        c.finish(&f.t, &stats(1)).unwrap();
        let got = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(got.starts_with("<!DOCTYPE html>"));
        assert!(got.trim_end().ends_with("</html>"));
        assert_eq!(frame_count(svg_of(&got)), 2);
    }

    #[test]
    fn many_stacks_stay_bounded() {
        let mut f = Fixture::new();
        let root = f.py("/app/m.py", "main", 1);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        // One hot stack and 30,000 one-sample ones: the small ones are not
        // drawn, the hot one is.
        let hot = f.py("/app/m.py", "hot", 2);
        for _ in 0..100_000 {
            c.collect(&sample(1, &[root, hot]), &f.t);
        }
        for i in 0..30_000 {
            let leaf = f.py("/app/m.py", &format!("f{i}"), 3);
            c.collect(&sample(1, &[root, leaf]), &f.t);
        }
        let page = html(&c, &f.t, &stats(130_000));
        let svg = svg_of(&page);
        assert!(frame_count(svg) < 100, "{}", frame_count(svg));
        assert!(svg.contains("hot (/app/m.py:2) (100,000 samples, 76.92%)"));
        assert!(page.len() < 200_000);
    }
}
