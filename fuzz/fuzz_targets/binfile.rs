//! The `.bin` profile reader on arbitrary files: open (header, footer,
//! trailer, tables), then replay every sample, resolving each frame id in
//! the table it comes with. Decompression is capped at 16 MiB here (the
//! default, the reference's 1 GiB, only makes slow inputs slower).
//!
//! Each input is read twice: as it is, and with the footer's file size
//! set to the input's length, so inputs the mutator grew or shrank get
//! past the size check to the tables and the sample data.

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use tachyon::binfmt::reader::{BinaryReader, ReadOptions};
use tachyon::binfmt::{FOOTER_SIZE, HEADER_SIZE, MAGIC};

fuzz_target!(|data: &[u8]| {
    read(data);
    if data.len() as u64 >= HEADER_SIZE + FOOTER_SIZE {
        let mut fixed = data.to_vec();
        let n = fixed.len();
        // The footer: string count u32, frame count u32, file size u64, ...
        let at = n - FOOTER_SIZE as usize + 8;
        let be = data[..4] == MAGIC.to_be_bytes();
        let size = n as u64;
        let size = if be {
            size.to_be_bytes()
        } else {
            size.to_le_bytes()
        };
        fixed[at..at + 8].copy_from_slice(&size);
        read(&fixed);
    }
});

fn read(data: &[u8]) {
    let opts = ReadOptions {
        max_decompressed: 16 << 20,
        ..ReadOptions::default()
    };
    let Ok(mut r) = BinaryReader::new(Cursor::new(data), "fuzz.bin".into(), opts) else {
        return;
    };
    let _ = r.info().run_stats();
    let mut frames = 0u64;
    let _ = r.replay(|s, table| {
        for t in &s.threads {
            assert!(t.frames.len() <= opts.max_depth);
            for &id in &t.frames {
                let f = table.frame(id);
                let _ = (table.str(f.file), table.str(f.func));
                frames += 1;
            }
        }
    });
}
