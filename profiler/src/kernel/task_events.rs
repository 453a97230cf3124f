//! What processes do to their address spaces while we record: executable mappings, exec,
//! fork and exit, as the kernel reports them on a per-CPU perf "dummy" event (`mmap2`, `comm`,
//! `task` records, timestamped on CLOCK_MONOTONIC like the samples).
//!
//! Reading `/proc/PID/maps` when a sample arrives is too late for a library dlopen'd and
//! dlclose'd between two drains of the ring, or a process that lives 20 ms: these records are
//! written when the mapping is made.
use anyhow::{Context as _, Result, anyhow};
use perf_event::{
    Builder, Clock, SampleFlag, Sampler as PerfRing,
    data::{Record as PerfRecord, endian::Native, parse::Parser},
    events::Software,
};
use perf_event_open_sys::bindings::perf_event_header;

use crate::{
    address_space::{Backing, Mapping, TaskEvent, backing_named},
    model::Tgid,
};

/// Bytes of ring buffer per CPU (a power of two pages, plus the header page perf-event2 adds).
const RING_BYTES_PER_CPU: usize = 512 * 1024;
/// Task events read at most per CPU and drain: a storm of forks and mmaps cannot hold a drain.
const MAX_EVENTS_PER_DRAIN: usize = 16 * 1024;
/// `PERF_RECORD_MISC_COMM_EXEC`: the COMM record comes from an exec.
const MISC_COMM_EXEC: u16 = 1 << 13;

pub struct TaskEventReader {
    rings: Vec<PerfRing>,
    config: ParseConfig,
    order: TimeOrder,
}

/// Task events of several CPUs put in one time order. Each CPU's buffer is in time order, but
/// a process can fork on one CPU and its child exit on another: applied CPU by CPU, the exit
/// could come first and leave a child that never exits. Events newer than the drain's horizon
/// wait for the next drain, by when every CPU has written what happened before them.
#[derive(Debug, Default)]
pub struct TimeOrder {
    pending: Vec<TaskEvent>,
}

impl TimeOrder {
    pub fn extend(&mut self, events: impl IntoIterator<Item = TaskEvent>) {
        self.pending.extend(events);
    }

    /// The events up to `horizon_ns`, in time order (ties in the order they came).
    pub fn take_until(&mut self, horizon_ns: u64) -> Vec<TaskEvent> {
        self.pending.sort_by_key(TaskEvent::time_ns);
        let due = self.pending.partition_point(|event| event.time_ns() <= horizon_ns);
        self.pending.drain(..due).collect()
    }
}

impl TaskEventReader {
    /// Opens a dummy event on every online CPU, for all processes.
    pub fn open() -> Result<Self> {
        let cpus = aya::util::online_cpus().map_err(|(path, err)| anyhow!("cannot read {path}: {err}"))?;
        let rings = cpus
            .into_iter()
            .map(|cpu| {
                let mut builder = builder();
                builder.one_cpu(cpu as usize).any_pid();
                let mut ring = builder
                    .build()
                    .and_then(|counter| counter.sampled(RING_BYTES_PER_CPU))
                    .with_context(|| format!("cannot open a perf event for task events on CPU {cpu}"))?;
                ring.enable().context("cannot enable the task events")?;
                Ok(ring)
            })
            .collect::<Result<_>>()?;
        Ok(Self { rings, config: parse_config(), order: TimeOrder::default() })
    }

    /// Reads at most [`MAX_EVENTS_PER_DRAIN`] pending events of each CPU, and hands those that
    /// happened up to `horizon_ns` to `handle`, in time order. Returns whether events may have
    /// been left unread.
    pub fn drain(&mut self, horizon_ns: u64, mut handle: impl FnMut(TaskEvent)) -> bool {
        let Self { rings, config, order } = self;
        let mut left = false;
        for ring in rings {
            let mut read = 0;
            while let Some(record) = ring.next_record() {
                order.extend(decode(config, record.ty(), record.misc(), &record.to_contiguous()));
                read += 1;
                if read == MAX_EVENTS_PER_DRAIN {
                    left = true;
                    break;
                }
            }
        }
        order.take_until(horizon_ns).into_iter().for_each(&mut handle);
        left
    }
}

