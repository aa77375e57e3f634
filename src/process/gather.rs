//! Planning one `process_vm_readv` for many ranges: the kernel pins the
//! target's pages and looks up their mapping once per remote iovec, so
//! ranges that share pages (a thread state and the frame embedded right
//! after it, two entry frames on one C stack page) cost less read as one.
//!
//! A [`Plan`] sorts the requested ranges by address and merges each with
//! the next when the bytes between them are fewer than a page: those bytes
//! lie in pages read anyway, so the merged read can fail only where one of
//! the ranges would. The local side lists, in order, each request's buffer
//! and a scratch sink for every gap. Overlapping ranges are never merged
//! (each byte of a remote iovec goes to one local place).

/// Merge two ranges when at most this many bytes lie between them. Below a
/// page, the gap lies in the pages of the two ranges (see the module
/// documentation).
pub const MAX_GAP: u64 = 2048;

/// Where a stretch of a merged remote read goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Into request number `.0`'s buffer, whole.
    Req(u32),
    /// Dropped: `.0` bytes between two requests.
    Gap(u32),
}

/// One system call's worth of reads; reused from call to call so that
/// planning allocates nothing once warm.
#[derive(Debug, Default)]
pub struct Plan {
    /// Remote ranges, (address, length), in address order.
    pub remote: Vec<(u64, usize)>,
    /// Where the remote bytes go, in order.
    pub local: Vec<Piece>,
    /// Bytes the remote ranges add up to (what a complete read returns).
    pub total: usize,
    /// The non-empty requests, (address, index), sorted.
    order: Vec<(u64, u32)>,
    /// Each request's length, by index.
    lens: Vec<usize>,
    /// The requests read after the others (see [`Plan::build_then`]).
    later: Vec<(u64, u32)>,
}

impl Plan {
    /// Plan the reads of `ranges` (address, length). Empty ranges are
    /// left out: there is nothing to read for them.
    pub fn build(&mut self, ranges: impl Iterator<Item = (u64, usize)>) {
        self.build_then(ranges, usize::MAX);
    }

    /// [`Plan::build`], with the ranges from number `then` on read after
    /// all the others, one remote range each, in their order: the kernel
    /// copies the remote ranges in order, so they are read later than
    /// every byte before them.
    pub fn build_then(&mut self, ranges: impl Iterator<Item = (u64, usize)>, then: usize) {
        self.remote.clear();
        self.local.clear();
        self.order.clear();
        self.lens.clear();
        self.later.clear();
        for (i, (addr, len)) in ranges.enumerate() {
            self.lens.push(len);
            match (len > 0, i < then) {
                (true, true) => self.order.push((addr, i as u32)),
                (true, false) => self.later.push((addr, i as u32)),
                (false, _) => {}
            }
        }
        self.order.sort_unstable();
        let mut end = 0u64;
        for &(addr, i) in &self.order {
            let len = self.lens[i as usize];
            match (self.remote.last_mut(), addr.checked_sub(end)) {
                (Some((_, rlen)), Some(gap)) if gap <= MAX_GAP => {
                    if gap > 0 {
                        self.local.push(Piece::Gap(gap as u32));
                    }
                    *rlen += gap as usize + len;
                }
                _ => self.remote.push((addr, len)),
            }
            self.local.push(Piece::Req(i));
            end = addr.saturating_add(len as u64);
        }
        for &(addr, i) in &self.later {
            self.remote.push((addr, self.lens[i as usize]));
            self.local.push(Piece::Req(i));
        }
        self.total = self.remote.iter().map(|r| r.1).sum();
    }

