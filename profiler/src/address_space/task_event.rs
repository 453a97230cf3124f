//! What processes do to their address spaces, as the kernel reports it while we record.
use super::Mapping;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// Process `pid` mapped executable memory.
    Map { pid: u32, time_ns: u64, mapping: Mapping },
    /// Process `pid` ran exec: its old mappings are gone; `comm` is its new name.
    Exec { pid: u32, time_ns: u64, comm: String },
    /// The main thread of `pid` was renamed.
    Rename { pid: u32, comm: String },
    /// Process `parent` forked process `child` (threads are not reported).
    Fork { parent: u32, child: u32, time_ns: u64 },
    /// Process `pid` exited.
    Exit { pid: u32, time_ns: u64 },
    /// The kernel dropped this many records (the ring was full).
    Lost { count: u64 },
}
