//! Opening the files a target maps, and mapping files into memory: the one place that reads what
//! a target process controls from its file system.
use std::{
    fs::File,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use super::Mapping;

/// `/proc/PID/map_files/START-END`: the very inode a mapping was made from, even deleted or
/// replaced since.
pub fn map_files_path(tgid: u32, mapping: &Mapping) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/map_files/{:x}-{:x}", mapping.start, mapping.end))
}

/// Opens the file behind a mapping of process `tgid` as the target sees it: `map_files` names the
/// mapped inode itself (deleted or replaced files included); `/proc/PID/root` resolves the path
/// in the target's mount namespace (containers); the path itself serves once the process is gone.
pub fn mapped_file(tgid: u32, mapping: &Mapping, path: &Path) -> Option<File> {
    if let Ok(file) = File::open(map_files_path(tgid, mapping)) {
        return Some(file);
    }
    // A process already gone (short-lived ones often are by the time their records are read)
    // still left its files: the same path here names the same inode when we share its mounts.
    let rooted = Path::new(&format!("/proc/{tgid}/root")).join(path.strip_prefix("/").unwrap_or(path));
    [rooted.as_path(), path].into_iter().find_map(|candidate| {
        let file = File::open(candidate).ok()?;
        // A file replaced since it was mapped would give wrong symbols.
        (file.metadata().ok()?.ino() == mapping.inode).then_some(file)
    })
}

/// A file's bytes, mapped read-only.
pub fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: read-only private mapping of a file held open; a concurrent truncation would fault,
    // the accepted risk of every ELF reader (blazesym maps files the same way).
    unsafe { memmap2::Mmap::map(file) }
}

/// The bytes of the file at `path`, mapped read-only.
pub fn map_path(path: &Path) -> Result<memmap2::Mmap> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    map(&file).with_context(|| format!("cannot map {}", path.display()))
}
