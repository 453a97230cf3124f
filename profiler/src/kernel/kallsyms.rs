//! The kernel's functions by address, from `/proc/kallsyms` (its own text: trusted, but
//! megabytes, which the kernel formats anew at every read). Read once, and held as one sorted
//! table: blazesym's kernel source keeps a record and an allocation per symbol, twice the memory
//! for the 120,000 functions of a distribution kernel.
use std::{
    fs::File,
    io::{self, BufRead, BufReader},
};

use anyhow::{Context as _, Result};

const KALLSYMS: &str = "/proc/kallsyms";

/// Every function of the kernel (its modules' and BPF programs' too) by start address.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Sorted, each once: of functions at the same address, the first listed stands for all.
    addresses: Box<[u64]>,
    /// Where each function's name starts in `names`, in the order of `addresses`.
    name_starts: Box<[u32]>,
    /// The names read, each ended by a line break (the other names at an address too).
    names: Box<str>,
}

impl KernelSymbols {
    /// The running kernel's, from `/proc/kallsyms`.
    pub fn read() -> Result<Self> {
        Self::parse(open()?).with_context(|| format!("cannot read {KALLSYMS}"))
    }

    /// Functions from text in kallsyms' format. Addresses hidden from the reader (listed as 0,
    /// `kernel.kptr_restrict`) are left out, and other symbols than functions.
    pub fn parse(reader: impl BufRead) -> io::Result<Self> {
        let mut listed = Vec::new();
        let mut names = String::new();
        for_each_symbol(reader, |address, kind, name| {
            if address != 0 && matches!(kind, 't' | 'T' | 'w' | 'W') {
                listed.push((address, names.len() as u32));
                names.push_str(name);
                names.push('\n');
            }
        })?;
        // Stable, so that the first listed at an address is the one kept.
        listed.sort_by_key(|&(address, _)| address);
        listed.dedup_by_key(|&mut (address, _)| address);
        let (addresses, name_starts): (Vec<u64>, Vec<u32>) = listed.into_iter().unzip();
        Ok(Self {
            addresses: addresses.into_boxed_slice(),
            name_starts: name_starts.into_boxed_slice(),
            names: names.into_boxed_str(),
        })
    }

    /// The function `address` is in: the last one that starts at or below it (kallsyms has no
    /// sizes), none below the first.
    pub fn name(&self, address: u64) -> Option<&str> {
        let after = self.addresses.partition_point(|&start| start <= address);
        let name = &self.names[self.name_starts[after.checked_sub(1)?] as usize..];
        Some(name.split_once('\n').map_or(name, |(name, _)| name))
    }

    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }
}

/// The address of the kernel function `wanted`, as `/proc/kallsyms` lists it (0 when hidden);
/// none when not listed.
pub fn address_of(wanted: &str) -> Result<Option<u64>> {
    let mut found = None;
    for_each_symbol(open()?, |address, _, name| {
        if found.is_none() && name == wanted {
            found = Some(address);
        }
    })
    .with_context(|| format!("cannot read {KALLSYMS}"))?;
    Ok(found)
}

fn open() -> Result<BufReader<File>> {
    Ok(BufReader::new(File::open(KALLSYMS).with_context(|| format!("cannot open {KALLSYMS}"))?))
}

/// Calls `each` with every line's address, type and name (`ffffffff81000000 T _stext`, a
/// module's symbols followed by `[module]`); lines of another shape are skipped.
fn for_each_symbol(mut reader: impl BufRead, mut each: impl FnMut(u64, char, &str)) -> io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(address), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (Ok(address), Some(kind)) = (u64::from_str_radix(address, 16), kind.chars().next()) else {
            continue;
        };
        each(address, kind, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTED: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t helper
ffffffff82000000 D some_data
ffffffff81000200 W weak_one
ffffffffc0000000 t module_fn\t[some_module]
ffffffff81000300 t bpf_prog_6deef7357e7b4530_sample\t[bpf]
not a line
";

    #[test]
    fn an_address_is_in_the_last_function_starting_at_or_below_it() {
        let symbols = KernelSymbols::parse(LISTED.as_bytes()).unwrap();
        assert_eq!(symbols.name(0xffffffff80ffffff), None, "below the first");
        assert_eq!(symbols.name(0xffffffff81000000), Some("_stext"), "the first listed of two");
        assert_eq!(symbols.name(0xffffffff810000ff), Some("_stext"));
        assert_eq!(symbols.name(0xffffffff81000150), Some("helper"));
        assert_eq!(symbols.name(0xffffffff81000250), Some("weak_one"), "listed out of order");
        assert_eq!(symbols.name(0xffffffff81000310), Some("bpf_prog_6deef7357e7b4530_sample"));
        assert_eq!(symbols.name(0xffffffff82000010), Some("bpf_prog_6deef7357e7b4530_sample"), "not data");
        assert_eq!(symbols.name(0xffffffffc0000004), Some("module_fn"), "a module's, without its module");
    }

    #[test]
    fn hidden_addresses_leave_nothing() {
        let hidden = "0000000000000000 T _stext\n0000000000000000 t helper\n";
        let symbols = KernelSymbols::parse(hidden.as_bytes()).unwrap();
        assert!(symbols.is_empty());
        assert_eq!(symbols.name(0x1000), None);
    }

    #[test]
    fn the_running_kernel_names_its_scheduler() {
        // Hidden from all but root: as anyone else this only checks the read succeeds.
        let symbols = KernelSymbols::read().unwrap();
        let Some(address) = address_of("schedule").unwrap().filter(|&address| address != 0) else {
            assert!(symbols.is_empty(), "kallsyms hides addresses");
            return;
        };
        assert_eq!(symbols.name(address), Some("schedule"));
        assert_eq!(symbols.name(address + 1), Some("schedule"));
    }
}
