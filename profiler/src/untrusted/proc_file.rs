//! Small `/proc` files whose text a process chooses (its name, its status, its mounts, the
//! cgroups its container's runtime names), read up to a bound.
use std::io::Read as _;

/// Bytes read at most of a `/proc` file other than a process's `maps` (as long as its list of
/// mappings) and `/proc/kallsyms` (the kernel's).
const MAX_PROC_FILE: u64 = 64 * 1024;

/// The bytes of a `/proc` file, at most `max`.
pub(super) fn read_bounded_bytes(path: &str, max: u64) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The text of a small `/proc` file, bounded (what a process writes there, its name, or what
/// a container's runtime names its cgroups, is its own), any bytes that are not UTF-8 replaced.
pub(crate) fn read_bounded(path: &str) -> Option<String> {
    // Lossily: a process names itself (and so its `status`) with any bytes.
    read_bounded_bytes(path, MAX_PROC_FILE).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}
