//! Differential flame graph (`--diff-flamegraph BASELINE.bin`): this run's
//! flame graph, coloured by how each box's self samples changed against a
//! baseline recorded earlier with `--binary`. The same self-contained page
//! as [`super::flamegraph`] (zoom, search, icicle, labels, sidebar, hot
//! spots), over the shared [`super::tree::CallTree`] with two series: this
//! run and the baseline.
//!
//! * Box **width** is this run's samples (threads merged: the two runs'
//!   threads are different threads, so there is no thread filter).
//!   **Colour** is the change in the box's *self* samples: red grew, blue
//!   shrank, white unchanged, purple new; the deepest colour is the largest
//!   change in the graph.
//! * Frames are matched by `(file, function)` per frame, root first, lines
//!   ignored, as the reference does: a function whose lines moved between
//!   the runs still matches. Boxes are labelled `func (file)`, without a
//!   line, since that is the unit compared.
//! * The baseline's counts are multiplied by `baseline interval / current
//!   interval` (the reference's scale), so a baseline taken at 2 ms counts
//!   double against a run at 1 ms. Runs are not normalised by their length:
//!   a longer run shows growth everywhere, as it does in the reference.
//!   The page carries the baseline's counts and the scale; it scales them.
//! * Each box's tooltip gives its samples and share, the baseline's
//!   (scaled) samples for the same path, and the self-sample change.
//!   With opcodes ([`DiffFlamegraphCollector::with_opcodes`]) it also
//!   lists the instructions this run's frames at the box were at, as the
//!   flame graph's tooltips do (the same data and script). The baseline's
//!   opcodes, if it recorded any, are not shown: a box's instructions are
//!   this run's, and the paths only the baseline has are not drawn.
//! * **Call paths only in the baseline** have no width in this run, so they
//!   are not drawn. The page and the closing line say how many there were
//!   and how many scaled samples they held.
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

use super::flamegraph::{OpCounts, PageData, op_counts, opnames_json, page, sort_widest_first};
use super::stacks::StackCounts;
use super::tree::{CallTree, IdMap, Keys, key_totals};
use super::{Collector, Output};
use crate::binfmt::CaptureConfig;
use crate::binfmt::reader::BinaryReader;
use crate::error::{Error, Result};
use crate::model::{FrameTable, Mode, RunStats, Sample};
use crate::opcodes::OpTable;

pub(crate) use super::flamegraph::escape;

/// The page's title.
pub const TITLE: &str = "tachyon differential flame graph";

/// The reference's default output name, `diff_flamegraph_<pid>.html`.
pub fn default_output_name(pid: u32) -> String {
    format!("diff_flamegraph_{pid}.html")
}

/// The tree's series: this run, the baseline.
const CURRENT: u32 = 0;
const BASELINE: u32 = 1;

