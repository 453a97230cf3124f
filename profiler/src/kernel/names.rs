//! Kernel frames named by the kernel: a small eBPF object of its own (`kernel_names.rs` of
//! `profiler-ebpf`), whose program, run on demand (`BPF_PROG_TEST_RUN`) with a few addresses,
//! has `%ps` look each one up in the kernel's own tables and writes the names to a map. A name
//! costs a lookup: reading `/proc/kallsyms` instead has the kernel format all 120,000 of its
//! functions (40-60 ms of CPU) and the profiler hold them (4-6 MiB), for the few hundred a
//! recording meets.
use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData},
    programs::{RawTracePoint, RawTracePointRunOptions, TestRun as _},
};
use profiler_common::{KERNEL_NAMES_PER_RUN, KernelNames, maps, programs};

use super::object::{missing, program, verifier_error};

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
        let mut ebpf =
            EbpfLoader::new().load(KERNEL_NAMES_OBJECT).context("cannot load the kernel's naming object")?;
        let loaded: &mut RawTracePoint = program(&mut ebpf, name)?.try_into()?;
        loaded.load().map_err(verifier_error).with_context(|| format!("cannot load `{name}`"))?;
        let map = ebpf.take_map(maps::KERNEL_NAMES).ok_or_else(|| missing(maps::KERNEL_NAMES))?;
        Ok(Self { ebpf, names: Array::try_from(map)? })
    }

    /// The function each of `addresses` is in (without its module), `None` where the kernel
    /// knows none.
    pub fn name(&mut self, addresses: &[u64]) -> Result<Vec<Option<String>>> {
        let program: &mut RawTracePoint =
            program(&mut self.ebpf, programs::NAME_KERNEL_ADDRESSES)?.try_into()?;
        let mut named = Vec::with_capacity(addresses.len());
        for run in addresses.chunks(KERNEL_NAMES_PER_RUN) {
            let mut options = RawTracePointRunOptions::new();
            options.args[..run.len()].copy_from_slice(run);
            let ran = program.test_run(options).context("cannot run the kernel's naming program")?;
            if ran.return_value != 0 {
                return Err(anyhow!("the kernel's naming program found no map entry"));
            }
            let names = self.names.get(&0, 0).context("cannot read the kernel's names")?;
            named.extend(names.names[..run.len()].iter().map(|name| function_name(name)));
        }
        Ok(named)
    }
}

/// The function in what `%ps` wrote: `name` or `name [module]`, up to its NUL; none when it is
/// an address (`0x...`, nothing known there).
fn function_name(written: &[u8]) -> Option<String> {
    let written = &written[..written.iter().position(|&byte| byte == 0).unwrap_or(written.len())];
    let written = String::from_utf8_lossy(written);
    let name = written.split_once(" [").map_or(&*written, |(name, _)| name);
    (!name.is_empty() && !name.starts_with("0x")).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{kernel::kallsyms, testing::e2e_enabled};

    /// Needs root, as the tests that record do.
    #[test]
    fn the_running_kernel_names_its_functions_in_runs_of_a_few() {
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
        let named = namer.name(&addresses).unwrap();
        let expected: Vec<Option<&str>> = [Some("schedule"), Some("schedule"), None]
            .into_iter()
            .chain([Some("vfs_read"); KERNEL_NAMES_PER_RUN])
            .collect();
        assert_eq!(named.iter().map(Option::as_deref).collect::<Vec<_>>(), expected);
        assert!(namer.name(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_name_is_what_precedes_its_module_and_nul() {
        assert_eq!(function_name(b"schedule\0garbage"), Some("schedule".into()));
        assert_eq!(function_name(b"nf_hook_slow [nf_tables]\0"), Some("nf_hook_slow".into()));
        assert_eq!(
            function_name(b"bpf_prog_6deef7357e7b4530_sample\0"),
            Some("bpf_prog_6deef7357e7b4530_sample".into())
        );
        assert_eq!(function_name(b"0xffffffffc0001234\0"), None, "no function there");
        assert_eq!(function_name(b"\0"), None);
        assert_eq!(function_name(b"truncated_without_nul"), Some("truncated_without_nul".into()));
    }
}
