//! Replaying a recording through the collectors of a profile, without
//! the reference's launcher frames.

use crate::binfmt::reader::BinaryReader;
use crate::collect::Collector;
use crate::error::Result;
use crate::model::Sample;

/// Frames of files with this name are the reference profiler's own.
const INTERNAL_FRAME_SUFFIX: &str = "_sync_coordinator.py";

/// Feed every sample of a recording to `collector`, without the frames of
/// the reference's own launcher (`_sync_coordinator.py`, at the bottom of
/// every stack of a `profiling.sampling run`: the reference's collectors
/// drop them, so does its replay, and so does this one). `progress` is told
/// how many samples were fed so far. Returns the number of samples.
pub fn replay<R: std::io::Read + std::io::Seek>(
    reader: &mut BinaryReader<R>,
    collector: &mut dyn Collector,
    mut progress: impl FnMut(u64),
) -> Result<u64> {
    let internal: Vec<bool> = reader
        .frames()
        .frames()
        .iter()
        .map(|f| reader.frames().str(f.file).ends_with(INTERNAL_FRAME_SUFFIX))
        .collect();
    let is_internal = |f: u32| internal.get(f as usize).copied().unwrap_or(false);
    let mut filtered = Sample::default();
    let mut done: u64 = 0;
    reader.replay(|s, table| {
        let has_internal = s
            .threads
            .iter()
            .any(|t| t.frames.iter().any(|&f| is_internal(f)));
        if has_internal {
            filtered.clone_from(s);
            for t in &mut filtered.threads {
                t.frames.retain(|&f| !is_internal(f));
            }
            collector.collect(&filtered, table);
        } else {
            collector.collect(s, table);
        }
        done += 1;
        progress(done);
    })
}
