//! Threads past the first [`MAX_THREADS_APART`] counted by their pool, so
//! that a long profile of a program that starts threads all the time
//! keeps a bounded number of threads, not one more for every thread that
//! ever ran.
//!
//! Every output that shows threads keeps each thread's counts, so without
//! this a server that starts a thread per request grows its profile by
//! about half a kilobyte per thread, for as long as it runs. The first
//! [`MAX_THREADS_APART`] distinct threads, and every main thread, keep
//! their own ids (a program whose threads live on has them all among
//! these); a thread first seen
//! after them is counted under its pool: its name with every run of digits
//! made `*` (`Thread-5012 (handle)` → `Thread-* (handle)`,
//! `ThreadPoolExecutor-3_7` → `ThreadPoolExecutor-*_*`), with an id of
//! its own above any real thread id ([`POOL_BASE`]).
//!
//! Two threads of one pool sampled at the same instant are two "lanes" of
//! it (ids one apart), so a sample never names one id twice. Pools and
//! lanes are bounded too; past them, threads share the last lane of
//! `<other threads>`.

use foldhash::{HashMap, HashSet};

use crate::model::{FrameTable, Sample, StrId, status, thread_pool_name as pool_name};

/// Distinct threads kept apart, each under its own id.
pub const MAX_THREADS_APART: usize = 1024;
/// Distinct pools; threads of any further pool go to `<other threads>`.
const MAX_POOLS: usize = 256;
/// Lanes per pool: its threads sampled at one instant, at most.
const MAX_LANES: u64 = 256;
/// The first pool's id: above Linux's largest thread id (2^22), and a
/// number JavaScript holds exactly.
pub const POOL_BASE: u64 = 1 << 30;
/// The pool of threads without a name, and of threads past [`MAX_POOLS`].
const OTHER: &str = "<other threads>";
/// Pool names remembered by thread name at most (then forgotten at once).
const MAX_NAMES: usize = 4096;

/// Which threads are kept apart, and the pools of the others.
#[derive(Default)]
pub struct ThreadPools {
    apart: HashSet<u64>,
    /// Pool index and interned pool name, by the thread's interned name.
    by_name: HashMap<Option<StrId>, (u64, StrId)>,
    /// Pool index by pool name.
    pools: HashMap<String, u64>,
    /// Lanes taken in the sample being folded, per pool index.
    lanes: HashMap<u64, u64>,
}

impl ThreadPools {
    /// Give each thread of `sample` past the first [`MAX_THREADS_APART`]
    /// its pool's id and name (interned in `table`): how many it gave.
    #[inline]
    pub fn fold(&mut self, sample: &mut Sample, table: &mut FrameTable) -> u64 {
        let mut pooled = 0;
        let mut lanes_used = false;
        for t in &mut sample.threads {
            if self.apart.contains(&t.tid) {
                continue;
            }
            // A main thread is always itself, however late it comes.
            if t.status & status::MAIN_THREAD != 0 {
                self.apart.insert(t.tid);
                continue;
            }
            if self.apart.len() < MAX_THREADS_APART {
                self.apart.insert(t.tid);
                continue;
            }
            if !lanes_used {
                self.lanes.clear();
                lanes_used = true;
            }
            let (pool, name) = self.pool_of(t.name, table);
            let lane = self.lanes.entry(pool).or_insert(0);
            t.tid = POOL_BASE + pool * MAX_LANES + (*lane).min(MAX_LANES - 1);
            *lane += 1;
            t.name = Some(name);
            pooled += 1;
        }
        pooled
    }

