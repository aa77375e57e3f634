//! The asyncio debug offsets (`_Py_AsyncioModuleDebugOffsets`, 3.14+):
//! decoding the `AsyncioDebug` section's 13 words and validating them,
//! together with the generator, set and list-node offsets of the main
//! table that the task walk needs.
//!
//! Layout (13 × u64, the same in 3.14 and 3.15):
//! `asyncio_task_object {size, task_name, task_awaited_by, task_is_task,
//! task_awaited_by_is_set, task_coro, task_node}`,
//! `asyncio_interpreter_state {size, asyncio_tasks_head}`,
//! `asyncio_thread_state {size, asyncio_running_loop, asyncio_running_task,
//! asyncio_tasks_head}`.
//!
//! The table is untrusted like the main one: every field must be aligned
//! and lie inside its struct, every struct size under a cap, or the table
//! is refused naming the field. A missing section is not an error here
//! (asyncio may not be imported yet); an invalid one is.

use super::{Offsets, PyVersion, RawTable};
use crate::error::{Error, Result};
use crate::process::LocalBytes;

/// Bytes of the section: 13 words.
pub const SECTION_SIZE: usize = 13 * 8;

/// Caps on the struct sizes the table reports: far above any real build.
const MAX_TASK: u64 = 4096;
const MAX_THREAD: u64 = 64 * 1024;
const MAX_GEN: u64 = 4096;
const MAX_SET: u64 = 4096;

/// `gi_frame_state` values the walk tells apart, per version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenStates {
    /// The coroutine finished: it has no frame to show.
    pub cleared: i8,
    /// Suspended in `await`/`yield from`: it awaits another object
    /// (3.15 adds a `_LOCKED` variant of it).
    pub yield_from: [i8; 2],
}

/// Everything the task walk reads, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncOffsets {
    pub task_size: u64,
    pub task_name: u64,
    pub task_awaited_by: u64,
    pub task_is_task: u64,
    pub task_awaited_by_is_set: u64,
    pub task_coro: u64,
    /// The task's `llist_node` in its thread's (or interpreter's) list.
    pub task_node: u64,
    pub interp_tasks_head: u64,
    /// `_PyThreadStateImpl` size: the thread fields lie past
    /// `PyThreadState`.
    pub thread_size: u64,
    pub thread_running_loop: u64,
    pub thread_running_task: u64,
    pub thread_tasks_head: u64,
    /// Generator (coroutine) object: size, embedded frame, frame state.
    pub gen_size: u64,
    pub gen_iframe: u64,
    pub gen_frame_state: u64,
    pub gen_states: GenStates,
    /// `_PyInterpreterFrame.stackpointer`: a suspended coroutine's awaited
    /// object lies `await_below` bytes below it (3.14: the top word; 3.15:
    /// the second word).
    pub frame_stackpointer: u64,
    pub await_below: u64,
    pub llist_next: u64,
    /// `PySetObject`: size, `used`, `mask`, `table`.
    pub set_size: u64,
    pub set_used: u64,
    pub set_mask: u64,
    pub set_table: u64,
}

/// `Py_TPFLAGS_LONG_SUBCLASS` and `Py_TPFLAGS_UNICODE_SUBCLASS`: how a
/// task's name object is told to be an int or a str.
pub const TPFLAGS_LONG_SUBCLASS: u64 = 1 << 24;
pub const TPFLAGS_UNICODE_SUBCLASS: u64 = 1 << 28;

struct Check<'a> {
    pid: i32,
    version: PyVersion,
    words: &'a [u8],
    raw: &'a RawTable,
}

impl Check<'_> {
    fn err(&self, what: String) -> Error {
        Error::InvalidOffsets {
            pid: self.pid,
            version: self.version.to_string(),
            what,
        }
    }

    fn word(&self, i: usize) -> u64 {
        self.words.u64_at(i as u64 * 8).unwrap_or(0)
    }

    fn main(&self, name: &str) -> Result<u64> {
        self.raw
            .get(name)
            .ok_or_else(|| self.err(format!("{name} is missing (asyncio needs it)")))
    }

    fn size(&self, name: &str, v: u64, max: u64) -> Result<u64> {
        if v == 0 || v > max {
            return Err(self.err(format!("{name} is {v}, expected between 1 and {max}")));
        }
        Ok(v)
    }

    fn field(&self, name: &str, v: u64, width: u64, size: u64) -> Result<u64> {
        if !v.is_multiple_of(width) {
            return Err(self.err(format!("{name} = {v} is not aligned to {width} bytes")));
        }
        if v.checked_add(width).is_none_or(|end| end > size) {
            return Err(self.err(format!(
                "{name} = {v} lies outside its struct of {size} bytes"
            )));
        }
        Ok(v)
    }
}

/// The task object's fields, words 1-6 of the section: (name, width).
/// The node is two words (next, prev): [`NODE`].
const TASK_FIELDS: [(&str, u64); 6] = [
    ("task_name", 8),
    ("task_awaited_by", 8),
    ("task_is_task", 1),
    ("task_awaited_by_is_set", 1),
    ("task_coro", 8),
    ("task_node", NODE),
];

