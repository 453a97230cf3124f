//! HotSpot, the JVM, from outside the process: the tables its `libjvm.so` exports for external
//! tools (the Serviceability Agent's `gHotSpotVMStructs` and the others: every field offset,
//! type size and constant a walker of Java frames needs), read from a live process
//! ([`vm_structs`]). `profiler check -p PID` reads them and says where the code cache is; the
//! Java frames walked with them come next (see docs/hotspot-layouts.md for the layouts).
pub mod vm_structs;

use anyhow::{Context as _, Result, bail};

use self::vm_structs::{Image, VmStructs};
use crate::{
    address_space::{Backing, Mapping, Mappings, Parts, open},
    model::Tgid,
    runtimes::memory::ProcessMemory,
};

/// A JVM found in a process: its tables, and its code cache's bounds.
pub struct Jvm {
    pub tables: VmStructs,
    /// `CodeCache::_low_bound .. _high_bound`: where compiled Java code and stubs are.
    pub code_cache: std::ops::Range<u64>,
}

/// The JVM of process `pid`, if it maps a `libjvm.so`: `None` when it maps none, an error when
/// its tables cannot be read (not HotSpot after all, not started yet, or garbage).
pub fn find(pid: Tgid, space: &Mappings) -> Option<Result<Jvm>> {
    let mapping = space.mappings().find(|m| {
        m.offset == 0
            && matches!(&m.backing, Backing::File { path, .. } if path.file_name().is_some_and(|name| name == "libjvm.so"))
    })?;
    Some(read(pid, mapping))
}

/// Reads the JVM of `pid` whose `libjvm.so` starts with `mapping` (its load bias is the
/// mapping's start: HotSpot's segments have file offsets equal to their addresses).
fn read(pid: Tgid, mapping: &Mapping) -> Result<Jvm> {
    let bias = mapping.start;
    let bytes = open::mapped_file(pid, mapping)
        .and_then(|file| open::stable(file, Parts::Whole))
        .and_then(|file| open::map(&file))
        .context("cannot read its libjvm.so")?;
    let Some(image) = Image::read(&bytes) else { bail!("libjvm.so exports none of HotSpot's tables") };
    let mut memory = ProcessMemory::new(pid);
    let mut read = |addr: u64, buf: &mut [u8]| memory.read(addr, buf);
    let tables = VmStructs::read(&image, &bytes, bias, &mut read)?;
    let mut bound = |field: &str| -> Result<u64> {
        let address = tables
            .static_address("CodeCache", field)
            .with_context(|| format!("the tables have no CodeCache::{field}"))?;
        let mut value = [0; 8];
        if !read(address, &mut value) {
            bail!("cannot read CodeCache::{field} at {address:#x}");
        }
        Ok(u64::from_ne_bytes(value))
    };
    let code_cache = bound("_low_bound")?..bound("_high_bound")?;
    if code_cache.is_empty() {
        bail!("no code cache yet (the JVM is starting)");
    }
    Ok(Jvm { tables, code_cache })
}