/// Renders this run against a baseline `.bin`; see the module
/// documentation.
pub struct DiffFlamegraphCollector {
    output: Output,
    baseline_path: PathBuf,
    baseline_stats: RunStats,
    baseline_mode: Option<Mode>,
    baseline_capture: Option<CaptureConfig>,
    /// Frames of both runs, matched by file and function.
    keys: Keys,
    /// The baseline's stacks, as the `BASELINE` series: the call tree and
    /// the inverted one.
    trees: [CallTree; 2],
    /// The baseline's (unscaled) self and cumulative samples per key.
    baseline_keys: HashMap<u32, (u64, u64)>,
    baseline_samples: u64,
    current: StackCounts,
    /// Name this run's opcodes with this table (`--opcodes`).
    opcodes: Option<&'static OpTable>,
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
        let trees = [false, true].map(|inverted| {
            let mut tree = CallTree::new();
            tree.add_stacks(
                &counts,
                keys.mapper(reader.frames(), false),
                |_| BASELINE,
                inverted,
            );
            tree
        });
        let baseline_keys = key_totals(&counts, keys.mapper(reader.frames(), false), |_| ())
            .into_iter()
            .map(|(((), k), v)| (k, v))
            .collect();
        Ok(DiffFlamegraphCollector {
            output,
            baseline_path: baseline.to_path_buf(),
            baseline_stats: info.run_stats(),
            baseline_mode: info.mode,
            baseline_capture: info.capture,
            keys,
            trees,
            baseline_keys,
            baseline_samples: counts.total(),
            current: StackCounts::new(),
            opcodes: None,
        })
    }

    /// Show in each box's tooltip the instructions this run's frames there
    /// were at, named with `table`.
    pub fn with_opcodes(mut self, table: Option<&'static OpTable>) -> Self {
        self.opcodes = table;
        self
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
        if self.current.is_empty() {
            return Ok(None);
        }
        let scale = self.scale(stats.interval_us);
        let calls = self.merged(frames, false);
        let sum = Summary::of(&calls, self.baseline_samples, scale);
        let inverted = self.merged(frames, true);
        let current_keys = key_totals(&self.current, self.keys.mapper(frames, false), |_| ());

        let mut data = PageData::new(&self.keys.list);
        let mut emitted = format!(
            ",\"tree\":{},\"inverted\":{}",
            data.tree(&calls.tree, &calls.cur, None, Some(&calls.ops)),
            data.tree(&inverted.tree, &inverted.cur, None, Some(&inverted.ops))
        );
        if let Some(t) = self.opcodes {
            opnames_json(&mut emitted, t, [&calls.ops, &inverted.ops]);
        }
        let mut json = String::with_capacity(emitted.len() + 4096);
        json.push_str("{\"kind\":\"diff\"");
        data.stats(&mut json, TITLE, stats, sum.current, self.current.threads());
        let b = &self.baseline_stats;
        let _ = write!(
            json,
            ",\"status\":{{\"gil\":false,\"cpu\":false,\"exception\":false}},\"threads\":[],\"gc\":[],\"baseline\":{{\"samples\":{},\"duration\":{:.3},\"interval_us\":{},\"scale\":{},\"vanished\":{},\"vanished_samples\":{:.2},\"grew\":{},\"shrank\":{}}}",
            sum.baseline,
            if b.duration_s.is_finite() {
                b.duration_s
            } else {
                0.0
            },
            b.interval_us,
            scale,
            sum.vanished,
            sum.vanished_samples,
            sum.grew,
            sum.shrank,
        );
        self.hot_json(&mut json, &mut data, current_keys);
        json.push_str(&emitted);
        data.finish(&mut json);
        json.push('}');
        Ok(Some((page(TITLE, &json), sum)))
    }

    /// The baseline's tree (or the inverted one) with this run added,
    /// siblings widest first (this run, then the baseline); with opcodes,
    /// this run's at each node.
    fn merged(&mut self, frames: &FrameTable, inverted: bool) -> Merged {
        let mut tree = self.trees[usize::from(inverted)].clone();
        let ends = tree.add_stacks(
            &self.current,
            self.keys.mapper(frames, false),
            |_| CURRENT,
            inverted,
        );
        let ops = if self.opcodes.is_some() {
            op_counts(&tree, &self.current, &ends, frames, inverted)
        } else {
            OpCounts::default()
        };
        let cur_self = tree.ends(|s| s == CURRENT);
        let base_self = tree.ends(|s| s == BASELINE);
        let cur = tree.totals(&cur_self);
        let base = tree.totals(&base_self);
        sort_widest_first(&mut tree, &cur, &base, &self.keys.list);
        Merged {
            tree,
            cur,
            cur_self,
            base_self,
            ops,
        }
    }

    /// `,"hot":[[..]]`: this run's top functions by self samples,
    /// `[func,file,module,kind,self,total,baseline self,baseline total]`
    /// (the baseline's unscaled).
    fn hot_json(
        &self,
        json: &mut String,
        data: &mut PageData<'_>,
        current: IdMap<((), u32), (u64, u64)>,
    ) {
        let mut hot: Vec<(u32, u64, u64)> = current
            .into_iter()
            .filter(|(_, v)| v.0 > 0)
            .map(|(((), k), (own, cum))| (k, own, cum))
            .collect();
        hot.sort_unstable_by(|a, b| {
            b.1.cmp(&a.1)
                .then(b.2.cmp(&a.2))
                .then_with(|| self.keys.list[a.0 as usize].cmp(&self.keys.list[b.0 as usize]))
        });
        hot.truncate(20);
        json.push_str(",\"hot\":[[");
        for (j, &(k, own, cum)) in hot.iter().enumerate() {
            let f = data.function(&self.keys.list[k as usize]);
            let (bo, bc) = self.baseline_keys.get(&k).copied().unwrap_or_default();
            let _ = write!(
                json,
                "{}[{f},{own},{cum},{bo},{bc}]",
                if j > 0 { "," } else { "" }
            );
        }
        json.push_str("]]");
    }
}

