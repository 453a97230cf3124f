//! What a PHP executable (the CLI, PHP-FPM) or `libphp` says of itself, read once per file: its
//! release, where `executor_globals` is, and which of its code is the VM (`execute_ex`). Every
//! Debian build exports both symbols (docs/php-layouts.md §1).
use std::ops::Range;

use object::{ObjectSymbol as _, read::elf::ElfFile64};

use super::layout::{self, Layout};
use crate::{
    runtimes::elf_code::{exported, file_offset},
    untrusted::ElfFacts,
};

/// A Zend Engine this profiler reads. Addresses are as the file states them (add the load bias).
#[derive(Debug)]
pub(crate) struct Engine {
    /// "8.4.27".
    pub(super) release: String,
    pub(super) layout: &'static Layout,
    pub(super) executor_globals: u64,
    /// `execute_ex`, as file offsets: each native call of it runs a run of PHP frames.
    pub(super) execute_ex: Range<u64>,
}

/// What a file is, as far as PHP goes.
pub(crate) enum Image {
    NotPhp,
    /// A PHP this profiler does not read: what it is, for the summary.
    Unsupported(String),
    Supported(Engine),
}

/// What precedes the release in every build's read-only data (the header PHP sends).
const RELEASE_NEEDLE: &[u8] = b"X-Powered-By: PHP/";
/// A thread-safe build (TSRM) says so in its module build id; its globals are per thread.
const THREAD_SAFE_NEEDLE: &[u8] = b",TS\0";

impl Image {
    pub(crate) fn read(bytes: &[u8], facts: &ElfFacts) -> Self {
        let Ok(elf) = ElfFile64::<object::Endianness>::parse(bytes) else { return Self::NotPhp };
        let exported = |name: &str| exported(&elf, name);
        let (Some(globals), Some(execute_ex)) = (exported("executor_globals"), exported("execute_ex")) else {
            return Self::NotPhp;
        };
        let Some(release) = release(bytes) else {
            return Self::Unsupported("PHP of an unknown release".into());
        };
        if find(bytes, THREAD_SAFE_NEEDLE).is_some() {
            return Self::Unsupported(format!("PHP {release}, a thread-safe build"));
        }
        let Some(layout) = release_minor(&release).and_then(|(major, minor)| layout::layout(major, minor))
        else {
            return Self::Unsupported(format!("PHP {release}"));
        };
        let Some(start) = file_offset(facts, execute_ex.address()) else {
            return Self::Unsupported(format!("PHP {release}: execute_ex is in no load segment"));
        };
        Self::Supported(Engine {
            release,
            layout,
            executor_globals: globals.address(),
            execute_ex: start..start + execute_ex.size(),
        })
    }
}

/// The release after [`RELEASE_NEEDLE`]: digits and dots.
fn release(bytes: &[u8]) -> Option<String> {
    let at = find(bytes, RELEASE_NEEDLE)? + RELEASE_NEEDLE.len();
    let release: String = bytes[at..]
        .iter()
        .take(16)
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .map(|&b| char::from(b))
        .collect();
    (!release.is_empty()).then_some(release)
}

fn find(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    bytes.windows(needle.len()).position(|window| window == needle)
}

/// The major and minor numbers of a release ("8.4.27").
fn release_minor(release: &str) -> Option<(u32, u32)> {
    let mut numbers = release.split('.').map(str::parse::<u32>);
    Some((numbers.next()?.ok()?, numbers.next()?.ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_is_read_after_the_header_php_sends() {
        assert_eq!(release(b"\0X-Powered-By: PHP/8.4.27\0"), Some("8.4.27".into()));
        assert_eq!(release(b"X-Powered-By: PHP/\0"), None);
        assert_eq!(release_minor("8.2.36"), Some((8, 2)));
    }
}
