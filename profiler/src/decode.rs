//! Decoding of ring-buffer records (layouts documented in `profiler_common`): CPU samples, and
//! allocations (a block, then the sample taken where it was allocated).
use std::{fmt, mem::size_of};

use bytemuck::pod_read_unaligned;
use profiler_common::{
    AllocationHeader, MAX_RUNTIME_FRAMES_BYTES, MAX_STACK_DEPTH, SAMPLE_HEADER_SIZE, SampleHeader,
    TASK_COMM_LEN, frames_offset, maps,
    runtimes::{RUNTIME_REGISTERS, RuntimeKind, RuntimeWalk, UserRegister, register_index},
    sample_flags,
};

use crate::model::{Tgid, ThreadState, Tid};

const ALLOCATION_HEADER_SIZE: usize = size_of::<AllocationHeader>();

/// The kind of ring-buffer record a mode's kernel side writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A CPU sample (`record`).
    Sample,
    /// An allocation (`leaks`).
    Allocation,
}

/// One decoded ring-buffer record (not a `.prof` recording, nor the `record` command): a
/// sample, and what the record adds to it.
#[derive(Debug)]
pub struct RingRecord<'a> {
    pub sample: SampleRecord<'a>,
    pub payload: Payload,
}

/// What a record carries besides its sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Nothing: a CPU sample.
    None,
    /// A span off the CPU, of this many nanoseconds from the sample's time; the sample is its
    /// stack.
    OffCpu { ns: u64 },
    /// The block an allocator returned, sampled where it returned.
    Allocation(AllocationHeader),
}

impl RecordKind {
    /// The ring buffer (its map in the eBPF object) records of this kind come through.
    pub fn ring(self) -> &'static str {
        match self {
            Self::Sample => maps::SAMPLES,
            Self::Allocation => maps::ALLOCATIONS,
        }
    }

    /// What records of this kind are, in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Sample => "samples",
            Self::Allocation => "allocation stacks",
        }
    }

    /// Decodes one record. Never panics, whatever the bytes.
    pub fn decode(self, record: &[u8]) -> Result<RingRecord<'_>, DecodeError> {
        match self {
            Self::Sample => {
                let sample = decode_sample(record)?;
                let payload = match sample.off_cpu() {
                    Some((ns, _)) => Payload::OffCpu { ns },
                    None => Payload::None,
                };
                Ok(RingRecord { sample, payload })
            }
            Self::Allocation => {
                let (block, sample) = decode_allocation(record)?;
                Ok(RingRecord { sample, payload: Payload::Allocation(block) })
            }
        }
    }

    /// When a record was taken, read alone (records are put in time order before they are
    /// decoded); `None` if the record is too short to say.
    pub fn time_ns(self, record: &[u8]) -> Option<u64> {
        let sample = match self {
            Self::Sample => record,
            Self::Allocation => record.get(ALLOCATION_HEADER_SIZE..)?,
        };
        let at = std::mem::offset_of!(SampleHeader, time_ns);
        Some(u64::from_ne_bytes(sample.get(at..at + size_of::<u64>())?.try_into().ok()?))
    }
}

/// One decoded sample, borrowing the stack copy and the frames from the record.
#[derive(Debug)]
pub struct SampleRecord<'a> {
    header: SampleHeader,
    stack_copy: &'a [u8],
    user_stack: Frames<'a>,
    kernel_stack: Frames<'a>,
    runtime_frames: RuntimeFrames<'a>,
}

/// The frames a runtime walked in the kernel added to a sample: whose they are, what the walk
/// found, and the runtime's own records, innermost first.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeFrames<'a> {
    pub kind: RuntimeKind,
    pub walk: RuntimeWalk,
    pub records: &'a [u8],
    /// The sample's user registers, when it has them.
    pub regs: Option<UserRegs>,
}

/// Addresses of a stack in a record, innermost first (8 little-endian bytes each).
#[derive(Clone, Copy, Debug)]
pub struct Frames<'a>(&'a [u8]);

impl<'a> Frames<'a> {
    pub fn len(&self) -> usize {
        self.0.len() / size_of::<u64>()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.0.as_chunks::<{ size_of::<u64>() }>().0.iter().map(|frame| u64::from_le_bytes(*frame))
    }
}

/// User-mode registers of the sampled thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Those runtimes need, as [`RUNTIME_REGISTERS`] declares them.
    pub registers: [u64; RUNTIME_REGISTERS.len()],
}

