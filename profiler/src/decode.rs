//! Decoding of ring-buffer records (layouts documented in `profiler_common`): CPU samples, and
//! allocations (a block, then the sample taken where it was allocated).
use std::{fmt, mem::size_of};

use profiler_common::{AllocationHeader, MAX_STACK_DEPTH, SampleHeader, TASK_COMM_LEN, maps, sample_flags};

const HEADER_SIZE: usize = size_of::<SampleHeader>();
const ALLOCATION_HEADER_SIZE: usize = size_of::<AllocationHeader>();

/// The kind of ring-buffer record a mode's kernel side writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A CPU sample (`record`).
    Sample,
    /// An allocation (`leaks`).
    Allocation,
}

/// One decoded record: a sample, and what the record adds to it.
#[derive(Debug)]
pub struct Record<'a> {
    pub sample: SampleRecord<'a>,
    pub payload: Payload,
}

/// What a record carries besides its sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Nothing: a CPU sample.
    None,
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
    pub fn decode(self, record: &[u8]) -> Result<Record<'_>, DecodeError> {
        match self {
            Self::Sample => Ok(Record { sample: decode_sample(record)?, payload: Payload::None }),
            Self::Allocation => {
                let (block, sample) = decode_allocation(record)?;
                Ok(Record { sample, payload: Payload::Allocation(block) })
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

/// One decoded sample, borrowing the stack copy from the record.
#[derive(Debug)]
pub struct SampleRecord<'a> {
    header: SampleHeader,
    stack_copy: &'a [u8],
}

/// User-mode registers of the sampled thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
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
    if record.len() < HEADER_SIZE {
        return Err(DecodeError::Short { len: record.len() });
    }
    // SAFETY: the length was checked; SampleHeader is plain old data (integers and arrays of
    // integers) for which every bit pattern is valid; read_unaligned makes no alignment claim.
    let header = unsafe { record.as_ptr().cast::<SampleHeader>().read_unaligned() };
    check_depth("kernel_stack_len", header.kernel_stack_len)?;
    check_depth("user_stack_len", header.user_stack_len)?;
    let copy_len = header.stack_copy_len as usize;
    let stack_copy = record[HEADER_SIZE..]
        .get(..copy_len)
        .ok_or(DecodeError::BadLength { field: "stack_copy_len", value: header.stack_copy_len })?;
    Ok(SampleRecord { header, stack_copy })
}

fn decode_allocation(record: &[u8]) -> Result<(AllocationHeader, SampleRecord<'_>), DecodeError> {
    let (allocation, sample) =
        record.split_at_checked(ALLOCATION_HEADER_SIZE).ok_or(DecodeError::Short { len: record.len() })?;
    // SAFETY: the length was checked; AllocationHeader is two integers, any bits are valid.
    let allocation = unsafe { allocation.as_ptr().cast::<AllocationHeader>().read_unaligned() };
    Ok((allocation, decode_sample(sample)?))
}

fn check_depth(field: &'static str, value: u32) -> Result<(), DecodeError> {
    if value as usize <= MAX_STACK_DEPTH { Ok(()) } else { Err(DecodeError::BadLength { field, value }) }
}

impl<'a> SampleRecord<'a> {
    pub fn tgid(&self) -> u32 {
        self.header.tgid
    }

    pub fn tid(&self) -> u32 {
        self.header.tid
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
    pub fn kernel_stack(&self) -> &[u64] {
        &self.header.kernel_stack[..self.header.kernel_stack_len as usize]
    }

    /// User addresses from the frame-pointer chain, innermost first: the user ip, then return
    /// addresses.
    pub fn user_stack(&self) -> &[u64] {
        &self.header.user_stack[..self.header.user_stack_len as usize]
    }

    pub fn user_regs(&self) -> Option<UserRegs> {
        let h = &self.header;
        (h.flags & sample_flags::USER_REGS != 0).then_some(UserRegs {
            ip: h.user_ip,
            sp: h.user_sp,
            bp: h.user_bp,
        })
    }

    /// Copy of user memory starting at the user stack pointer.
    pub fn stack_copy(&self) -> &'a [u8] {
        self.stack_copy
    }

    /// Whether the stack went on past the copied bytes.
    pub fn stack_truncated(&self) -> bool {
        self.header.flags & sample_flags::STACK_COPY_TRUNCATED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{encode_allocation, encode_sample as encode};

    fn decode(record: &[u8]) -> Result<SampleRecord<'_>, DecodeError> {
        RecordKind::Sample.decode(record).map(|record| record.sample)
    }

