//! The kernel side, from userspace: the embedded eBPF object and what loads it (the [`sampler`]
//! of CPU profiles, the allocation [`tracer`] of `leaks`), the [`ring`] their records come
//! through, the [`task_events`] that tell how address spaces change, the layouts of kernel
//! structures read from its BTF ([`btf`]), what names its functions ([`names`]; a function's
//! address from [`kallsyms`]), and where kernel frames' functions start ([`functions`]).
pub(crate) mod btf;
pub(crate) mod functions;
pub(crate) mod kallsyms;
pub(crate) mod names;
pub(crate) mod object;
pub(crate) mod ring;
pub(crate) mod sampler;
pub mod task_events;
pub(crate) mod tracer;

use anyhow::Result;
use aya::{
    Ebpf,
    maps::{MapData, RingBuf},
};
use profiler_common::runtimes::RuntimeProcess;

use crate::{
    decode::RecordKind,
    model::{Tgid, Tid},
};

/// What a recording session needs of the kernel side of its mode: where records come from, how
/// to point it at processes, and how to stop it. Implemented by the [`sampler::Sampler`] and the
/// [`tracer::Tracer`]; a new mode brings its own. What every eBPF object of ours does the same
/// way (the ring, the stack ends, the pause flag) comes with the trait.
pub(crate) trait KernelSource {
    /// The kind of records it writes (which says through which ring).
    const RECORDS: RecordKind;

    /// The loaded eBPF object.
    fn ebpf(&mut self) -> &mut Ebpf;
    /// Follows process `tgid` from now on. Called for each target before [`Self::start`].
    fn follow(&mut self, tgid: Tgid) -> Result<()>;
    /// Starts producing records.
    fn start(&mut self) -> Result<()>;
    /// Records the kernel could not hand over (ring full).
    fn lost(&self) -> Result<u64>;
    /// What the kernel side could not do, a line each (none by default).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// The ring buffer the records come through (taken once).
    fn take_ring(&mut self) -> Result<RingBuf<MapData>> {
        let ring = Self::RECORDS.ring();
        let map = self.ebpf().take_map(ring).ok_or_else(|| object::missing(ring))?;
        Ok(RingBuf::try_from(map)?)
    }

    /// Tells the programs where a thread's stack ends, so that stack copies stop there.
    fn set_stack_end(&mut self, tid: Tid, end: u64) -> Result<()> {
        object::set_stack_end(self.ebpf(), tid, end)
    }

    /// Tells the programs what the walker of process `tgid`'s runtime needs, or to stop walking
    /// it.
    fn set_runtime_process(&mut self, tgid: Tgid, process: Option<&RuntimeProcess>) -> Result<()> {
        object::set_runtime_process(self.ebpf(), tgid, process)
    }

    /// Stops producing records at once: every program checks a flag first and returns. Detaching
    /// from the kernel waits for it (up to 0.1 s per probe or event): that is left to drop, once
    /// the outputs are written.
    fn pause(&mut self) -> Result<()> {
        object::pause(self.ebpf())
    }
}
