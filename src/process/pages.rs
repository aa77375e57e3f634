//! A per-sample page cache over a reader: small reads of objects that
//! share a page (asyncio tasks, coroutines, their names, allocated side by
//! side) cost one system call per page instead of one per object, and
//! every object read from a page shows the same instant.
//!
//! The cache lives for one sample: the owner clears it before the next.
//! A read that crosses a page boundary, or comes after the cap on pages,
//! goes to the reader directly.

use std::cell::RefCell;

use foldhash::HashMap;

use super::ProcessMemory;
use crate::error::{Error, Result};

pub const PAGE: u64 = 4096;
/// Most pages kept in one sample (4 MiB).
pub const MAX_PAGES: usize = 1024;

/// Most page buffers kept from one sample for the next (1 MiB).
const MAX_SPARE: usize = 256;

/// The pages of one sample: page address to its bytes, or `None` when the
/// page could not be read whole. Cleared pages' buffers are kept (up to
/// [`MAX_SPARE`]) for the next sample's pages, so a steady sample does not
/// allocate them again.
#[derive(Default)]
pub struct Pages {
    map: RefCell<HashMap<u64, Option<Box<[u8]>>>>,
    spare: RefCell<Vec<Box<[u8]>>>,
}

impl Pages {
    /// Forget every page (before the next sample).
    pub fn clear(&self) {
        let mut map = self.map.borrow_mut();
        let mut spare = self.spare.borrow_mut();
        for p in map.drain().filter_map(|(_, p)| p) {
            if spare.len() < MAX_SPARE {
                spare.push(p);
            }
        }
    }

    /// How many pages this sample holds (read or not).
    pub fn len(&self) -> usize {
        self.map.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A reader that serves reads within one page from `pages`.
pub struct PageCache<'a> {
    pub inner: &'a dyn ProcessMemory,
    pub pages: &'a Pages,
}

impl ProcessMemory for PageCache<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let page = addr & !(PAGE - 1);
        // Within its page, also the last page of the address space (whose
        // end is 2^64): no sum here can overflow.
        let fits = (addr - page) as usize + buf.len() <= PAGE as usize;
        if buf.is_empty() || !fits {
            return self.inner.read(addr, buf);
        }
        let mut pages = self.pages.map.borrow_mut();
        if !pages.contains_key(&page) {
            if pages.len() >= MAX_PAGES {
                drop(pages);
                return self.inner.read(addr, buf);
            }
            let spare = self.pages.spare.borrow_mut().pop();
            let mut p = spare.unwrap_or_else(|| vec![0u8; PAGE as usize].into_boxed_slice());
            match self.inner.read(page, &mut p) {
                Ok(()) => pages.insert(page, Some(p)),
                Err(e) if e.is_fatal() || matches!(e, Error::ReadBudget { .. }) => {
                    self.pages.spare.borrow_mut().push(p);
                    return Err(e);
                }
                Err(_) => {
                    self.pages.spare.borrow_mut().push(p);
                    pages.insert(page, None)
                }
            };
        }
        match pages.get(&page) {
            Some(Some(p)) => {
                let off = (addr - page) as usize;
                buf.copy_from_slice(&p[off..off + buf.len()]);
                Ok(())
            }
            _ => {
                drop(pages);
                self.inner.read(addr, buf)
            }
        }
    }

    fn os_thread_state(&self, tid: u64) -> Option<char> {
        self.inner.os_thread_state(tid)
    }

    fn thread_comm(&self, tid: u64) -> Option<String> {
        self.inner.thread_comm(tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Memory whose bytes are their address's low byte; counts reads.
    struct Fake {
        reads: Cell<u32>,
        end: u64,
    }

    impl ProcessMemory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
            self.reads.set(self.reads.get() + 1);
            if addr.saturating_add(buf.len() as u64) > self.end {
                return Err(Error::corrupt("unmapped"));
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (addr + i as u64) as u8;
            }
            Ok(())
        }
    }

    #[test]
    fn reads_within_a_page_cost_one_read_and_see_its_bytes() {
        let fake = Fake {
            reads: Cell::new(0),
            end: 3 * PAGE,
        };
        let pages = Pages::default();
        let c = PageCache {
            inner: &fake,
            pages: &pages,
        };
        let mut a = [0u8; 8];
        let mut b = [0u8; 16];
        c.read(PAGE + 8, &mut a).unwrap();
        c.read(PAGE + 100, &mut b).unwrap();
        assert_eq!(fake.reads.get(), 1);
        assert_eq!(a[0], 8);
        assert_eq!(b[0], 100);
        // Across a boundary: straight to the reader.
        c.read(2 * PAGE - 4, &mut a).unwrap();
        assert_eq!(fake.reads.get(), 2);
        // An unreadable page fails as the reader does.
        assert!(c.read(5 * PAGE, &mut a).is_err());
        // A hostile address in the last page of the address space, or
        // running past it, is an error, never an overflow.
        assert!(c.read(u64::MAX - 7, &mut a).is_err());
        assert!(c.read(u64::MAX - 3, &mut a).is_err());
        assert!(c.read(!(PAGE - 1), &mut b).is_err());
    }

    #[test]
    fn cleared_pages_lend_their_buffers_to_the_next_sample() {
        let fake = Fake {
            reads: Cell::new(0),
            end: 400 * PAGE,
        };
        let pages = Pages::default();
        let c = PageCache {
            inner: &fake,
            pages: &pages,
        };
        let mut a = [0u8; 8];
        c.read(PAGE + 8, &mut a).unwrap();
        let first = pages.map.borrow()[&PAGE].as_ref().unwrap().as_ptr();
        pages.clear();
        assert!(pages.is_empty());
        // Another page, the same buffer, its own bytes.
        c.read(3 * PAGE + 9, &mut a).unwrap();
        assert_eq!(a[0], 9);
        let again = pages.map.borrow()[&(3 * PAGE)].as_ref().unwrap().as_ptr();
        assert_eq!(first, again);
        // The spare buffers stay bounded.
        for i in 0..300 {
            c.read(i * PAGE, &mut a).unwrap();
        }
        pages.clear();
        assert_eq!(pages.spare.borrow().len(), MAX_SPARE);
    }
}