/// The width of an `llist_node` field: two words, 8-aligned.
const NODE: u64 = 16;

impl Check<'_> {
    /// `v`, a field of `width` bytes in a struct of `size`: a [`NODE`] is
    /// 8-aligned and its two words end inside the struct.
    fn field_or_node(&self, name: &str, v: u64, width: u64, size: u64) -> Result<u64> {
        match width {
            NODE => self.field(name, v, 8, size.saturating_sub(8)),
            _ => self.field(name, v, width, size),
        }
    }

    /// The section is whole and belongs to a version that has one.
    fn section(&self, version: PyVersion) -> Result<()> {
        if self.words.len() < SECTION_SIZE {
            return Err(self.err(format!(
                "the AsyncioDebug section is {} bytes, expected {SECTION_SIZE}",
                self.words.len()
            )));
        }
        if version.minor < 14 {
            return Err(self.err("an AsyncioDebug section before Python 3.14".into()));
        }
        Ok(())
    }

    /// `asyncio_task_object`: its size and fields (words 0-6).
    fn task(&self) -> Result<[u64; 7]> {
        let size = self.size("asyncio_task_object.size", self.word(0), MAX_TASK)?;
        let mut out = [size; 7];
        for (i, (name, width)) in TASK_FIELDS.into_iter().enumerate() {
            let name = format!("asyncio_task_object.{name}");
            out[i + 1] = self.field_or_node(&name, self.word(i + 1), width, size)?;
        }
        Ok(out)
    }

    /// `asyncio_interpreter_state` (words 7, 8): the list head of the
    /// interpreter's tasks, a node in the same struct the main table sizes.
    fn interp_tasks_head(&self, o: &Offsets) -> Result<u64> {
        let size = self.word(7);
        if size != o.interp_size {
            return Err(self.err(format!(
                "asyncio_interpreter_state.size is {size}, but interpreter_state.size is {}",
                o.interp_size
            )));
        }
        let name = "asyncio_interpreter_state.asyncio_tasks_head";
        self.field_or_node(name, self.word(8), NODE, size)
    }

    /// `asyncio_thread_state` (words 9-12): `_PyThreadStateImpl`, which
    /// holds the thread state, and its size.
    fn thread(&self, o: &Offsets) -> Result<[u64; 4]> {
        let size = self.size("asyncio_thread_state.size", self.word(9), MAX_THREAD)?;
        if size < o.tstate_size {
            return Err(self.err(format!(
                "asyncio_thread_state.size is {size}, smaller than the thread state ({})",
                o.tstate_size
            )));
        }
        let f = |name: &str, i: usize, width: u64| {
            let name = format!("asyncio_thread_state.{name}");
            self.field_or_node(&name, self.word(i), width, size)
        };
        Ok([
            size,
            f("asyncio_running_loop", 10, 8)?,
            f("asyncio_running_task", 11, 8)?,
            f("asyncio_tasks_head", 12, NODE)?,
        ])
    }

    /// A field of the main table, `width` bytes inside a struct of `size`.
    fn main_field(&self, name: &str, width: u64, size: u64) -> Result<u64> {
        self.field(name, self.main(name)?, width, size)
    }

    /// The generator (coroutine) object of the main table: its size, its
    /// embedded frame (a whole frame must fit) and its frame state.
    fn generator(&self, o: &Offsets) -> Result<[u64; 3]> {
        let size = self.size("gen_object.size", self.main("gen_object.size")?, MAX_GEN)?;
        let iframe = self.main_field("gen_object.gi_iframe", 8, size)?;
        if iframe + o.frame_size > size {
            return Err(self.err(format!(
                "gen_object.gi_iframe = {iframe}: a frame of {} bytes there does not fit the generator of {size} bytes",
                o.frame_size
            )));
        }
        let state = self.main_field("gen_object.gi_frame_state", 1, size)?;
        Ok([size, iframe, state])
    }

    /// `PySetObject` of the main table: size, `used`, `mask`, `table`.
    fn set(&self) -> Result<[u64; 4]> {
        let size = self.size("set_object.size", self.main("set_object.size")?, MAX_SET)?;
        Ok([
            size,
            self.main_field("set_object.used", 8, size)?,
            self.main_field("set_object.mask", 8, size)?,
            self.main_field("set_object.table", 8, size)?,
        ])
    }
}

/// `gi_frame_state` values and where a suspended coroutine's awaited
/// object lies below its frame's stack pointer, per version.
fn generator_facts(minor: u8) -> (GenStates, u64) {
    if minor >= 15 {
        let s = GenStates {
            cleared: 5,
            yield_from: [2, 3],
        };
        (s, 16)
    } else {
        let s = GenStates {
            cleared: 4,
            yield_from: [-1, -1],
        };
        (s, 8)
    }
}

