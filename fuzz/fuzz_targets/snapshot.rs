//! The snapshot decoder on arbitrary payloads (the decompressed part of a
//! snapshot file), and, for every payload it accepts, the unwinder on that
//! memory: three samples main-thread only and three of all threads. The
//! seeds are the payloads of the committed snapshots, so mutations reach
//! the unwinder with a valid table and nearly valid memory.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tachyon::model::Sample;
use tachyon::session::snapshot::Snapshot;
use tachyon::unwind::UnwindOptions;

fuzz_target!(|data: &[u8]| {
    let Ok(snap) = Snapshot::from_payload(data) else {
        return;
    };
    for all_threads in [false, true] {
        let opts = UnwindOptions {
            all_threads,
            native: true,
            gc: true,
            cpu_status: true,
            opcodes: false,
        };
        let mut u = snap.clone().unwinder(opts);
        let mut s = Sample::default();
        for _ in 0..3 {
            let _ = u.sample(&mut s);
        }
    }
});
