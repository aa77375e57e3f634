//! One sample stream into several collectors: `--live` with a file format
//! draws the view and writes the file from the same samples.

use crate::collect::Collector;
use crate::error::Result;
use crate::model::{FrameTable, RunStats, Sample};

/// Feeds every collector it borrows, in order; each stays its owner's, to
/// be finished when the owner chooses (the live view before the files).
pub struct Tee<'a>(pub Vec<&'a mut dyn Collector>);

impl Collector for Tee<'_> {
    fn collect(&mut self, sample: &Sample, frames: &FrameTable) {
        for c in &mut self.0 {
            c.collect(sample, frames);
        }
    }

    fn collect_failed(&mut self) {
        for c in &mut self.0 {
            c.collect_failed();
        }
    }

    fn output_error(&self) -> Option<String> {
        self.0.iter().find_map(|c| c.output_error())
    }

    fn target_changed(&mut self, pid: i32) {
        for c in &mut self.0 {
            c.target_changed(pid);
        }
    }

    fn target_python(&mut self, offsets: &crate::offsets::Offsets) {
        for c in &mut self.0 {
            c.target_python(offsets);
        }
    }

    fn process_named(&mut self, pid: u32, command: &str) {
        for c in &mut self.0 {
            c.process_named(pid, command);
        }
    }

    /// Every collector finishes, even after one failed; the first error is
    /// returned.
    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        let mut first = Ok(());
        for c in &mut self.0 {
            let r = c.finish(frames, stats);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records what it was told.
    struct Log(Arc<Mutex<Vec<String>>>, bool);

    impl Collector for Log {
        fn collect(&mut self, s: &Sample, _: &FrameTable) {
            self.0.lock().unwrap().push(format!("s{}", s.timestamp_us));
        }
        fn collect_failed(&mut self) {
            self.0.lock().unwrap().push("f".into());
        }
        fn finish(&mut self, _: &FrameTable, _: &RunStats) -> Result<()> {
            self.0.lock().unwrap().push("end".into());
            if self.1 {
                Err(crate::error::Error::InvalidProfile("full".into()))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn every_collector_sees_everything_and_finishes_despite_a_failure() {
        let a = Arc::new(Mutex::new(Vec::new()));
        let b = Arc::new(Mutex::new(Vec::new()));
        let (mut la, mut lb) = (Log(a.clone(), true), Log(b.clone(), false));
        let mut t = Tee(vec![&mut la, &mut lb]);
        let s = Sample {
            pid: None,
            timestamp_us: 3,
            threads: vec![],
        };
        t.collect(&s, &FrameTable::new());
        t.collect_failed();
        assert!(t.finish(&FrameTable::new(), &RunStats::default()).is_err());
        assert_eq!(*a.lock().unwrap(), ["s3", "f", "end"]);
        assert_eq!(*b.lock().unwrap(), ["s3", "f", "end"]);
    }
}
