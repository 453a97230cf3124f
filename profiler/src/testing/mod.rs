//! What tests, benchmarks and fuzz targets need beside the real inputs: records encoded as the
//! eBPF programs write them, and recorded unwinding fixtures. Compiled for the crate's own tests
//! and under the `testing` feature, never into the profiler.
mod fixture;

use std::mem::size_of;

use profiler_common::{AllocationHeader, SampleHeader};

pub use self::fixture::{FIXTURE_TGID, Fixture};

/// Serializes a header and stack copy the way the eBPF program lays them out.
pub fn encode_sample(header: &SampleHeader, stack_copy: &[u8]) -> Vec<u8> {
    // SAFETY: SampleHeader is repr(C) plain old data without padding.
    let bytes = unsafe {
        std::slice::from_raw_parts((header as *const SampleHeader).cast::<u8>(), size_of::<SampleHeader>())
    };
    let mut record = bytes.to_vec();
    record.extend_from_slice(stack_copy);
    record
}

/// Serializes an allocation record the way the eBPF program lays it out.
pub fn encode_allocation(allocation: AllocationHeader, header: &SampleHeader, stack_copy: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(size_of::<AllocationHeader>() + size_of::<SampleHeader>());
    record.extend_from_slice(&allocation.addr.to_ne_bytes());
    record.extend_from_slice(&allocation.size.to_ne_bytes());
    record.extend_from_slice(&encode_sample(header, stack_copy));
    record
}
