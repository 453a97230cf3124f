//! The kernel side, from userspace: the embedded eBPF object and what loads it (the [`sampler`]
//! of CPU profiles, the allocation [`tracer`] of `leaks`), the [`ring`] their records come
//! through, the [`task_events`] that tell how address spaces change, and the layouts of kernel
//! structures read from its BTF ([`btf`]).
pub mod btf;
pub mod object;
pub mod ring;
pub mod sampler;
pub mod task_events;
pub mod tracer;

use anyhow::Result;
use aya::maps::{MapData, RingBuf};

/// What a recording session needs of the kernel side of its mode: where records come from, how
/// to point it at processes, and how to stop it. Implemented by the [`sampler::Sampler`] and the
/// [`tracer::Tracer`]; a new mode brings its own.
pub trait KernelSource {
    /// The ring buffer the records come through (taken once).
    fn take_ring(&mut self) -> Result<RingBuf<MapData>>;
    /// Follows process `tgid` from now on. Called for each target before [`Self::start`].
    fn follow(&mut self, tgid: u32) -> Result<()>;
    /// Starts producing records.
    fn start(&mut self) -> Result<()>;
    /// Tells the programs where a thread's stack ends, so that stack copies stop there.
    fn set_stack_end(&mut self, tid: u32, end: u64) -> Result<()>;
    /// Stops producing records at once. Detaching from the kernel waits for it: that is left to
    /// drop, once the outputs are written.
    fn pause(&mut self) -> Result<()>;
    /// Records the kernel could not hand over (ring full).
    fn lost(&self) -> Result<u64>;
}