/// The event that reports what task events need: mmap2, comm (with exec) and task records,
/// each ending with its time on CLOCK_MONOTONIC like the samples (`sample_id_all`).
fn builder() -> Builder<'static> {
    let mut builder = Builder::new(Software::DUMMY);
    builder
        // The kernel only emits mmap records while some event has `mmap` set; `mmap2` alone
        // just picks the record format.
        .mmap(true)
        .mmap2(true)
        .comm(true)
        .comm_exec(true)
        .task(true)
        .sample_id_all(true)
        .sample(SampleFlag::TIME)
        .clockid(Clock::MONOTONIC)
        .exclude_kernel(false);
    builder
}

/// How task-event records are laid out.
pub type ParseConfig = perf_event::data::parse::ParseConfig<Native>;

/// How the records of [`builder`]'s events are laid out, for [`decode`].
pub fn parse_config() -> ParseConfig {
    ParseConfig::from(*builder().attrs())
}

/// The task event a record reports, from its type, `misc` bits and bytes (what follows its
/// header), laid out as `config` says. Never panics, whatever the bytes.
pub fn decode(config: &ParseConfig, ty: u32, misc: u16, bytes: &[u8]) -> Option<TaskEvent> {
    // sample_id_all with TIME: every record ends with its u64 timestamp.
    let time_ns = bytes
        .len()
        .checked_sub(8)
        .map_or(0, |at| u64::from_ne_bytes(bytes[at..].try_into().expect("8 bytes")));
    let size = u16::try_from(bytes.len() + size_of::<perf_event_header>()).ok()?;
    let header = perf_event_header { type_: ty, misc, size };
    let record = PerfRecord::parse_with_header(&mut Parser::new(bytes, config.clone()), header).ok()?;
    task_event(record, time_ns, misc & MISC_COMM_EXEC != 0)
}

fn task_event(record: PerfRecord<'_>, time_ns: u64, exec: bool) -> Option<TaskEvent> {
    match record {
        PerfRecord::Mmap2(mmap) => {
            let mapping = Mapping {
                start: mmap.addr,
                end: mmap.addr.checked_add(mmap.len)?,
                offset: mmap.pgoff,
                executable: mmap.prot & rustix::mm::ProtFlags::EXEC.bits() != 0,
                dev: (u64::from(mmap.maj()?) << 32) | u64::from(mmap.min()?),
                inode: mmap.ino()?,
                backing: backing(&mmap.filename, mmap.ino()?),
            };
            Some(TaskEvent::Map { pid: Tgid(mmap.pid), time_ns, mapping })
        }
        PerfRecord::Comm(comm) if comm.pid == comm.tid => {
            let name = String::from_utf8_lossy(&comm.comm).into_owned();
            Some(if exec {
                TaskEvent::Exec { pid: Tgid(comm.pid), time_ns, comm: name }
            } else {
                TaskEvent::Rename { pid: Tgid(comm.pid), time_ns, comm: name }
            })
        }
        PerfRecord::Fork(fork) if fork.pid != fork.ppid => {
            Some(TaskEvent::Fork { parent: Tgid(fork.ppid), child: Tgid(fork.pid), time_ns: fork.time })
        }
        PerfRecord::Exit(exit) if exit.pid == exit.tid => {
            Some(TaskEvent::Exit { pid: Tgid(exit.pid), time_ns: exit.time })
        }
        PerfRecord::Lost(lost) => Some(TaskEvent::Lost { time_ns, count: lost.lost }),
        _ => None,
    }
}

/// The backing of a mapping from its perf file name (`//anon` for anonymous memory, the rest as
/// in `/proc/PID/maps`).
fn backing(filename: &[u8], inode: u64) -> Backing {
    match filename {
        b"//anon" => Backing::Anonymous,
        name => backing_named(name, inode),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_file_names() {
        assert_eq!(backing(b"//anon", 0), Backing::Anonymous);
        assert_eq!(backing(b"[vdso]", 0), Backing::Pseudo("[vdso]".into()));
        assert_eq!(
            backing(b"/usr/lib/libc.so.6", 12),
            Backing::File { path: "/usr/lib/libc.so.6".into(), deleted: false }
        );
        assert_eq!(
            backing(b"/tmp/a b (deleted)", 12),
            Backing::File { path: "/tmp/a b".into(), deleted: true }
        );
    }
}
