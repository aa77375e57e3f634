//! Spoiled reads for the tests that feed tachyon corrupted memory: while
//! on, one read in `every` gets a flipped bit, a word of garbage, a zeroed
//! stretch or a huge value. The choice is a seeded xorshift64*, so a
//! failure can be replayed.

use std::cell::Cell;

/// What decides, read by read, whether and how a buffer is spoiled.
pub struct Spoil {
    rng: Cell<u64>,
    every: Cell<u64>,
    on: Cell<bool>,
}

impl Default for Spoil {
    fn default() -> Self {
        Spoil {
            rng: Cell::new(0),
            every: Cell::new(1),
            on: Cell::new(false),
        }
    }
}

impl Spoil {
    /// Spoil one read in `every` from now on, the choices seeded by
    /// `seed` and the interpreter's `minor` version.
    pub fn start(&self, seed: u64, minor: u8, every: u64) {
        self.rng
            .set(0x9e37_79b9_7f4a_7c15 ^ seed ^ u64::from(minor) << 32);
        self.every.set(every);
        self.on.set(true);
    }

    /// Read cleanly from now on.
    pub fn stop(&self) {
        self.on.set(false);
    }

    fn next(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Spoil `buf` if this read is one of those chosen.
    pub fn apply(&self, buf: &mut [u8]) {
        if !self.on.get() || buf.is_empty() || !self.next().is_multiple_of(self.every.get()) {
            return;
        }
        let r = self.next();
        let at = (r >> 8) as usize % buf.len();
        match r % 4 {
            // One flipped bit.
            0 => buf[at] ^= 1 << ((r >> 40) % 8),
            // A word of garbage.
            1 => {
                for (i, b) in buf[at..].iter_mut().take(8).enumerate() {
                    *b = (self.next() >> (i * 8)) as u8;
                }
            }
            // A zeroed stretch.
            2 => buf[at..].iter_mut().take(64).for_each(|b| *b = 0),
            // A huge value where a size or pointer might be.
            _ => buf[at..].iter_mut().take(8).for_each(|b| *b = 0xff),
        }
    }
}
