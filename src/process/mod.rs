//! Reading another process: its memory, its memory map, its files, its threads.
//!
//! Everything above this module talks to a [`ProcessMemory`]; it never knows
//! whether it reads a live process (the Linux reader here) or a snapshot
//! file (`session::snapshot`, which needs a runtime and an unwinder). Only Linux x86-64 is built and tested, so only the Linux
//! implementation exists; macOS and Windows readers would implement the same
//! trait.

pub mod corefile;
pub mod gather;
pub mod maps;
pub mod pages;

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub mod ptrace;
#[cfg(target_os = "linux")]
pub mod tree;

use std::cell::Cell;

/// Lowest address a structure of the target can lie at (page 0 is never
/// mapped).
pub const USER_START: u64 = 4096;
/// End of user space on x86-64 with 5-level page tables.
pub const USER_END: u64 = 1 << 56;

/// Could a structure of the interpreter lie at `addr` of a target? All
/// are 8-aligned in user space. A pointer that fails this is not followed.
pub fn plausible(addr: u64) -> bool {
    addr.is_multiple_of(8) && (USER_START..USER_END).contains(&addr)
}

use crate::error::{Error, Result};

/// One range to read: the remote address and the local buffer to fill.
pub struct ReadReq<'a> {
    pub addr: u64,
    pub buf: &'a mut [u8],
}

/// A request list's allocation, kept from one sample to the next: a
/// sample builds its lists of [`ReadReq`] afresh (they borrow that
/// sample's buffers), and without this each list cost an allocation and
/// its regrowths every sample.
#[derive(Default)]
pub struct ReqPool(Vec<ReadReq<'static>>);

impl ReqPool {
    /// An empty list with the capacity of the last one given back.
    pub fn take<'a>(&mut self) -> Vec<ReadReq<'a>> {
        recycle(std::mem::take(&mut self.0))
    }

    /// Keep `reqs`' allocation (its requests are dropped) for the next
    /// [`ReqPool::take`].
    pub fn give(&mut self, reqs: Vec<ReadReq<'_>>) {
        if reqs.capacity() > self.0.capacity() {
            self.0 = recycle(reqs);
        }
    }
}

/// The same allocation, emptied, for requests of another lifetime: the
/// standard library collects a mapped `IntoIter` in place when the
/// element layouts match, and the map never runs on an empty list.
fn recycle<'b>(mut reqs: Vec<ReadReq<'_>>) -> Vec<ReadReq<'b>> {
    reqs.clear();
    reqs.into_iter()
        .map(|r| ReadReq {
            addr: r.addr,
            buf: &mut [],
        })
        .collect()
}

/// Random access to another process's memory.
pub trait ProcessMemory {
    /// Fill `buf` from `addr`; a short read is an error.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()>;