    /// The pool of a thread named `name`: its index and interned name.
    fn pool_of(&mut self, name: Option<StrId>, table: &mut FrameTable) -> (u64, StrId) {
        if let Some(&p) = self.by_name.get(&name) {
            return p;
        }
        if self.by_name.len() >= MAX_NAMES {
            self.by_name.clear();
        }
        let mut pool = name.map_or_else(|| OTHER.to_string(), |n| pool_name(table.str(n)));
        // The last place is kept for `<other threads>`.
        if pool != OTHER && !self.pools.contains_key(&pool) && self.pools.len() >= MAX_POOLS - 1 {
            pool = OTHER.to_string();
        }
        let next = self.pools.len() as u64;
        let index = *self.pools.entry(pool.clone()).or_insert(next);
        let p = (index, table.intern_str(&pool));
        self.by_name.insert(name, p);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ThreadSample;

    #[test]
    fn pools_are_names_without_their_numbers() {
        assert_eq!(pool_name("Thread-5012 (handle)"), "Thread-* (handle)");
        assert_eq!(
            pool_name("ThreadPoolExecutor-3_17"),
            "ThreadPoolExecutor-*_*"
        );
        assert_eq!(pool_name("worker"), "worker");
    }

    fn thread(tid: u64, name: Option<StrId>) -> ThreadSample {
        ThreadSample {
            tid,
            interpreter_id: 0,
            status: 0,
            frames: Vec::new(),
            name,
        }
    }

    #[test]
    fn threads_past_the_first_thousand_share_their_pools_lanes() {
        let mut table = FrameTable::new();
        let mut pools = ThreadPools::default();
        let named = |t: &mut FrameTable, n: u64| Some(t.intern_str(&format!("Thread-{n} (job)")));
        // The first MAX_THREADS_APART threads keep their ids.
        for tid in 1..=MAX_THREADS_APART as u64 {
            let mut s = Sample::default();
            s.threads.push(thread(tid, named(&mut table, tid)));
            pools.fold(&mut s, &mut table);
            assert_eq!(s.threads[0].tid, tid);
        }
        // Later ones: their pool, one lane per thread of it in a sample;
        // a thread kept apart stays apart.
        let mut s = Sample::default();
        s.threads.push(thread(5000, named(&mut table, 5000)));
        s.threads.push(thread(7, named(&mut table, 7)));
        s.threads.push(thread(5001, named(&mut table, 5001)));
        s.threads.push(thread(5002, None));
        pools.fold(&mut s, &mut table);
        let got: Vec<(u64, &str)> = s
            .threads
            .iter()
            .map(|t| (t.tid, table.str(t.name.unwrap())))
            .collect();
        assert_eq!(
            got,
            [
                (POOL_BASE, "Thread-* (job)"),
                (7, "Thread-7 (job)"),
                (POOL_BASE + 1, "Thread-* (job)"),
                (POOL_BASE + MAX_LANES, OTHER),
            ]
        );
        // The next sample starts its lanes again.
        let mut s = Sample::default();
        s.threads.push(thread(5001, named(&mut table, 5001)));
        pools.fold(&mut s, &mut table);
        assert_eq!(s.threads[0].tid, POOL_BASE);
    }

    #[test]
    fn pools_and_lanes_are_bounded() {
        let mut table = FrameTable::new();
        let mut pools = ThreadPools::default();
        for tid in 1..=MAX_THREADS_APART as u64 {
            let mut s = Sample::default();
            s.threads.push(thread(tid, None));
            pools.fold(&mut s, &mut table);
        }
        let mut s = Sample::default();
        for i in 0..2 * MAX_POOLS as u64 {
            let name = table.intern_str(&format!("pool{}x-1", "a".repeat(i as usize)));
            s.threads.push(thread(100_000 + i, Some(name)));
        }
        for i in 0..2 * MAX_LANES {
            s.threads.push(thread(200_000 + i, None));
        }
        pools.fold(&mut s, &mut table);
        let ids: HashSet<u64> = s.threads.iter().map(|t| t.tid).collect();
        assert!(ids.len() <= MAX_POOLS + MAX_LANES as usize);
        let top = POOL_BASE + MAX_POOLS as u64 * MAX_LANES;
        assert!(s.threads.iter().all(|t| t.tid >= POOL_BASE && t.tid < top));
    }
}
