//! What processes do to their address spaces, as the kernel reports it while we record.
use super::Mapping;
use crate::model::Tgid;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// Process `pid` mapped executable memory.
    Map { pid: Tgid, time_ns: u64, mapping: Mapping },
    /// Process `pid` ran exec: its old mappings are gone; `comm` is its new name.
    Exec { pid: Tgid, time_ns: u64, comm: String },
    /// The main thread of `pid` was renamed.
    Rename { pid: Tgid, time_ns: u64, comm: String },
    /// Process `parent` forked process `child` (threads are not reported).
    Fork { parent: Tgid, child: Tgid, time_ns: u64 },
    /// Process `pid` exited.
    Exit { pid: Tgid, time_ns: u64 },
    /// The kernel dropped this many records (the ring was full).
    Lost { time_ns: u64, count: u64 },
}

impl TaskEvent {
    /// When it happened (CLOCK_MONOTONIC).
    pub fn time_ns(&self) -> u64 {
        match *self {
            Self::Map { time_ns, .. }
            | Self::Exec { time_ns, .. }
            | Self::Rename { time_ns, .. }
            | Self::Fork { time_ns, .. }
            | Self::Exit { time_ns, .. }
            | Self::Lost { time_ns, .. } => time_ns,
        }
    }
}
