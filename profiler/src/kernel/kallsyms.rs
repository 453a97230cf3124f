//! A kernel function's address, from `/proc/kallsyms` (the kernel's own text: trusted, but
//! megabytes, which the kernel formats anew at every read: read only where an address is
//! needed before sampling, off-CPU's `__schedule`). Kernel frames are named by the kernel
//! itself ([`super::names`]).
use std::{
    fs::File,
    io::{self, BufRead, BufReader},
};

use anyhow::{Context as _, Result};

const KALLSYMS: &str = "/proc/kallsyms";

/// The address of the kernel function `wanted`, as `/proc/kallsyms` lists it (0 when hidden);
/// none when not listed.
pub(crate) fn address_of(wanted: &str) -> Result<Option<u64>> {
    let file = File::open(KALLSYMS).with_context(|| format!("cannot open {KALLSYMS}"))?;
    find(BufReader::new(file), wanted).with_context(|| format!("cannot read {KALLSYMS}"))
}

/// The address of the first symbol named `wanted` in text in kallsyms' format (`ffffffff81000000
/// T _stext`, a module's symbols followed by `[module]`); lines of another shape are skipped.
fn find(mut reader: impl BufRead, wanted: &str) -> io::Result<Option<u64>> {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(address), Some(_kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if name == wanted
            && let Ok(address) = u64::from_str_radix(address, 16)
        {
            return Ok(Some(address));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTED: &str = "\
ffffffff81000000 T _stext
not a line
ffffffff81000100 t helper
ffffffff81000200 t helper
ffffffffc0000000 t module_fn\t[some_module]
";

    #[test]
    fn the_first_function_of_a_name_is_found() {
        assert_eq!(find(LISTED.as_bytes(), "helper").unwrap(), Some(0xffffffff81000100));
        assert_eq!(find(LISTED.as_bytes(), "module_fn").unwrap(), Some(0xffffffffc0000000));
        assert_eq!(find(LISTED.as_bytes(), "absent").unwrap(), None);
        assert_eq!(find(LISTED.as_bytes(), "line").unwrap(), None, "no address");
        assert_eq!(find("0000000000000000 T hidden\n".as_bytes(), "hidden").unwrap(), Some(0));
    }
}