    /// After a read that returned `got` bytes: the request it stopped in,
    /// or `None` if it was complete. A read stops at the first page it
    /// cannot read; a gap's bytes lie in the pages of the requests around
    /// it, so a read stopped in a gap is one that the next request's first
    /// page stopped.
    pub fn stopped_in(&self, got: usize) -> Option<u32> {
        let mut at = 0usize;
        let mut stopped = false;
        for piece in &self.local {
            match *piece {
                Piece::Req(i) => {
                    at += self.lens[i as usize];
                    if stopped || at > got {
                        return Some(i);
                    }
                }
                Piece::Gap(n) => {
                    at += n as usize;
                    stopped |= at > got;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(ranges: &[(u64, usize)]) -> Plan {
        let mut p = Plan::default();
        p.build(ranges.iter().copied());
        p
    }

    #[test]
    fn adjacent_and_near_ranges_merge_in_address_order() {
        // A thread state, a chunk elsewhere, the frame right after the
        // thread state, and two frames on one C stack page.
        let p = plan(&[
            (0x1000, 888),
            (0x9000, 3936),
            (0x1000 + 888, 88),
            (0x7000_0800, 88),
            (0x7000_0c40, 88),
        ]);
        assert_eq!(
            p.remote,
            vec![(0x1000, 976), (0x9000, 3936), (0x7000_0800, 0x440 + 88)]
        );
        assert_eq!(
            p.local,
            vec![
                Piece::Req(0),
                Piece::Req(2),
                Piece::Req(1),
                Piece::Req(3),
                Piece::Gap(0x440 - 88),
                Piece::Req(4),
            ]
        );
        assert_eq!(p.total, 976 + 3936 + 0x440 + 88);
    }

    #[test]
    fn ranges_past_then_are_read_last_in_their_order_unmerged() {
        // A thread state, a chunk, and the state's 16 bytes again, to be
        // read after the chunk although they lie inside the state.
        let mut p = Plan::default();
        p.build_then(
            [(0x9000, 3936), (0x1000, 888), (0x1058, 16), (0x1000, 8)].into_iter(),
            2,
        );
        assert_eq!(
            p.remote,
            vec![(0x1000, 888), (0x9000, 3936), (0x1058, 16), (0x1000, 8)]
        );
        assert_eq!(
            p.local,
            vec![Piece::Req(1), Piece::Req(0), Piece::Req(2), Piece::Req(3)]
        );
        assert_eq!(p.stopped_in(888 + 3936), Some(2));
        assert_eq!(p.stopped_in(p.total), None);
    }

    #[test]
    fn far_overlapping_and_empty_ranges_stay_apart() {
        let far = 0x1008 + 16 + MAX_GAP + 1;
        let p = plan(&[(0x1000, 16), (far, 8), (0x1008, 16), (0x5000, 0)]);
        // The overlap (0x1008 inside the first) starts its own range; the
        // far one too; the empty one is not read.
        assert_eq!(p.remote, vec![(0x1000, 16), (0x1008, 16), (far, 8)]);
        assert_eq!(p.local, vec![Piece::Req(0), Piece::Req(2), Piece::Req(1)]);
        assert_eq!(p.total, 40);
    }

    #[test]
    fn a_short_read_names_the_request_it_stopped_in() {
        // In address order: 0 (16 bytes), a gap of 48, 2 (8 bytes); 1 far.
        let p = plan(&[(0x1000, 16), (0x9000, 8), (0x1040, 8)]);
        assert_eq!(p.total, 16 + 48 + 8 + 8);
        assert_eq!(p.stopped_in(p.total), None);
        assert_eq!(p.stopped_in(0), Some(0));
        assert_eq!(p.stopped_in(15), Some(0));
        // Stopped in the gap or at its end: the next request's page.
        assert_eq!(p.stopped_in(16), Some(2));
        assert_eq!(p.stopped_in(64), Some(2));
        assert_eq!(p.stopped_in(72), Some(1));
    }

    #[test]
    fn a_range_at_the_top_of_the_address_space_does_not_overflow() {
        let p = plan(&[(u64::MAX - 7, 8), (u64::MAX - 3, 4)]);
        assert_eq!(p.remote.len(), 2);
        assert_eq!(p.total, 12);
    }
}