    fn sample_header() -> SampleHeader {
        let mut h = SampleHeader::zeroed();
        h.tgid = 42;
        h.tid = 43;
        h.cpu = 1;
        h.time_ns = 123_456_789;
        h.comm[..6].copy_from_slice(b"worker");
        h.flags = sample_flags::USER_REGS | sample_flags::IN_KERNEL;
        (h.user_ip, h.user_sp, h.user_bp) = (0x5555_0000_1234, 0x7ffc_0000_1000, 0x7ffc_0000_1040);
        h.kernel_stack[..2].copy_from_slice(&[0xffff_ffff_8100_0010, 0xffff_ffff_8100_0200]);
        h.kernel_stack_len = 2;
        h.user_stack[..3].copy_from_slice(&[0x5555_0000_1234, 0x5555_0000_2000, 0x7f00_0000_3000]);
        h.user_stack_len = 3;
        h
    }

    #[test]
    fn header_has_no_padding() {
        // encode() and the eBPF program rely on it.
        assert_eq!(HEADER_SIZE, 4 * 4 + 8 + 16 + 3 * 8 + 4 * 4 + 2 * 8 * MAX_STACK_DEPTH);
    }

    #[test]
    fn decodes_all_fields() {
        let mut header = sample_header();
        header.stack_copy_len = 5;
        // The record is as large as the reservation; only stack_copy_len bytes count.
        let record = encode(&header, &[1, 2, 3, 4, 5, 0, 0, 0]);
        let sample = decode(&record).unwrap();
        assert_eq!((sample.tgid(), sample.tid()), (42, 43));
        assert_eq!(sample.time_ns(), 123_456_789);
        assert_eq!(sample.comm(), "worker");
        assert_eq!(sample.kernel_stack(), [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0200]);
        assert_eq!(sample.user_stack(), [0x5555_0000_1234, 0x5555_0000_2000, 0x7f00_0000_3000]);
        assert_eq!(
            sample.user_regs(),
            Some(UserRegs { ip: 0x5555_0000_1234, sp: 0x7ffc_0000_1000, bp: 0x7ffc_0000_1040 })
        );
        assert!(!sample.stack_truncated());
        assert_eq!(sample.stack_copy(), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn no_user_regs_without_flag() {
        let mut header = sample_header();
        header.flags = 0;
        let record = encode(&header, &[]);
        assert_eq!(decode(&record).unwrap().user_regs(), None);
    }

    #[test]
    fn full_comm_without_nul() {
        let mut header = sample_header();
        header.comm = *b"abcdefghijklmnop";
        assert_eq!(decode(&encode(&header, &[])).unwrap().comm(), "abcdefghijklmnop");
    }

    #[test]
    fn rejects_short_record() {
        let record = encode(&sample_header(), &[]);
        assert_eq!(decode(&record[..100]).unwrap_err(), DecodeError::Short { len: 100 });
        assert_eq!(RecordKind::Sample.time_ns(&record), Some(decode(&record).unwrap().time_ns()));
        assert_eq!(RecordKind::Sample.time_ns(&record[..10]), None);
        assert_eq!(decode(&[]).unwrap_err(), DecodeError::Short { len: 0 });
    }

    #[test]
    fn rejects_lengths_past_the_record() {
        let mut header = sample_header();
        header.stack_copy_len = 9;
        assert!(matches!(
            decode(&encode(&header, &[0; 8])),
            Err(DecodeError::BadLength { field: "stack_copy_len", .. })
        ));
        let mut header = sample_header();
        header.user_stack_len = MAX_STACK_DEPTH as u32 + 1;
        assert!(matches!(
            decode(&encode(&header, &[])),
            Err(DecodeError::BadLength { field: "user_stack_len", .. })
        ));
        let mut header = sample_header();
        header.kernel_stack_len = u32::MAX;
        assert!(matches!(
            decode(&encode(&header, &[])),
            Err(DecodeError::BadLength { field: "kernel_stack_len", .. })
        ));
    }

    #[test]
    fn decodes_allocation_records() {
        let block = AllocationHeader { addr: 0x5555_0000_8000, size: 4096 };
        let record = encode_allocation(block, &sample_header(), &[]);
        let kind = RecordKind::Allocation;
        let Record { sample, payload } = kind.decode(&record).unwrap();
        assert_eq!(payload, Payload::Allocation(block));
        assert_eq!((sample.tgid(), sample.comm().as_str()), (42, "worker"));
        assert_eq!(kind.time_ns(&record), Some(sample.time_ns()));
        assert_eq!(kind.decode(&record[..10]).unwrap_err(), DecodeError::Short { len: 10 });
        assert_eq!(kind.time_ns(&record[..10]), None);
        assert_eq!(
            kind.decode(&record[..100]).unwrap_err(),
            DecodeError::Short { len: 100 - ALLOCATION_HEADER_SIZE }
        );
    }
}