    /// Fill every request, in as few system calls as the platform allows.
    /// Fails if any range cannot be read completely.
    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        for r in reqs.iter_mut() {
            self.read(r.addr, r.buf)?;
        }
        Ok(())
    }

    /// [`ProcessMemory::read_many`], with the requests from number `then`
    /// on read after all the others (in one system call where the platform
    /// allows, as its last ranges): what they read is no older than
    /// anything before them.
    fn read_many_then(&self, reqs: &mut [ReadReq<'_>], then: usize) -> Result<()> {
        let (first, later) = reqs.split_at_mut(then.min(reqs.len()));
        self.read_many(first)?;
        self.read_many(later)
    }

    /// Write `bytes` at `addr` in the target. Nothing but the 3.15 frame
    /// cache writes (`--frame-cache`: one pointer a thread, see
    /// `unwind::anchor`); what cannot write (a snapshot, a core file)
    /// says so, and the cache stays off.
    fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        Err(Error::Read {
            addr,
            len: bytes.len(),
            cause: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this reader cannot write into the target",
            ),
        })
    }

    /// The scheduler state letter of one OS thread (`R` running, `S`
    /// sleeping, ...), where the platform can tell.
    fn os_thread_state(&self, _tid: u64) -> Option<char> {
        None
    }

    /// The kernel's name of one OS thread (at most 15 bytes on Linux),
    /// where the platform can tell.
    fn thread_comm(&self, _tid: u64) -> Option<String> {
        None
    }

    /// Read one plain-old-data integer.
    fn read_u64(&self, addr: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A process as the runtime locator and the layout check see it: its
/// memory, its memory map, the files behind it, its threads. A live
/// process ([`linux::LinuxProcess`]) and a core file
/// ([`corefile::CoreFile`]) are both one.
pub trait Target: ProcessMemory {
    /// The process id (a core's, as its notes give it).
    fn pid(&self) -> i32;

    /// The memory map: which files are mapped where.
    fn maps(&self) -> Result<Vec<maps::MapEntry>>;

    /// The file behind mapping `m`, checked to be the file mapped there.
    fn open_mapped_file(&self, m: &maps::MapEntry) -> Result<std::fs::File>;

    /// A file the process would name `path` (a debug file): below its
    /// root directory first, then as it is. What it is must be checked by
    /// the caller.
    fn open_in_root(&self, path: &str) -> std::io::Result<std::fs::File> {
        std::fs::File::open(path)
    }

    /// The native ids of its threads, ascending.
    fn thread_ids(&self) -> Result<Vec<i32>>;

    /// Our id of a thread the target names `tid` (they differ across PID
    /// namespaces).
    fn host_tid(&self, tid: u64) -> Option<u64> {
        Some(tid)
    }

    /// Whether the process has exited, or is exiting, so that finding
    /// nothing means "gone", not "not Python". A core never has.
    fn has_exited(&self) -> bool {
        false
    }
}

/// Requests to the reader per system call: `read_many` is charged one
/// call per this many ranges (Linux's `IOV_MAX`).
pub const RANGES_PER_CALL: usize = 1024;

/// A reader that counts the calls and bytes asked of it and refuses more
/// than a budget: every read from the moment the budget is spent fails
/// with [`Error::ReadBudget`], so no pointer chase in torn memory can make
/// one sample cost without bound.
pub struct Metered<M> {
    inner: M,
    calls: Cell<u32>,
    bytes: Cell<u64>,
    max_calls: Cell<u32>,
    max_bytes: Cell<u64>,
    spent: Cell<bool>,
}

impl<M> Metered<M> {
    /// A reader with no budget set: it refuses nothing until [`Metered::start`].
    pub fn new(inner: M) -> Self {
        Metered {
            inner,
            calls: Cell::new(0),
            bytes: Cell::new(0),
            max_calls: Cell::new(u32::MAX),
            max_bytes: Cell::new(u64::MAX),
            spent: Cell::new(false),
        }
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Start counting afresh with a budget of `calls` and `bytes`.
    pub fn start(&self, calls: u32, bytes: u64) {
        self.calls.set(0);
        self.bytes.set(0);
        self.max_calls.set(calls);
        self.max_bytes.set(bytes);
        self.spent.set(false);
    }

    /// Add to the budget: for work whose reads are bounded elsewhere (a
    /// code object loaded, a thread found in the list).
    pub fn grant(&self, calls: u32, bytes: u64) {
        self.max_calls
            .set(self.max_calls.get().saturating_add(calls));
        self.max_bytes
            .set(self.max_bytes.get().saturating_add(bytes));
    }

    /// Calls and bytes asked for since [`Metered::start`].
    pub fn used(&self) -> (u32, u64) {
        (self.calls.get(), self.bytes.get())
    }

    /// The budget (calls, bytes), grants included.
    pub fn limit(&self) -> (u32, u64) {
        (self.max_calls.get(), self.max_bytes.get())
    }

    /// True once a read was refused: whatever the caller made of that
    /// failure, the sample is over budget.
    pub fn spent(&self) -> bool {
        self.spent.get()
    }

    /// The error a refused read gives.
    pub fn budget_error(&self) -> Error {
        Error::ReadBudget {
            calls: self.max_calls.get(),
            bytes: self.max_bytes.get(),
        }
    }

    fn charge(&self, calls: u32, bytes: u64) -> Result<()> {
        let c = self.calls.get().saturating_add(calls);
        let b = self.bytes.get().saturating_add(bytes);
        if self.spent.get() || c > self.max_calls.get() || b > self.max_bytes.get() {
            self.spent.set(true);
            return Err(self.budget_error());
        }
        self.calls.set(c);
        self.bytes.set(b);
        Ok(())
    }
}

impl<T: ProcessMemory + ?Sized> ProcessMemory for &T {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read(addr, buf)
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        (**self).read_many(reqs)
    }

    fn read_many_then(&self, reqs: &mut [ReadReq<'_>], then: usize) -> Result<()> {
        (**self).read_many_then(reqs, then)
    }

    fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        (**self).write(addr, bytes)
    }

    fn os_thread_state(&self, tid: u64) -> Option<char> {
        (**self).os_thread_state(tid)
    }

    fn thread_comm(&self, tid: u64) -> Option<String> {
        (**self).thread_comm(tid)
    }
}

impl<M: ProcessMemory> ProcessMemory for Metered<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.charge(1, buf.len() as u64)?;
        self.inner.read(addr, buf)
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        let ranges = reqs.iter().filter(|r| !r.buf.is_empty()).count();
        let bytes = reqs.iter().map(|r| r.buf.len() as u64).sum();
        self.charge(ranges.div_ceil(RANGES_PER_CALL) as u32, bytes)?;
        self.inner.read_many(reqs)
    }

    fn read_many_then(&self, reqs: &mut [ReadReq<'_>], then: usize) -> Result<()> {
        let ranges = reqs.iter().filter(|r| !r.buf.is_empty()).count();
        let bytes = reqs.iter().map(|r| r.buf.len() as u64).sum();
        self.charge(ranges.div_ceil(RANGES_PER_CALL) as u32, bytes)?;
        self.inner.read_many_then(reqs, then)
    }

    /// Writes are not charged to the read budget: a sample makes at most
    /// one a thread, and only with the frame cache.
    fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.inner.write(addr, bytes)
    }

    fn os_thread_state(&self, tid: u64) -> Option<char> {
        self.inner.os_thread_state(tid)
    }

    fn thread_comm(&self, tid: u64) -> Option<String> {
        self.inner.thread_comm(tid)
    }
}

