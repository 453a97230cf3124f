//! Reading what targets control: the files a process maps, their debug files, its perf map and
//! jitdump, the text it puts in `/proc`, and everything whose size it decides. The profiler runs
//! as root, and a target may be hostile, in a container, or both; every stage that reads a
//! target's files does so through this one, so that the rules below hold in one place:
//!
//! - one opener ([`open`]): a path resolves inside the target's own root, a component at a time,
//!   and only a regular file is opened, never blocking (no FIFO, socket or device);
//! - nothing a target can truncate is mapped: a file its owner could change is read from a
//!   sealed copy in memory ([`copy`]), since a mapped file cut short would kill the profiler with
//!   SIGBUS, which no panic handler contains;
//! - nothing waits on a FUSE daemon, whose wait nothing ends, not even a fatal signal: its files,
//!   and a user's overlay's, are never opened, stat'ed or looked up through ([`mounts`] says who
//!   answers for a file, asked of the file itself); a network server's files are copied off the
//!   pipeline, with a deadline ([`remote`]); a target's memory, and its mapped files' links (what
//!   may wait on its memory's lock), are read by reader processes, each read within a deadline
//!   ([`reader`]);
//! - memory is bounded whatever a target claims: copies, inflated sections ([`elf`]) and what
//!   targets describe about themselves ([`cache`]) are charged to budgets ([`Budget`]), `/proc`
//!   text is read up to a bound ([`read_bounded`]), and the descriptors kept for targets share
//!   one cap ([`descriptors`]);
//! - what a file says of itself ([`ElfFacts`]: its build id, its debug link) is trusted only as
//!   far as who could change it ([`Writer`]); a debug file is taken only from root or from the
//!   module's own user ([`debug_file`]).
//!
//! It imports nothing of the stages above it: a mapping is known by where it is and the inode it
//! was mapped from ([`open::MappedAt`]), a process by the root its paths resolve in. A target's
//! memory is read for the runtimes by `runtimes::memory`, within each sample's allowance.
mod budget;
mod cache;
mod copy;
pub(crate) mod debug_file;
pub(crate) mod descriptors;
mod elf;
pub(crate) mod mounts;
pub(crate) mod open;
mod proc_file;
pub(crate) mod reader;
pub(crate) mod remote;

pub use self::elf::ElfFacts;
pub(crate) use self::{
    budget::{Budget, Charge},
    cache::{Cache, DESCRIBED, DESCRIBED_BUDGET, unkept, unkept_once},
    copy::{COPY_BUDGET, Parts, StableFile, Writer, refused as refused_copies},
    elf::{INFLATED, INFLATED_BUDGET, MAX_INFLATED_SECTION, charge_inflated},
    proc_file::read_bounded,
};