/// Both runs in one tree; per node: this run's subtree and own samples,
/// the baseline's own samples (unscaled); per (node, opcode), this run's
/// samples at that instruction (empty without opcodes).
struct Merged {
    tree: CallTree,
    cur: Vec<u64>,
    cur_self: Vec<u64>,
    base_self: Vec<u64>,
    ops: OpCounts,
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
    /// The numbers of the call tree `m`: which drawn boxes' self samples
    /// grew or shrank against the baseline scaled by `scale`, and the call
    /// paths only the baseline has.
    fn of(m: &Merged, baseline: u64, scale: f64) -> Summary {
        let mut sum = Summary {
            current: m.cur[0],
            baseline,
            scale,
            grew: 0,
            shrank: 0,
            vanished: 0,
            vanished_samples: 0.0,
        };
        for i in 1..m.tree.nodes.len() {
            let b = m.base_self[i] as f64 * scale;
            if m.cur[i] == 0 {
                if m.base_self[i] > 0 {
                    sum.vanished += 1;
                    sum.vanished_samples += b;
                }
                continue;
            }
            let d = m.cur_self[i] as f64 - b;
            if d >= 0.005 {
                sum.grew += 1;
            } else if d <= -0.005 {
                sum.shrank += 1;
            }
        }
        sum
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::Collector;
    use crate::collect::binary::{BinaryCollector, BinaryOptions};
    use crate::collect::flamegraph::testing::Drawn;
    use crate::collect::scenarios::{py, sample};

    fn stats(interval_us: u64, n: u64, mode: Mode) -> RunStats {
        RunStats {
            interval_us,
            duration_s: n as f64 * interval_us as f64 / 1e6,
            attempts: n,
            failures: 0,
            mode,
            interrupted: false,
            ..RunStats::default()
        }
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tachyon-diff-{}-{name}", std::process::id()))
    }

    /// A baseline at `interval_us`: `work` 10, `parse` 20, `gone` 5
    /// samples under `main`.
    fn baseline(name: &str, interval_us: u64, mode: Mode, capture: CaptureConfig) -> PathBuf {
        baseline_at(name, interval_us, mode, capture, None)
    }

    /// [`at`] when `op` is given.
    fn maybe_at(t: &mut FrameTable, id: u32, op: Option<u8>) -> u32 {
        op.map_or(id, |op| at(t, id, op))
    }

    /// Frame `id` at instruction `op`.
    fn at(t: &mut FrameTable, id: u32, op: u8) -> u32 {
        let f = *t.frame(id);
        t.intern(crate::model::Frame {
            opcode: Some(op),
            ..f
        })
    }

    /// [`baseline`] with every frame at instruction `op`, when given.
    fn baseline_at(
        name: &str,
        interval_us: u64,
        mode: Mode,
        capture: CaptureConfig,
        op: Option<u8>,
    ) -> PathBuf {
        let path = temp(name);
        let mut t = FrameTable::new();
        let main = py(&mut t, "/app/main.py", "main", 1);
        let main = maybe_at(&mut t, main, op);
        let work = py(&mut t, "/app/main.py", "work", 3);
        let work = maybe_at(&mut t, work, op);
        let parse = py(&mut t, "/usr/lib/python3.15/json/decoder.py", "decode", 353);
        let parse = maybe_at(&mut t, parse, op);
        let gone = py(&mut t, "/app/main.py", "gone", 30);
        let gone = maybe_at(&mut t, gone, op);
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
        current_at(c, None)
    }

    /// The opcodes of [`current_at`]'s frames: `main` calling `work`,
    /// calling `decode` and running itself; `work`; `decode`.
    struct CurrentOps {
        main_work: u8,
        main_decode: u8,
        main_self: u8,
        work: u8,
        decode: u8,
    }

    /// [`current`], its frames at `ops` when given.
    fn current_at(c: &mut DiffFlamegraphCollector, ops: Option<&CurrentOps>) -> FrameTable {
        let mut t = FrameTable::new();
        // Other ids than the baseline's, on purpose.
        let _pad = py(&mut t, "/app/other.py", "pad", 1);
        let main = py(&mut t, "/app/main.py", "main", 2);
        let work = py(&mut t, "/app/main.py", "work", 4);
        let parse = py(&mut t, "/usr/lib/python3.15/json/decoder.py", "decode", 360);
        let stacks = [
            (
                [
                    (main, ops.map(|o| o.main_work)),
                    (work, ops.map(|o| o.work)),
                ]
                .to_vec(),
                60,
            ),
            (
                [
                    (main, ops.map(|o| o.main_decode)),
                    (parse, ops.map(|o| o.decode)),
                ]
                .to_vec(),
                10,
            ),
            ([(main, ops.map(|o| o.main_self))].to_vec(), 5),
        ];
        for (stack, n) in stacks {
            let stack: Vec<u32> = stack
                .into_iter()
                .map(|(f, op)| maybe_at(&mut t, f, op))
                .collect();
            for _ in 0..n {
                c.collect(&sample(&stack), &t);
            }
        }
        t
    }

    /// The 3.15 table and opcodes for [`current_at`], and the one the
    /// baseline's frames are at (which this run never is).
    fn ops_3_15() -> (&'static OpTable, CurrentOps, u8) {
        let table = crate::opcodes::table(3, 15).unwrap();
        let op = |name: &str| table.names.iter().position(|n| *n == name).unwrap() as u8;
        let ops = CurrentOps {
            main_work: op("CALL_PY_EXACT_ARGS"),
            main_decode: op("CALL"),
            main_self: op("LOAD_FAST"),
            work: op("BINARY_OP_ADD_INT"),
            decode: op("LOAD_ATTR"),
        };
        (table, ops, op("RETURN_VALUE"))
    }

    /// Per drawn box of `tree` (`tree` or `inverted`) that has opcodes:
    /// its label, its opcodes' shown names and samples; sorted.
    fn shown_ops(page: &str, tree: &str) -> Vec<(String, Vec<(String, u64)>)> {
        let d = Drawn::tree(page, tree);
        let mut per: Vec<Vec<(String, u64)>> = vec![Vec::new(); d.labels.len()];
        for o in d.t["ops"].as_array().unwrap().chunks(3) {
            let name = d.v["opnames"][o[1].as_u64().unwrap().to_string()]
                .as_str()
                .unwrap()
                .to_string();
            per[o[0].as_u64().unwrap() as usize].push((name, o[2].as_u64().unwrap()));
        }
        let mut per: Vec<(String, Vec<(String, u64)>)> = d
            .labels
            .into_iter()
            .zip(per)
            .filter(|(_, v)| !v.is_empty())
            .map(|(l, mut v)| {
                v.sort();
                (l, v)
            })
            .collect();
        per.sort();
        per
    }

    #[test]
    fn both_runs_in_one_tree_with_the_scale_and_the_summary() {
        let path = baseline("scale.bin", 2000, Mode::Cpu, CaptureConfig::default());
        let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout).unwrap();
        let _ = std::fs::remove_file(&path);
        c.check(Mode::Cpu, Some(CaptureConfig::default())).unwrap();
        let t = current(&mut c);
        let (page, sum) = c.render(&t, &stats(1000, 75, Mode::Cpu)).unwrap().unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>tachyon differential flame graph</title>"));
        let d = Drawn::of(&page);
        assert_eq!(d.v["kind"], "diff");
        // Matched by file and function, lines ignored; the baseline-only
        // `gone` is not drawn.
        assert_eq!(
            d.labels,
            [
                "all",
                "main (/app/main.py)",
                "work (/app/main.py)",
                "decode (/usr/lib/python3.15/json/decoder.py)"
            ]
        );
        let cur = d.totals(|s| s == CURRENT as i64);
        let base = d.totals(|s| s == BASELINE as i64);
        assert_eq!(cur, [(75, 0), (75, 5), (60, 60), (10, 10)]);
        // The inverted tree: work, decode and main (itself) at the roots.
        let inv = Drawn::tree(&page, "inverted");
        assert_eq!(inv.totals(|s| s == CURRENT as i64)[1].0, 60);
        assert_eq!(inv.labels[1], "work (/app/main.py)");
        assert_eq!(inv.labels[2], "main (/app/main.py)");
        // Unscaled in the page: work 10, decode 20, and gone's 5 hidden in
        // main (not drawn, still in main's width).
        assert_eq!(base, [(35, 0), (35, 0), (10, 10), (20, 20)]);
        assert_eq!(d.ends_of(1), [vec![0, 5, 0], vec![1, 0, 5]]);
        let b = &d.v["baseline"];
        assert_eq!(b["scale"], 2.0);
        assert_eq!(b["samples"], 35);
        assert_eq!(b["vanished"], 1);
        assert_eq!(b["vanished_samples"], 10.0);
        assert_eq!(
            (b["grew"].as_u64(), b["shrank"].as_u64()),
            (Some(2), Some(1))
        );
        // Hot spots: this run's self samples with the baseline's.
        let hot: Vec<_> = d.v["hot"][0]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e[4].as_u64().unwrap(), e[6].as_u64().unwrap()))
            .collect();
        assert_eq!(hot, [(60, 10), (10, 20), (5, 0)]);
        assert_eq!(
            sum.line(),
            "Differential flame graph: 75 current samples vs 35 baseline samples (×2 = 70); 2 frames grew, 1 shrank; 1 call path only in the baseline (10 samples) not drawn"
        );
    }

    #[test]
    fn opcodes_of_this_run_in_its_boxes_and_none_from_the_baseline() {
        let (table, ops, base_op) = ops_3_15();
        // The baseline was recorded with opcodes too, every frame at one
        // instruction this run never is at.
        let capture = CaptureConfig {
            opcodes: true,
            ..CaptureConfig::default()
        };
        let path = baseline_at("ops.bin", 1000, Mode::Wall, capture, Some(base_op));
        let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout)
            .unwrap()
            .with_opcodes(Some(table));
        let _ = std::fs::remove_file(&path);
        let t = current_at(&mut c, Some(&ops));
        let (page, _) = c.render(&t, &stats(1000, 75, Mode::Wall)).unwrap().unwrap();
        let owned = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|&(n, c)| (n.to_string(), c)).collect()
        };
        let main = "main (/app/main.py)".to_string();
        let work = "work (/app/main.py)".to_string();
        let decode = "decode (/usr/lib/python3.15/json/decoder.py)".to_string();
        // This run's instructions, each box's own, specialised forms with
        // their base; the baseline's are nowhere.
        assert_eq!(
            shown_ops(&page, "tree"),
            [
                (decode.clone(), owned(&[("LOAD_ATTR", 10)]),),
                (
                    main.clone(),
                    owned(&[
                        ("CALL", 10),
                        ("CALL_PY_EXACT_ARGS (CALL)", 60),
                        ("LOAD_FAST", 5)
                    ]),
                ),
                (
                    work.clone(),
                    owned(&[("BINARY_OP_ADD_INT (BINARY_OP)", 60)])
                ),
            ]
        );
        let v = Drawn::of(&page).v;
        let names = v["opnames"].as_object().unwrap();
        assert_eq!(names.len(), 5, "{names:?}");
        assert!(!names.contains_key(&base_op.to_string()), "{names:?}");
        // Inverted: work at a root, its caller main above it at the call.
        let inv = shown_ops(&page, "inverted");
        let callers: Vec<_> = inv.iter().filter(|(l, _)| *l == main).collect();
        assert!(
            callers
                .iter()
                .any(|(_, o)| *o == owned(&[("CALL_PY_EXACT_ARGS (CALL)", 60)])),
            "{inv:?}"
        );
        assert!(inv.contains(&(work, owned(&[("BINARY_OP_ADD_INT (BINARY_OP)", 60)]))));
        // Before the page drops what it does not draw: every node holds
        // opcodes for exactly this run's samples through it, so the path
        // only the baseline has (gone) holds none.
        for inverted in [false, true] {
            let m = c.merged(&t, inverted);
            let mut per_node = vec![0u64; m.tree.nodes.len()];
            for (&(n, op), &count) in &m.ops {
                assert_ne!(op, base_op);
                per_node[n as usize] += count;
            }
            assert_eq!(per_node[1..], m.cur[1..], "inverted: {inverted}");
            let gone = (1..m.tree.nodes.len())
                .filter(|&i| m.cur[i] == 0 && m.base_self[i] > 0)
                .count();
            assert!(gone > 0, "the baseline-only path is in the tree");
        }
    }

    #[test]
    fn without_opcodes_the_page_is_what_it_was() {
        let (_, ops, base_op) = ops_3_15();
        let capture = CaptureConfig {
            opcodes: true,
            ..CaptureConfig::default()
        };
        let page = |with_ops: bool, table| {
            let path = baseline_at(
                &format!("plain-{with_ops}.bin"),
                1000,
                Mode::Wall,
                capture,
                with_ops.then_some(base_op),
            );
            let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout)
                .unwrap()
                .with_opcodes(table);
            let _ = std::fs::remove_file(&path);
            let t = current_at(&mut c, with_ops.then_some(&ops));
            c.render(&t, &stats(1000, 75, Mode::Wall))
                .unwrap()
                .unwrap()
                .0
        };
        // Frames with opcodes but no table: the same page, to the byte, as
        // frames without opcodes, and no opcode data in it.
        let plain = page(false, None);
        assert_eq!(page(true, None), plain);
        let v = Drawn::of(&plain).v;
        assert!(v.get("opnames").is_none());
        assert!(v["tree"].get("ops").is_none() && v["inverted"].get("ops").is_none());
        // A table but no opcodes recorded: nothing to show in the boxes.
        let (table, _, _) = ops_3_15();
        let v = Drawn::of(&page(false, Some(table))).v;
        assert!(v["tree"].get("ops").is_none());
        assert_eq!(v["opnames"], serde_json::json!({}));
    }

    #[test]
    fn finer_baseline_scales_down_and_keeps_fractions() {
        let path = baseline("half.bin", 500, Mode::Wall, CaptureConfig::default());
        let mut c = DiffFlamegraphCollector::new(&path, Output::Stdout).unwrap();
        let _ = std::fs::remove_file(&path);
        let t = current(&mut c);
        let (page, sum) = c.render(&t, &stats(1000, 75, Mode::Wall)).unwrap().unwrap();
        assert_eq!(sum.scale, 0.5);
        assert_eq!(Drawn::of(&page).v["baseline"]["scale"], 0.5);
        // decode: 20 × 0.5 = 10, unchanged: neither grew nor shrank.
        assert_eq!((sum.grew, sum.shrank), (2, 0));
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
        assert!(
            Drawn::of(&got)
                .labels
                .contains(&"work (/app/main.py)".to_string())
        );
        assert_eq!(default_output_name(42), "diff_flamegraph_42.html");
    }

    #[test]
    fn same_names_in_different_files_stay_apart() {
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
        let c = py(
            &mut t,
            "/home/someone/projects/number/two/very/long/pkg/mod.py",
            "f",
            9,
        );
        assert_ne!(keys.of(&t, a, false), keys.of(&t, b, false));
        assert_eq!(keys.of(&t, b, false), keys.of(&t, c, false));
    }
}
