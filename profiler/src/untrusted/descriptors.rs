//! Descriptors kept open for what targets show the profiler (the files of modules, their debug
//! files and copies, processes' roots) are counted
//! under one cap, set from the limit on open files: a target may map as many files, or start
//! as many processes, as it likes, and the profiler still has descriptors for everyone else's.
//! A holder that gets no [`Slot`] goes without keeping its descriptor: modules let go of the
//! least recently used (see `Modules::short_of_descriptors`), and a process in another mount
//! namespace keeps no root (its files are then reached through `/proc/PID/map_files` only).
//! Processes' memory files are held by readers, in processes of their own (see `reader`).
use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors left for everything else: blazesym's own (it opens each file it names from
/// again), the eBPF objects, perf events, outputs, sockets.
const RESERVED: u64 = 512;
/// Kept descriptors at most, whatever the limit.
const MOST: u64 = 1 << 16;

static HELD: AtomicU64 = AtomicU64::new(0);
static CAP: AtomicU64 = AtomicU64::new(1024);

/// Sets the cap for a limit of `open_files` descriptors: a third of what is left once
/// [`RESERVED`] is set aside, since the file of a module being named is open twice (ours and
/// blazesym's), and its debug file too.
pub(crate) fn set_cap(open_files: u64) {
    CAP.store((open_files.saturating_sub(RESERVED) / 3).clamp(16, MOST), Ordering::Relaxed);
}

/// A descriptor kept, counted until dropped.
#[derive(Debug)]
pub struct Slot(());

impl Drop for Slot {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A slot for one more descriptor kept, if the cap has room.
pub(crate) fn take() -> Option<Slot> {
    let cap = CAP.load(Ordering::Relaxed);
    let taken =
        HELD.try_update(Ordering::Relaxed, Ordering::Relaxed, |held| (held < cap).then_some(held + 1));
    taken.ok().map(|_| Slot(()))
}

/// The cap.
pub(crate) fn cap() -> u64 {
    CAP.load(Ordering::Relaxed)
}

/// What a holder that needs a slot to go on is refused with: as if the process had run out of
/// descriptors (`EMFILE`), which is never remembered against a file.
pub(crate) fn refusal() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EMFILE)
}
