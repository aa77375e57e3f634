//! What the last sample found, kept so the next one can read it
//! speculatively: the interpreter and thread states, each thread's first
//! data-stack chunk and how far its stack reached lately, 3.11/3.12's
//! current-frame slots, the frames outside the data stack, and (3.13) the
//! fingerprints of the code objects in use.
//!
//! A guess only decides what is read in the first system calls of a
//! sample; the unwinder checks every guess against the pointers it reads
//! fresh and reads again what did not hold. A wrong guess costs reads,
//! never a wrong stack. Every map here is bounded.

use foldhash::{HashMap, HashSet};

use super::code::{self, CodeCache};
use super::frames::{KEEP_STALE, MAX_PREFETCH};
use super::threads::{MAX_INTERPRETERS, MAX_THREADS};
use crate::offsets::Offsets;
use crate::process::ReadReq;

/// Extra bytes read beyond the recent high-water mark of the live stack,
/// so a slightly deeper stack still fits the speculative read.
pub const CHUNK_SLACK: usize = 1024;

/// Most thread states remembered per map: a map past this is dropped and
/// rebuilt from the next samples.
const MAX_REMEMBERED: usize = 4 * MAX_THREADS;

/// The first chunk of a stack and a high-water mark of its live length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkGuess {
    pub chunk: u64,
    pub high_water: usize,
}

impl ChunkGuess {
    /// After a sample found `live` bytes of `chunk` in use: the mark keeps
    /// the highest recent length, decaying by 1/64 a sample, so one deep
    /// moment does not inflate reads for ever.
    pub fn next(self, chunk: u64, live: usize) -> ChunkGuess {
        ChunkGuess {
            chunk,
            high_water: live.max(self.high_water - self.high_water / 64),
        }
    }

    /// How many bytes of the chunk to read speculatively.
    pub fn read_len(&self) -> usize {
        self.high_water + CHUNK_SLACK
    }
}

/// Everything the last sample found that the next reads speculatively:
/// one value the unwinder keeps, so what it guesses is in one place.
#[derive(Default)]
pub struct Speculation {
    /// Main-thread mode's interpreter, thread, chunk and `cframe`, read in
    /// the same system call as the interpreter-list head.
    pub main: MainGuess,
    /// All-threads mode: each interpreter's thread states as the last
    /// sample found them, read all in one system call by the next; per
    /// thread, its first chunk (and 3.11/3.12 `cframe`), read with it.
    pub threads: ThreadGuesses,
    /// Per thread state: frames outside its data stack seen last sample.
    pub prefetch: Prefetch,
    /// 3.13 code-cache guard.
    pub fingerprints: Fingerprints,
    /// 3.15 frame cache: each thread's mark, whose vouched leaf is read
    /// alone (see [`super::anchor`]).
    pub marks: super::anchor::Marks,
}

impl Speculation {
    /// After this sample's thread lists are known: forget the threads that
    /// ended (their chunks, `cframe`s and prefetched frames) once they
    /// outnumber the live, and keep every map within its bound.
    pub fn forget_ended(&mut self) {
        self.threads.forget_ended(&mut self.prefetch);
        self.prefetch.bound();
        self.threads.bound();
    }
}

/// Main-thread mode: the one thread sampled.
#[derive(Debug, Default)]
pub struct MainGuess {
    /// The first interpreter, read in the same call as the list head.
    pub interp: u64,
    /// Its main thread state (0: not guessed).
    pub tstate: u64,
    pub chunk: ChunkGuess,
    /// 3.11/3.12: the thread's `cframe`, and the outer one it links to.
    pub cframe: u64,
    pub outer_cframe: u64,
}

/// All-threads mode: per interpreter and per thread state.
#[derive(Default)]
pub struct ThreadGuesses {
    /// Each interpreter's thread states in list order.
    lists: HashMap<u64, Vec<u64>>,
    chunks: HashMap<u64, ChunkGuess>,
    /// 3.11/3.12: each thread's `cframe`, and the outer one it links to.
    cframes: HashMap<u64, (u64, u64)>,
}

impl ThreadGuesses {
    /// The thread states interpreter `interp` had last time (taken out:
    /// give them back with [`ThreadGuesses::set_list`]).
    pub fn take_list(&mut self, interp: u64) -> Vec<u64> {
        self.lists.remove(&interp).unwrap_or_default()
    }

    pub fn set_list(&mut self, interp: u64, list: Vec<u64>) {
        if self.lists.len() > MAX_INTERPRETERS {
            self.lists.clear();
        }
        self.lists.insert(interp, list);
    }

    pub fn chunk(&self, tstate: u64) -> Option<ChunkGuess> {
        self.chunks.get(&tstate).copied()
    }