impl UserRegs {
    /// The value of a register a runtime declared it needs.
    pub fn register(&self, register: UserRegister) -> u64 {
        self.registers[register_index(register)]
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The record is shorter than its header.
    Short { len: usize },
    /// A length field points outside the record.
    BadLength { field: &'static str, value: u32 },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short { len } => write!(f, "record of {len} bytes is shorter than its header"),
            Self::BadLength { field, value } => {
                write!(f, "record field {field} = {value} is out of range")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

fn decode_sample(record: &[u8]) -> Result<SampleRecord<'_>, DecodeError> {
    let (header, after_header) =
        record.split_at_checked(SAMPLE_HEADER_SIZE).ok_or(DecodeError::Short { len: record.len() })?;
    let header: SampleHeader = pod_read_unaligned(header);
    let copy_len = header.stack_copy_len as usize;
    let bad_copy_len = DecodeError::BadLength { field: "stack_copy_len", value: header.stack_copy_len };
    let stack_copy = after_header.get(..copy_len).ok_or(bad_copy_len)?;
    let mut frames = record.get(frames_offset(copy_len)..).unwrap_or_default();
    let mut take = |field, len: u32| {
        let bad = DecodeError::BadLength { field, value: len };
        if len as usize > MAX_STACK_DEPTH {
            return Err(bad);
        }
        let (taken, rest) = frames.split_at_checked(len as usize * size_of::<u64>()).ok_or(bad)?;
        frames = rest;
        Ok(Frames(taken))
    };
    let user_stack = take("user_stack_len", header.user_stack_len)?;
    let kernel_stack = take("kernel_stack_len", header.kernel_stack_len)?;
    let trailer = header.runtime;
    let bad = |field, value| DecodeError::BadLength { field, value };
    let bad_frames = bad("runtime.frames_bytes", trailer.frames_bytes);
    if trailer.frames_bytes as usize > MAX_RUNTIME_FRAMES_BYTES {
        return Err(bad_frames);
    }
    let runtime_frames = RuntimeFrames {
        kind: RuntimeKind::from_u16(trailer.kind).ok_or(bad("runtime.kind", trailer.kind.into()))?,
        walk: RuntimeWalk::from_u16(trailer.walk).ok_or(bad("runtime.walk", trailer.walk.into()))?,
        records: frames.get(..trailer.frames_bytes as usize).ok_or(bad_frames)?,
        regs: user_regs(&header),
    };
    Ok(SampleRecord { header, stack_copy, user_stack, kernel_stack, runtime_frames })
}

/// The user registers a header holds, when it has them.
fn user_regs(h: &SampleHeader) -> Option<UserRegs> {
    (h.flags & sample_flags::USER_REGS != 0).then_some(UserRegs {
        ip: h.user_ip,
        sp: h.user_sp,
        bp: h.user_bp,
        registers: h.runtime.registers,
    })
}

fn decode_allocation(record: &[u8]) -> Result<(AllocationHeader, SampleRecord<'_>), DecodeError> {
    let (allocation, sample) =
        record.split_at_checked(ALLOCATION_HEADER_SIZE).ok_or(DecodeError::Short { len: record.len() })?;
    Ok((pod_read_unaligned(allocation), decode_sample(sample)?))
}

impl<'a> SampleRecord<'a> {
    pub fn tgid(&self) -> Tgid {
        Tgid(self.header.tgid)
    }

    pub fn tid(&self) -> Tid {
        Tid(self.header.tid)
    }

    pub fn time_ns(&self) -> u64 {
        self.header.time_ns
    }

    /// The thread's command name (lossy UTF-8, without the NUL padding).
    pub fn comm(&self) -> String {
        let comm = &self.header.comm[..];
        let len = comm.iter().position(|&b| b == 0).unwrap_or(TASK_COMM_LEN);
        String::from_utf8_lossy(&comm[..len]).into_owned()
    }

    /// Kernel addresses, innermost first: the interrupted instruction, then return addresses.
    pub fn kernel_stack(&self) -> Frames<'a> {
        self.kernel_stack
    }

    /// User addresses from the frame-pointer chain, innermost first: the user ip, then return
    /// addresses. Empty when the kernel did not walk it (the copy held the whole stack).
    pub fn user_stack(&self) -> Frames<'a> {
        self.user_stack
    }

    pub fn user_regs(&self) -> Option<UserRegs> {
        user_regs(&self.header)
    }

    /// Copy of user memory starting at the user stack pointer.
    pub fn stack_copy(&self) -> &'a [u8] {
        self.stack_copy
    }

