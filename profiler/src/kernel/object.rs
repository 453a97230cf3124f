//! The eBPF object embedded in the binary, and what both of its users (the sampler of
//! `record`, the allocation tracer of `leaks`) need to load it.
use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, PerCpuArray, ProgramArray},
    programs::{Program, ProgramError},
    util::nr_cpus,
};
use profiler_common::{
    maps,
    runtimes::{RuntimeKind, RuntimeProcess},
};

use super::btf::KernelBtf;
use crate::model::{Tgid, Tid};

pub(crate) static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// An eBPF object as embedded, unless the build left them out (`PROFILER_EBPF=none`: the unit
/// tests' build, without the nightly and bpf-linker).
pub(crate) fn embedded(object: &'static [u8]) -> Result<&'static [u8]> {
    if object.is_empty() {
        bail!(
            "this profiler was built without its eBPF programs (PROFILER_EBPF=none): build it with `cargo xtask build`"
        );
    }
    Ok(object)
}

/// The smallest ring buffer: a page. Rings the command does not use are shrunk to it.
pub(crate) const UNUSED_RING_BYTES: u32 = 4096;

/// Scratch arrays the command does not use keep one entry.
pub(crate) const UNUSED_SCRATCH_ENTRIES: u32 = 1;

/// Entries of a scratch array in use: one per possible CPU (their ids run from 0).
pub(crate) fn scratch_entries() -> Result<u32> {
    let cpus = nr_cpus().map_err(|(path, err)| anyhow!("cannot read {path}: {err}"))?;
    Ok(cpus.get())
}

pub(crate) fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program> {
    ebpf.program_mut(name).ok_or_else(|| anyhow!("the eBPF object has no program `{name}`"))
}

pub(crate) fn missing(map: &str) -> anyhow::Error {
    anyhow!("the eBPF object has no map `{map}`")
}

/// The total over CPUs of slot `index` of the `PerCpuArray<u64>` of counters `name`. Wrapping: a
/// slot may be decremented on another CPU than the one it was incremented on.
pub(crate) fn counter_total(ebpf: &Ebpf, name: &str, index: u32) -> Result<u64> {
    let map = ebpf.map(name).ok_or_else(|| missing(name))?;
    let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(map)?;
    Ok(counters.get(&index, 0)?.iter().fold(0u64, |sum, &n| sum.wrapping_add(n)))
}

/// Sets the flag that makes every program return at once: pauses sampling or tracking without
/// waiting for the kernel to detach anything.
pub(crate) fn pause(ebpf: &mut Ebpf) -> Result<()> {
    let map = ebpf.map_mut(maps::CONTROL).ok_or_else(|| missing(maps::CONTROL))?;
    let mut control: aya::maps::Array<_, u32> = aya::maps::Array::try_from(map)?;
    control.set(0, &1, 0).context("cannot set the stop flag of the eBPF programs")?;
    Ok(())
}

/// Tells the programs where a thread's stack ends, so that stack copies stop there.
pub(crate) fn set_stack_end(ebpf: &mut Ebpf, Tid(tid): Tid, end: u64) -> Result<()> {
    let map = ebpf.map_mut(maps::STACK_ENDS).ok_or_else(|| missing(maps::STACK_ENDS))?;
    let mut ends: BpfHashMap<_, u32, u64> = BpfHashMap::try_from(map)?;
    ends.insert(&tid, &end, 0).with_context(|| format!("cannot record the stack end of thread {tid}"))?;
    Ok(())
}

/// Byte offset of a task's saved FS base (`thread.fsbase`) in `struct task_struct`: how the
/// Python walk tells which of the interpreter's thread states is the sampled thread's (glibc's
/// `pthread_self()`).
pub(crate) fn task_fs_base_offset(btf: &mut KernelBtf) -> Result<u32> {
    Ok(btf.field_offset("task_struct", "thread")? + btf.field_offset("thread_struct", "fsbase")?)
}

/// Tells the programs what the walker of process `tgid`'s runtime needs (`None`: it runs none
/// any more, or is gone).
pub(crate) fn set_runtime_process(
    ebpf: &mut Ebpf,
    Tgid(tgid): Tgid,
    process: Option<&RuntimeProcess>,
) -> Result<()> {
    let map = ebpf.map_mut(maps::RUNTIME_PROCESSES).ok_or_else(|| missing(maps::RUNTIME_PROCESSES))?;
    let mut processes: BpfHashMap<_, u32, RuntimeProcess> = BpfHashMap::try_from(map)?;
    match process {
        Some(process) => processes
            .insert(&tgid, process, 0)
            .with_context(|| format!("cannot tell the kernel where process {tgid}'s runtime frames are")),
        None => {
            // Removing an entry that is not there (a process never registered) is no failure.
            let _ = processes.remove(&tgid);
            Ok(())
        }
    }
}

/// Loads the walker of each runtime walked in the kernel for the hook program `hook` (its
/// program is named `{hook}_{runtime}`), and puts it in the program array `array` at the index
/// of the runtime's kind, where the hook's program finds it.
pub(crate) fn load_runtime_walkers(ebpf: &mut Ebpf, hook: &str, array: &str) -> Result<()> {
    for kind in RuntimeKind::WALKED {
        let name = format!("{hook}_{}", kind.name());
        let walker = program(ebpf, &name)?;
        match walker {
            Program::PerfEvent(walker) => walker.load(),
            Program::RawTracePoint(walker) => walker.load(),
            Program::UProbe(walker) => walker.load(),
            _ => return Err(anyhow!("the runtime walker `{name}` is of no hook's type")),
        }
        .map_err(verifier_error)
        .with_context(|| format!("cannot load the runtime walker `{name}`"))?;
        let fd = walker.fd()?.try_clone()?;
        let map = ebpf.map_mut(array).ok_or_else(|| missing(array))?;
        ProgramArray::try_from(map)?
            .set(kind as u32, &fd, 0)
            .with_context(|| format!("cannot hand the runtime walker `{name}` to its hook"))?;
    }
    Ok(())
}

/// A verifier rejection, with the last lines of its log (where it says why).
pub(crate) fn verifier_error(err: ProgramError) -> anyhow::Error {
    match err {
        ProgramError::LoadError { io_error, verifier_log } => {
            let log = format!("{verifier_log:?}");
            let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n  ");
            anyhow!("the kernel rejected the eBPF program ({io_error}); verifier says:\n  {tail}")
        }
        other => anyhow::Error::new(other).context("cannot load the eBPF program"),
    }
}