    /// A thread's first chunk `first` (0: it has no stack) was found with
    /// `live` bytes in use.
    pub fn set_chunk(&mut self, tstate: u64, first: u64, live: usize) {
        if first == 0 {
            self.chunks.remove(&tstate);
            return;
        }
        let old = self.chunks.get(&tstate).copied().unwrap_or_default();
        self.chunks.insert(tstate, old.next(first, live));
    }

    pub fn cframe(&self, tstate: u64) -> Option<(u64, u64)> {
        self.cframes.get(&tstate).copied()
    }

    pub fn set_cframe(&mut self, tstate: u64, cframe: (u64, u64)) {
        self.cframes.insert(tstate, cframe);
    }

    /// Forget what was remembered for thread states that no interpreter's
    /// list holds any more, here and in `prefetch`, once the forgotten
    /// would outnumber the live (threads that ended are never told to us;
    /// a program that starts threads all the time would otherwise grow
    /// these maps to their bound).
    pub fn forget_ended(&mut self, prefetch: &mut Prefetch) {
        let live: usize = self.lists.values().map(Vec::len).sum();
        let limit = 2 * live + 64;
        if self.chunks.len() <= limit
            && self.cframes.len() <= limit
            && prefetch.frames.len() <= limit
        {
            return;
        }
        let keep: foldhash::HashSet<u64> = self.lists.values().flatten().copied().collect();
        self.chunks.retain(|t, _| keep.contains(t));
        self.cframes.retain(|t, _| keep.contains(t));
        prefetch.frames.retain(|t, _| keep.contains(t));
    }

    /// Drop the per-thread maps that grew past their bound (threads that
    /// ended are never told to us).
    pub fn bound(&mut self) {
        if self.chunks.len() > MAX_REMEMBERED {
            self.chunks.clear();
        }
        if self.cframes.len() > MAX_REMEMBERED {
            self.cframes.clear();
        }
    }
}

/// Per thread state: the frames outside its data stack that its last walk
/// visited, read with its chunk next time.
#[derive(Default)]
pub struct Prefetch {
    frames: HashMap<u64, Vec<u64>>,
}

impl Prefetch {
    pub fn get(&self, tstate: u64) -> &[u64] {
        self.frames.get(&tstate).map_or(&[][..], |v| &v[..])
    }

    /// The list of `tstate`, created empty if new (the map is bounded).
    pub fn entry(&mut self, tstate: u64) -> &mut Vec<u64> {
        if self.frames.len() > MAX_REMEMBERED {
            self.frames.clear();
        }
        self.frames.entry(tstate).or_default()
    }

    /// Replace the list of `tstate`, if it has one, by `walked`, the
    /// frames its walk visited outside the data stack (`seen` holds them
    /// all), whose old contents come back in `walked`. Some of the old
    /// frames stay behind the new: [`KEEP_STALE`] of them after a complete
    /// walk, all after a failed one (a walk cut short by a frame that
    /// changed under it saw only the frames down to that one, and the
    /// retry needs the rest too). None stay when the old list could not be
    /// read (`!readable`): one of them is unreadable, and kept, it would
    /// fail every later sample's first read.
    pub fn replace(
        &mut self,
        tstate: u64,
        walked: &mut Vec<u64>,
        seen: &HashSet<u64>,
        complete: bool,
        readable: bool,
    ) {
        let Some(p) = self.frames.get_mut(&tstate) else {
            return;
        };
        let keep = match (readable, complete) {
            (false, _) => 0,
            (true, true) => KEEP_STALE,
            (true, false) => MAX_PREFETCH,
        };
        let room = MAX_PREFETCH.saturating_sub(walked.len()).min(keep);
        walked.extend(p.iter().filter(|a| !seen.contains(a)).take(room));
        std::mem::swap(p, walked);
    }

    pub fn bound(&mut self) {
        if self.frames.len() > MAX_REMEMBERED {
            self.frames.clear();
        }
    }
}

/// 3.13, which counts no code-object generations: the code objects the
/// last sample used, whose fingerprints the next sample reads in its first
/// system call; those found unchanged need no check after the walk.
#[derive(Default)]
pub struct Fingerprints {
    prev: Vec<u64>,
    buf: Vec<u8>,
    ok: Vec<u64>,
}

