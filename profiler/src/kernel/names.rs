//! Kernel frames named by the kernel: a small eBPF object of its own (`kernel_names.rs` of
//! `profiler-ebpf`), whose program, run on demand (`BPF_PROG_TEST_RUN`) with a few addresses,
//! has `%pS` look each one up in the kernel's own tables and writes each one's function and
//! place in it to a map. A name costs a lookup: reading `/proc/kallsyms` instead has the kernel
//! format all 120,000 of its functions (40-60 ms of CPU) and the profiler hold them (4-6 MiB),
//! for the few hundred a recording meets.
use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData},
    programs::{RawTracePoint, RawTracePointRunOptions, TestRun as _},
};
use profiler_common::{KERNEL_NAMES_PER_RUN, KernelNames, maps, programs};

use super::object::{embedded, missing, program, verifier_error};

static KERNEL_NAMES_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/kernel-names"));

/// Names kernel addresses, on the thread that owns it (naming's).
pub struct KernelNamer {
    /// Its own object: the program, loaded.
    ebpf: Ebpf,
    names: Array<MapData, KernelNames>,
}

impl KernelNamer {
    /// Loads the naming object and its program.
    pub fn load() -> Result<Self> {
        let name = programs::NAME_KERNEL_ADDRESSES;
        let mut ebpf = EbpfLoader::new()
            .load(embedded(KERNEL_NAMES_OBJECT)?)
            .context("cannot load the kernel's naming object")?;
        let loaded: &mut RawTracePoint = program(&mut ebpf, name)?.try_into()?;
        loaded.load().map_err(verifier_error).with_context(|| format!("cannot load `{name}`"))?;
        let map = ebpf.take_map(maps::KERNEL_NAMES).ok_or_else(|| missing(maps::KERNEL_NAMES))?;
        Ok(Self { ebpf, names: Array::try_from(map)? })
    }

    /// The function each of `addresses` is in (its name without its module, and where it
    /// starts), `None` where the kernel knows none.
    pub fn functions(&mut self, addresses: &[u64]) -> Result<Vec<Option<KernelFunction>>> {
        let program: &mut RawTracePoint =
            program(&mut self.ebpf, programs::NAME_KERNEL_ADDRESSES)?.try_into()?;
        let mut found = Vec::with_capacity(addresses.len());
        for run in addresses.chunks(KERNEL_NAMES_PER_RUN) {
            let mut options = RawTracePointRunOptions::new();
            options.args[..run.len()].copy_from_slice(run);
            let ran = program.test_run(options).context("cannot run the kernel's naming program")?;
            if ran.return_value != 0 {
                return Err(anyhow!("the kernel's naming program found no map entry"));
            }
            let names = self.names.get(&0, 0).context("cannot read the kernel's names")?;
            let written = names.names[..run.len()].iter();
            found.extend(
                run.iter().zip(written).map(|(&address, written)| KernelFunction::read(address, written)),
            );
        }
        Ok(found)
    }

    /// The name of the function each of `addresses` is in (see [`Self::functions`]).
    pub fn name(&mut self, addresses: &[u64]) -> Result<Vec<Option<String>>> {
        let functions = self.functions(addresses)?;
        Ok(functions.into_iter().map(|function| function.map(|function| function.name)).collect())
    }
}

/// A kernel function, as the kernel names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFunction {
    pub name: String,
    /// Where it starts, unless the name was too long for the place in it to fit.
    pub start: Option<u64>,
}

impl KernelFunction {
    /// The function `address` is in, from what `%pS` wrote of it: `name+0xOFFSET/0xSIZE`, then
    /// ` [module]` for a module's, up to its NUL (cut at
    /// [`profiler_common::KERNEL_NAME_LEN`]); none when it is an address (`0x...`, nothing known
    /// there). The place is trusted only whole.
    fn read(address: u64, written: &[u8]) -> Option<Self> {
        let written = &written[..written.iter().position(|&byte| byte == 0).unwrap_or(written.len())];
        let written = String::from_utf8_lossy(written);
        let symbol = written.split_once(" [").map_or(&*written, |(symbol, _)| symbol);
        let (name, start) = match symbol.rsplit_once('+') {
            Some((name, place)) => (name, start_of(address, place)),
            None => (symbol, None),
        };
        (!name.is_empty() && !name.starts_with("0x")).then(|| Self { name: name.to_owned(), start })
    }
}

/// The start of the function `address` is `place` (`0xOFFSET/0xSIZE`) into.
fn start_of(address: u64, place: &str) -> Option<u64> {
    let (offset, _size) = place.split_once('/')?;
    address.checked_sub(u64::from_str_radix(offset.strip_prefix("0x")?, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{kernel::kallsyms, testing::e2e_enabled};

    /// Needs root, as the tests that record do.
    #[test]
    fn the_running_kernel_names_its_functions_and_their_starts_in_runs_of_a_few() {
        if !e2e_enabled() {
            return;
        }
        let mut namer = KernelNamer::load().unwrap();
        let address = |name| {
            let address = kallsyms::address_of(name).unwrap().expect("listed");
            assert_ne!(address, 0, "kallsyms hides addresses (kptr_restrict)");
            address
        };
        let (schedule, vfs_read) = (address("schedule"), address("vfs_read"));
        let mut addresses = vec![schedule, schedule + 1, 0x1000];
        addresses.extend((0..KERNEL_NAMES_PER_RUN as u64).map(|offset| vfs_read + offset));
        let found = namer.functions(&addresses).unwrap();
        let function = |name: &str, start| Some(KernelFunction { name: name.into(), start: Some(start) });
        let expected: Vec<Option<KernelFunction>> =
            [function("schedule", schedule), function("schedule", schedule), None]
                .into_iter()
                .chain(vec![function("vfs_read", vfs_read); KERNEL_NAMES_PER_RUN])
                .collect();
        assert_eq!(found, expected);
        let named = namer.name(&addresses[..3]).unwrap();
        assert_eq!(named, [Some("schedule".to_owned()), Some("schedule".to_owned()), None]);
        assert!(namer.name(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_function_is_what_precedes_its_offset_module_and_nul() {
        let read = |written: &[u8]| KernelFunction::read(0xffff_ffff_8100_0120, written);
        let function = |name: &str, start| Some(KernelFunction { name: name.into(), start });
        assert_eq!(read(b"schedule+0x20/0x90\0garbage"), function("schedule", Some(0xffff_ffff_8100_0100)));
        assert_eq!(
            read(b"nf_hook_slow+0x0/0x40 [nf_tables]\0"),
            function("nf_hook_slow", Some(0xffff_ffff_8100_0120))
        );
        assert_eq!(
            read(b"bpf_prog_6deef7357e7b4530_sample+0x120/0x200\0"),
            function("bpf_prog_6deef7357e7b4530_sample", Some(0xffff_ffff_8100_0000))
        );
        assert_eq!(read(b"0xffffffffc0001234\0"), None, "no function there");
        assert_eq!(read(b"\0"), None);
        assert_eq!(read(b"schedule+0xzz/0x90\0"), function("schedule", None));
        assert_eq!(read(b"far+0xffffffffffffffff/0x90\0"), function("far", None), "beyond the address");
        // Cut at the map's size: the name is kept, the place only when whole.
        assert_eq!(read(b"a_very_long_name+0x2"), function("a_very_long_name", None));
        assert_eq!(read(b"a_very_long_na"), function("a_very_long_na", None));
    }
}