impl AsyncOffsets {
    /// Decode and validate the section's bytes for a target whose main
    /// table is `raw` (normalised as `o`).
    pub fn decode(pid: i32, bytes: &[u8], raw: &RawTable, o: &Offsets) -> Result<AsyncOffsets> {
        let c = Check {
            pid,
            version: o.version,
            words: bytes,
            raw,
        };
        c.section(o.version)?;
        let [
            task_size,
            task_name,
            task_awaited_by,
            task_is_task,
            task_awaited_by_is_set,
            task_coro,
            task_node,
        ] = c.task()?;
        let interp_tasks_head = c.interp_tasks_head(o)?;
        let [
            thread_size,
            thread_running_loop,
            thread_running_task,
            thread_tasks_head,
        ] = c.thread(o)?;
        let [gen_size, gen_iframe, gen_frame_state] = c.generator(o)?;
        let frame_stackpointer = c.main_field("interpreter_frame.stackpointer", 8, o.frame_size)?;
        let llist_next = c.main_field("llist_node.next", 8, 16)?;
        let [set_size, set_used, set_mask, set_table] = c.set()?;
        let (gen_states, await_below) = generator_facts(o.version.minor);
        Ok(AsyncOffsets {
            task_size,
            task_name,
            task_awaited_by,
            task_is_task,
            task_awaited_by_is_set,
            task_coro,
            task_node,
            interp_tasks_head,
            thread_size,
            thread_running_loop,
            thread_running_task,
            thread_tasks_head,
            gen_size,
            gen_iframe,
            gen_frame_state,
            gen_states,
            frame_stackpointer,
            await_below,
            llist_next,
            set_size,
            set_used,
            set_mask,
            set_table,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The main table of a real interpreter and its AsyncioDebug words
    /// (read from Debian's 3.14.10 and 3.15.2).
    fn real(minor: u8) -> (RawTable, Offsets, Vec<u8>) {
        let (table, words): (&[u8], [u64; 13]) = match minor {
            14 => (
                include_bytes!("../../fixtures/offsets/3.14.10.bin"),
                [
                    168, 136, 96, 108, 109, 128, 152, 225864, 10880, 936, 864, 872, 880,
                ],
            ),
            _ => (
                include_bytes!("../../fixtures/offsets/3.15.2.bin"),
                [
                    168, 136, 96, 108, 109, 128, 152, 226240, 10856, 1104, 1024, 1032, 1048,
                ],
            ),
        };
        let raw = RawTable::decode(1, table).unwrap();
        let o = Offsets::from_raw(1, &raw).unwrap();
        let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        (raw, o, bytes)
    }

    fn set(bytes: &mut [u8], i: usize, v: u64) {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn real_tables_decode_with_their_versions_facts() {
        let (raw, o, bytes) = real(14);
        let a = AsyncOffsets::decode(1, &bytes, &raw, &o).unwrap();
        assert_eq!(
            (a.task_node, a.thread_tasks_head, a.await_below),
            (152, 880, 8)
        );
        assert_eq!(a.gen_states.yield_from, [-1, -1]);
        let (raw, o, bytes) = real(15);
        let a = AsyncOffsets::decode(1, &bytes, &raw, &o).unwrap();
        assert_eq!(
            (a.interp_tasks_head, a.thread_running_task, a.await_below),
            (10856, 1032, 16)
        );
        assert_eq!(a.gen_states.cleared, 5);
        assert_eq!((a.gen_iframe, a.gen_size), (72, 160));
    }

    #[test]
    fn every_corrupt_word_is_refused_by_name() {
        let names = [
            "asyncio_task_object.size",
            "asyncio_task_object.task_name",
            "asyncio_task_object.task_awaited_by",
            "asyncio_task_object.task_is_task",
            "asyncio_task_object.task_awaited_by_is_set",
            "asyncio_task_object.task_coro",
            "asyncio_task_object.task_node",
            "asyncio_interpreter_state.size",
            "asyncio_interpreter_state.asyncio_tasks_head",
            "asyncio_thread_state.size",
            "asyncio_thread_state.asyncio_running_loop",
            "asyncio_thread_state.asyncio_running_task",
            "asyncio_thread_state.asyncio_tasks_head",
        ];
        for minor in [14, 15] {
            let (raw, o, good) = real(minor);
            for (i, name) in names.iter().enumerate() {
                // Past any struct; and for the pointer fields, misaligned.
                let mut bad = vec![u64::MAX / 2];
                if ![0, 3, 4, 7, 9].contains(&i) {
                    bad.push(u64::from_le_bytes(good[i * 8..i * 8 + 8].try_into().unwrap()) + 1);
                }
                if [0, 7, 9].contains(&i) {
                    bad.push(0);
                }
                for v in bad {
                    let mut bytes = good.clone();
                    set(&mut bytes, i, v);
                    match AsyncOffsets::decode(1, &bytes, &raw, &o) {
                        Err(Error::InvalidOffsets { what, .. }) => {
                            // A size change may surface as the first field
                            // it no longer holds; the message names one.
                            let section = name.split('.').next().unwrap();
                            assert!(
                                what.contains(name) || what.contains(section),
                                "3.{minor} {name} = {v}: {what}"
                            );
                        }
                        other => panic!("3.{minor} {name} = {v}: accepted ({other:?})"),
                    }
                }
            }
            assert!(AsyncOffsets::decode(1, &good[..64], &raw, &o).is_err());
        }
    }
}