impl Fingerprints {
    /// Requests for the fingerprints of last sample's code objects, pushed
    /// onto `reqs`; none if `check` is false or there are none. True if
    /// some were pushed.
    pub fn requests<'a>(
        &'a mut self,
        o: &Offsets,
        check: bool,
        reqs: &mut Vec<ReadReq<'a>>,
    ) -> bool {
        self.ok.clear();
        if !check || self.prev.is_empty() {
            return false;
        }
        let (start, len) = code::fingerprint_span(o);
        self.buf.resize(len * self.prev.len(), 0);
        for (&c, buf) in self.prev.iter().zip(self.buf.chunks_mut(len)) {
            reqs.push(ReadReq {
                addr: c.wrapping_add(start),
                buf,
            });
        }
        true
    }

    /// After the requests were read: keep as checked the code objects
    /// whose fingerprint is unchanged, evict the others from `cache`.
    pub fn settle(&mut self, o: &Offsets, cache: &mut CodeCache) {
        let (start, len) = code::fingerprint_span(o);
        for (i, &c) in self.prev.iter().enumerate() {
            let now = self
                .buf
                .get(i * len..(i + 1) * len)
                .and_then(|b| code::fingerprint(o, b, start));
            if now.is_some() && now.as_ref() == cache.fingerprint_of(c) {
                self.ok.push(c);
            } else {
                cache.evict(c);
            }
        }
    }

    /// Of `used` (sorted, deduplicated), the code objects neither checked
    /// in this sample's first read nor freshly loaded (`loaded`, sorted);
    /// `used` becomes the set the next sample checks.
    pub fn unchecked(&mut self, used: &[u64], loaded: &[u64]) -> Vec<u64> {
        self.ok.sort_unstable();
        let out = used
            .iter()
            .copied()
            .filter(|c| self.ok.binary_search(c).is_err() && loaded.binary_search(c).is_err())
            .collect();
        self.prev.clear();
        self.prev.extend_from_slice(used);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_water_mark_keeps_the_deepest_and_decays() {
        let g = ChunkGuess::default().next(0x1000, 6400);
        assert_eq!(g.high_water, 6400);
        assert_eq!(g.read_len(), 6400 + CHUNK_SLACK);
        let g = g.next(0x1000, 100);
        assert_eq!(g.high_water, 6400 - 100);
        let g = g.next(0x2000, 9000);
        assert_eq!((g.chunk, g.high_water), (0x2000, 9000));
        // Shallow for long enough, the mark comes down to the stack.
        let mut g = g;
        for _ in 0..2000 {
            g = g.next(0x2000, 200);
        }
        assert!(g.high_water < 300, "{}", g.high_water);
    }

    #[test]
    fn a_thread_without_a_stack_forgets_its_chunk() {
        let mut t = ThreadGuesses::default();
        t.set_chunk(0x10, 0x1000, 500);
        assert_eq!(t.chunk(0x10).map(|g| g.chunk), Some(0x1000));
        t.set_chunk(0x10, 0x1000, 100);
        assert_eq!(t.chunk(0x10).map(|g| g.high_water), Some(500 - 500 / 64));
        t.set_chunk(0x10, 0, 0);
        assert_eq!(t.chunk(0x10), None);
    }

    #[test]
    fn thread_lists_are_taken_and_given_back() {
        let mut t = ThreadGuesses::default();
        assert!(t.take_list(0x50).is_empty());
        t.set_list(0x50, vec![1, 2, 3]);
        assert_eq!(t.take_list(0x50), vec![1, 2, 3]);
        assert!(t.take_list(0x50).is_empty());
    }

    #[test]
    fn maps_stay_bounded() {
        let mut t = ThreadGuesses::default();
        let mut p = Prefetch::default();
        for i in 0..=(MAX_REMEMBERED as u64 + 1) {
            t.set_chunk(i * 8 + 8, 0x1000, 10);
            t.set_cframe(i * 8 + 8, (0x2000, 0x3000));
            p.entry(i * 8 + 8).push(0x3000);
        }
        t.bound();
        p.bound();
        assert!(t.chunks.len() <= MAX_REMEMBERED && t.cframes.len() <= MAX_REMEMBERED);
        assert!(p.frames.len() <= MAX_REMEMBERED);
        for i in 0..=(MAX_INTERPRETERS as u64 + 1) {
            t.set_list(i * 8 + 8, vec![1]);
        }
        assert!(t.lists.len() <= MAX_INTERPRETERS + 1);
    }

    #[test]
    fn ended_threads_are_forgotten_once_they_outnumber_the_live() {
        let mut t = ThreadGuesses::default();
        let mut p = Prefetch::default();
        t.set_list(0x50, vec![0x1000, 0x2000]);
        // A thread state seen once per new thread, 200 of them.
        for i in 0..200u64 {
            let ts = 0x10_0000 + i * 0x1000;
            t.set_chunk(ts, 0x9000, 10);
            t.set_cframe(ts, (0x2000, 0x3000));
            p.entry(ts).push(0x3000);
            t.forget_ended(&mut p);
        }
        for live in [0x1000, 0x2000] {
            t.set_chunk(live, 0x9000, 10);
            p.entry(live).push(0x4000);
        }
        t.forget_ended(&mut p);
        // Never more than twice the live ones plus a margin.
        assert!(t.chunks.len() <= 2 * 2 + 64, "{}", t.chunks.len());
        assert!(t.cframes.len() <= 2 * 2 + 64 && p.frames.len() <= 2 * 2 + 64);
        // The live ones are kept.
        assert!(t.chunk(0x1000).is_some() && !p.get(0x2000).is_empty());
    }

    #[test]
    fn speculation_forgets_an_ended_threads_guesses_everywhere_and_stays_bounded() {
        let mut s = Speculation::default();
        s.threads.set_list(0x50, vec![0x1000]);
        s.threads.set_chunk(0x1000, 0x9000, 10);
        s.prefetch.entry(0x1000).push(0x4000);
        // Threads come and go; the list names only the live one.
        for i in 0..(MAX_REMEMBERED as u64 + 10) {
            let ts = 0x10_0000 + i * 0x1000;
            s.threads.set_chunk(ts, 0x9000, 10);
            s.threads.set_cframe(ts, (0x2000, 0x3000));
            s.prefetch.entry(ts).push(0x3000);
            s.forget_ended();
            assert!(s.threads.chunks.len() <= 2 + 64 + 1);
            assert!(s.threads.cframes.len() <= 2 + 64 + 1);
            assert!(s.prefetch.frames.len() <= 2 + 64 + 1);
        }
        // What the live thread had is kept, in every map.
        assert_eq!(s.threads.chunk(0x1000).map(|g| g.chunk), Some(0x9000));
        assert_eq!(s.prefetch.get(0x1000), &[0x4000]);
        // The main-thread guess is another mode's: untouched.
        s.main.tstate = 0x1000;
        s.forget_ended();
        assert_eq!(s.main.tstate, 0x1000);
    }

    #[test]
    fn prefetch_lists_swap_with_the_walk() {
        let mut p = Prefetch::default();
        assert!(p.get(0x10).is_empty());
        let seen = |v: &[u64]| v.iter().copied().collect::<HashSet<u64>>();
        let mut walked = vec![0xa0, 0xb0];
        p.replace(0x10, &mut walked, &seen(&[0xa0, 0xb0]), true, true); // no list yet: nothing kept
        assert!(p.get(0x10).is_empty());
        p.entry(0x10);
        p.replace(0x10, &mut walked, &seen(&[0xa0, 0xb0]), true, true);
        assert_eq!(p.get(0x10), &[0xa0, 0xb0]);
        assert!(walked.is_empty());
    }

    #[test]
    fn prefetch_keeps_old_frames_behind_the_walked_ones() {
        let mut p = Prefetch::default();
        p.entry(0x10).extend((1..=100u64).map(|i| i * 0x100));
        let seen = |v: &[u64]| v.iter().copied().collect::<HashSet<u64>>();
        // A complete walk that saw one old frame and one new: the walked
        // ones first, then KEEP_STALE of the others, none twice.
        let mut walked = vec![0x200, 0x9999_0000];
        p.replace(0x10, &mut walked, &seen(&[0x200, 0x9999_0000]), true, true);
        let got = p.get(0x10).to_vec();
        assert_eq!(&got[..2], &[0x200, 0x9999_0000]);
        assert_eq!(got.len(), 2 + KEEP_STALE);
        assert_eq!(got.iter().filter(|a| **a == 0x200).count(), 1);
        // A failed walk keeps all the old ones (up to MAX_PREFETCH).
        let mut walked = vec![0x7777_0000];
        p.replace(0x10, &mut walked, &seen(&[0x7777_0000]), false, true);
        assert_eq!(p.get(0x10).len(), 1 + got.len());
        // Never more than MAX_PREFETCH.
        let mut walked: Vec<u64> = (0..MAX_PREFETCH as u64)
            .map(|i| 0x1_0000_0000 + i * 8)
            .collect();
        let s = seen(&walked);
        p.replace(0x10, &mut walked, &s, false, true);
        assert_eq!(p.get(0x10).len(), MAX_PREFETCH);
        // A list that could not be read keeps none of its old frames, walk
        // complete or not: one of them is unreadable.
        for complete in [true, false] {
            let mut walked = vec![0x5555_0000];
            p.replace(0x10, &mut walked, &seen(&[0x5555_0000]), complete, false);
            assert_eq!(p.get(0x10), &[0x5555_0000]);
            p.entry(0x10).extend([0x6666_0000, 0x7777_0000]);
        }
    }

    #[test]
    fn fingerprints_checked_up_front_are_not_checked_again() {
        let mut f = Fingerprints::default();
        assert!(f.unchecked(&[], &[]).is_empty());
        // Used this sample: 1, 2, 3, 4; 2 was checked up front, 3 loaded.
        f.ok = vec![2];
        assert_eq!(f.unchecked(&[1, 2, 3, 4], &[3]), vec![1, 4]);
        assert_eq!(f.prev, vec![1, 2, 3, 4]);
    }
}
