//! The vDSO has no file: the profiler copies its own (the kernel maps the same image into every
//! 64-bit process) into an in-memory file, which then symbolizes and unwinds like any ELF file.
use std::fs::File;

use super::{Backing, Mappings};

/// The vDSO image, copied from this process into an in-memory file. The kernel maps the same
/// image into every 64-bit process, so ours stands for the target's: symbols and CFI included.
pub fn own_vdso() -> Option<File> {
    // SAFETY: getauxval has no preconditions.
    let start = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let space = Mappings::read(std::process::id()).ok()?;
    let mapping = space.find(start).filter(|m| m.backing == Backing::Pseudo("[vdso]".into()))?;
    // SAFETY: the range is our own vDSO mapping, readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, (mapping.end - start) as usize) };
    // SAFETY: memfd_create with a NUL-terminated name; the descriptor is checked and owned.
    let fd = unsafe { libc::memfd_create(c"vdso".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    std::io::Write::write_all(&mut file, image).ok()?;
    Some(file)
}
