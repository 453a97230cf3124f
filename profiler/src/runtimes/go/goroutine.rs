//! The stack of the goroutine a thread left for its own (a call into C through cgo, the
//! runtime's work on the thread's stack: `systemstack`, `morestack`), as the kernel copied it
//! with the sample: where the goroutine stopped (`g.sched`) and its stack from there up. The
//! thread's stack ends in the function that moved it; the goroutine's frames are its callers,
//! stepped on this copy.
use framehop::x86_64::UnwindRegsX86_64;
use profiler_common::runtimes::go::{GOROUTINE_BYTES_OFFSET, GOROUTINE_OFFSET};

use crate::unwind::StackSnapshot;

/// The goroutine's stack a sample carries, if any, reused from sample to sample.
#[derive(Default)]
pub(super) struct LeftGoroutine {
    /// `g.sched`'s PC, stack pointer and frame pointer; a stack pointer of 0: none.
    sched: [u64; 3],
    bytes: Vec<u8>,
    truncated: bool,
    /// Whether the stack being stepped went on on it.
    resumed: bool,
}

/// What a sample carried of a goroutine's stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Carried {
    Nothing,
    /// Where the goroutine stopped, but not its stack, which could not be read.
    Unread,
    /// Its stack, but not all of it: the copy's size was reached.
    Cut,
    Stack,
}

impl LeftGoroutine {
    /// Takes the goroutine's stack in what the kernel read of a sample (`records`), if it has one.
    /// A sample without one lets the last one's bytes go: a process keeps them only while its
    /// latest sample is of a thread on its own stack.
    pub(super) fn take(&mut self, records: &[u8]) -> Carried {
        self.sched[1] = 0;
        self.resumed = false;
        self.bytes = Vec::new();
        let word = |at: usize| Some(u64::from_le_bytes(records.get(at..at + 8)?.try_into().ok()?));
        let at = GOROUTINE_OFFSET;
        let (Some(pc), Some(sp), Some(bp), Some(counts)) =
            (word(at), word(at + 8), word(at + 16), word(at + 24))
        else {
            return Carried::Nothing;
        };
        if sp == 0 {
            return Carried::Nothing;
        }
        let (len, truncated) = (counts as u32 as usize, counts >> 32 != 0);
        let bytes = &records[GOROUTINE_BYTES_OFFSET.min(records.len())..];
        // Bytes the record does not hold are not there to read: the stack is cut there.
        self.truncated = truncated || len > bytes.len();
        self.bytes.extend_from_slice(&bytes[..len.min(bytes.len())]);
        self.sched = [pc, sp, bp];
        match (self.bytes.is_empty(), self.truncated) {
            (true, _) => Carried::Unread,
            (false, true) => Carried::Cut,
            (false, false) => Carried::Stack,
        }
    }

    /// Where the goroutine stopped, the first time it is asked for, when its stack was read: the
    /// stack being stepped goes on on it from then on.
    pub(super) fn resume(&mut self) -> Option<UnwindRegsX86_64> {
        if self.resumed || self.bytes.is_empty() {
            return None;
        }
        self.resumed = true;
        let [pc, sp, bp] = self.sched;
        Some(UnwindRegsX86_64::new(pc, sp, bp))
    }

    /// The goroutine's stack, once the stack being stepped went on on it.
    pub(super) fn stack(&self) -> Option<StackSnapshot<'_>> {
        self.resumed.then(|| StackSnapshot::new(self.sched[1], &self.bytes, self.truncated))
    }
}