    /// The frames a runtime's walk in the kernel read.
    pub fn runtime_frames(&self) -> RuntimeFrames<'a> {
        self.runtime_frames
    }

    /// Whether the stack went on past the copied bytes.
    pub fn stack_truncated(&self) -> bool {
        self.header.flags & sample_flags::STACK_COPY_TRUNCATED != 0
    }

    /// For a span off the CPU: its length in nanoseconds, and why.
    fn off_cpu(&self) -> Option<(u64, ThreadState)> {
        (self.header.flags & sample_flags::OFF_CPU != 0)
            .then(|| (self.header.off_cpu_ns, ThreadState::off_cpu(self.header.off_cpu_state)))
    }

    /// On the CPU (a cpu-clock sample), or off it and why.
    pub fn state(&self) -> ThreadState {
        self.off_cpu().map_or(ThreadState::OnCpu, |(_, state)| state)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use profiler_common::OffCpuState;

    use super::*;
    use crate::testing::{encode_allocation, encode_sample};

    const KERNEL: [u64; 2] = [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0200];
    const USER: [u64; 3] = [0x5555_0000_1234, 0x5555_0000_2000, 0x7f00_0000_3000];

    fn decode(record: &[u8]) -> Result<SampleRecord<'_>, DecodeError> {
        RecordKind::Sample.decode(record).map(|record| record.sample)
    }

    fn sample_header() -> SampleHeader {
        let mut h = SampleHeader { tgid: 42, tid: 43, cpu: 1, time_ns: 123_456_789, ..Default::default() };
        h.comm[..6].copy_from_slice(b"worker");
        h.flags = sample_flags::USER_REGS | sample_flags::IN_KERNEL;
        (h.user_ip, h.user_sp, h.user_bp) = (0x5555_0000_1234, 0x7ffc_0000_1000, 0x7ffc_0000_1040);
        h
    }

    /// A record with a stack copy of `copy` and both stacks.
    fn record(copy: &[u8]) -> Vec<u8> {
        encode_sample(&sample_header(), copy, &USER, &KERNEL)
    }

    /// `record` with the header's u32 field at `offset` set to `value`.
    fn with_field(mut record: Vec<u8>, offset: usize, value: u32) -> Vec<u8> {
        record[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
        record
    }

    #[test]
    fn header_has_no_padding() {
        // encode_sample() and the eBPF program rely on it.
        assert_eq!(SAMPLE_HEADER_SIZE, 4 * 4 + 8 + 16 + 4 * 8 + 4 * 4 + 8 * RUNTIME_REGISTERS.len() + 2 * 4);
    }

    #[test]
    fn decodes_all_fields() {
        let record = record(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(record.len(), SAMPLE_HEADER_SIZE + 8 + 8 * (USER.len() + KERNEL.len()), "no byte wasted");
        let sample = decode(&record).unwrap();
        assert_eq!((sample.tgid(), sample.tid()), (Tgid(42), Tid(43)));
        assert_eq!(sample.time_ns(), 123_456_789);
        assert_eq!(sample.comm(), "worker");
        assert_eq!(sample.kernel_stack().iter().collect::<Vec<_>>(), KERNEL);
        assert_eq!(sample.user_stack().iter().collect::<Vec<_>>(), USER);
        assert_eq!(
            sample.user_regs(),
            Some(UserRegs {
                ip: 0x5555_0000_1234,
                sp: 0x7ffc_0000_1000,
                bp: 0x7ffc_0000_1040,
                registers: [0; RUNTIME_REGISTERS.len()]
            })
        );
        assert!(!sample.stack_truncated());
        assert_eq!(sample.stack_copy(), [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn frames_follow_a_copy_that_ends_mid_word() {
        // A copy that ended early, at an odd length: the frames start at the next multiple of 8.
        let record = record(&[9; 13]);
        assert_eq!(record.len(), SAMPLE_HEADER_SIZE + 16 + 8 * (USER.len() + KERNEL.len()));
        let sample = decode(&record).unwrap();
        assert_eq!(sample.stack_copy(), [9; 13]);
        assert_eq!(sample.user_stack().iter().collect::<Vec<_>>(), USER);
        assert_eq!(sample.kernel_stack().iter().collect::<Vec<_>>(), KERNEL);
    }

    #[test]
    fn records_without_frames_or_copy() {
        // The copy held the whole stack, so the kernel skipped the frame-pointer walk; no kernel
        // stack in user mode.
        let sample_bytes = encode_sample(&sample_header(), &[7; 4096], &[], &[]);
        assert_eq!(sample_bytes.len(), SAMPLE_HEADER_SIZE + 4096);
        let sample = decode(&sample_bytes).unwrap();
        assert!(sample.user_stack().is_empty() && sample.kernel_stack().is_empty());
        assert_eq!(sample.stack_copy().len(), 4096);
        // Frame pointers only (no copy).
        let sample_bytes = encode_sample(&sample_header(), &[], &USER, &[]);
        let sample = decode(&sample_bytes).unwrap();
        assert_eq!((sample.stack_copy().len(), sample.user_stack().len()), (0, 3));
    }

    #[test]
    fn spans_off_the_cpu() {
        let header = SampleHeader {
            flags: sample_flags::OFF_CPU | sample_flags::IN_KERNEL,
            off_cpu_state: OffCpuState::Uninterruptible as u32,
            off_cpu_ns: 2_500_000,
            ..sample_header()
        };
        let record = encode_sample(&header, &[], &[], &KERNEL);
        let RingRecord { sample, payload } = RecordKind::Sample.decode(&record).unwrap();
        assert_eq!(
            (payload, sample.state()),
            (Payload::OffCpu { ns: 2_500_000 }, ThreadState::Uninterruptible)
        );
        let on_cpu = record_of(&sample_header());
        let RingRecord { sample, payload } = RecordKind::Sample.decode(&on_cpu).unwrap();
        assert_eq!((payload, sample.state()), (Payload::None, ThreadState::OnCpu));
    }

    fn record_of(header: &SampleHeader) -> Vec<u8> {
        encode_sample(header, &[], &[], &[])
    }

    #[test]
    fn no_user_regs_without_flag() {
        let header = SampleHeader { flags: 0, ..sample_header() };
        let record = encode_sample(&header, &[], &[], &[]);
        assert_eq!(decode(&record).unwrap().user_regs(), None);
    }

    #[test]
    fn full_comm_without_nul() {
        let header = SampleHeader { comm: *b"abcdefghijklmnop", ..sample_header() };
        assert_eq!(decode(&encode_sample(&header, &[], &[], &[])).unwrap().comm(), "abcdefghijklmnop");
    }

    #[test]
    fn rejects_short_record() {
        let record = record(&[]);
        assert_eq!(decode(&record[..50]).unwrap_err(), DecodeError::Short { len: 50 });
        assert_eq!(RecordKind::Sample.time_ns(&record), Some(decode(&record).unwrap().time_ns()));
        assert_eq!(RecordKind::Sample.time_ns(&record[..10]), None);
        assert_eq!(decode(&[]).unwrap_err(), DecodeError::Short { len: 0 });
    }

    #[test]
    fn rejects_lengths_past_the_record() {
        let field = |record: &[u8]| match decode(record) {
            Err(DecodeError::BadLength { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let copy_len = offset_of!(SampleHeader, stack_copy_len);
        let user_len = offset_of!(SampleHeader, user_stack_len);
        let kernel_len = offset_of!(SampleHeader, kernel_stack_len);
        assert_eq!(field(&with_field(record(&[0; 8]), copy_len, 9000)), "stack_copy_len");
        assert_eq!(field(&with_field(record(&[]), user_len, MAX_STACK_DEPTH as u32 + 1)), "user_stack_len");
        assert_eq!(field(&with_field(record(&[]), user_len, 6)), "user_stack_len", "past the end");
        assert_eq!(field(&with_field(record(&[]), kernel_len, u32::MAX)), "kernel_stack_len");
        let full = record(&[]);
        assert_eq!(field(&full[..full.len() - 1]), "kernel_stack_len", "a frame cut short");
    }

    #[test]
    fn decodes_allocation_records() {
        let block = AllocationHeader { addr: 0x5555_0000_8000, size: 4096 };
        let record = encode_allocation(block, &record(&[1; 24]));
        let kind = RecordKind::Allocation;
        let RingRecord { sample, payload } = kind.decode(&record).unwrap();
        assert_eq!(payload, Payload::Allocation(block));
        assert_eq!((sample.tgid(), sample.comm().as_str()), (Tgid(42), "worker"));
        assert_eq!(sample.user_stack().iter().collect::<Vec<_>>(), USER);
        assert_eq!(kind.time_ns(&record), Some(sample.time_ns()));
        assert_eq!(kind.decode(&record[..10]).unwrap_err(), DecodeError::Short { len: 10 });
        assert_eq!(kind.time_ns(&record[..10]), None);
        assert_eq!(
            kind.decode(&record[..70]).unwrap_err(),
            DecodeError::Short { len: 70 - ALLOCATION_HEADER_SIZE }
        );
    }
}