/// Little-endian field access into a local copy of a remote struct, bounds-checked:
/// a field outside the copy reads as an error, never a panic.
pub trait LocalBytes {
    fn u64_at(&self, off: u64) -> Option<u64>;
    fn u32_at(&self, off: u64) -> Option<u32>;
    fn i32_at(&self, off: u64) -> Option<i32>;
    fn u16_at(&self, off: u64) -> Option<u16>;
    fn u8_at(&self, off: u64) -> Option<u8>;
}

impl LocalBytes for [u8] {
    fn u64_at(&self, off: u64) -> Option<u64> {
        let o = usize::try_from(off).ok()?;
        self.get(o..o.checked_add(8)?)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    fn u32_at(&self, off: u64) -> Option<u32> {
        let o = usize::try_from(off).ok()?;
        self.get(o..o.checked_add(4)?)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    fn i32_at(&self, off: u64) -> Option<i32> {
        self.u32_at(off).map(|v| v as i32)
    }
    fn u16_at(&self, off: u64) -> Option<u16> {
        let o = usize::try_from(off).ok()?;
        self.get(o..o.checked_add(2)?)
            .map(|b| u16::from_le_bytes(b.try_into().unwrap_or([0; 2])))
    }
    fn u8_at(&self, off: u64) -> Option<u8> {
        self.get(usize::try_from(off).ok()?).copied()
    }
}

/// Memory made of a few regions (address, bytes); anything else is
/// unreadable. For unit tests of what decodes a target's memory.
#[cfg(test)]
pub struct Regions(pub Vec<(u64, Vec<u8>)>);

#[cfg(test)]
impl ProcessMemory for Regions {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        for (base, b) in &self.0 {
            let end = base.saturating_add(b.len() as u64);
            if addr >= *base && addr.saturating_add(buf.len() as u64) <= end {
                let at = (addr - base) as usize;
                buf.copy_from_slice(&b[at..at + buf.len()]);
                return Ok(());
            }
        }
        Err(Error::corrupt("unmapped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_request_list_keeps_its_allocation() {
        let mut pool = ReqPool::default();
        let mut a = [0u8; 4];
        let mut reqs = pool.take();
        for _ in 0..40 {
            reqs.push(ReadReq {
                addr: 1,
                buf: &mut [],
            });
        }
        reqs.push(ReadReq {
            addr: 2,
            buf: &mut a,
        });
        let cap = reqs.capacity();
        let ptr = reqs.as_ptr() as usize;
        pool.give(reqs);
        let again: Vec<ReadReq<'_>> = pool.take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), cap);
        assert_eq!(again.as_ptr() as usize, ptr);
    }
}
