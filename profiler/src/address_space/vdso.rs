//! The vDSO has no file: the profiler copies its own (the kernel maps the same image into every
//! 64-bit process) into an in-memory file, which then symbolizes and unwinds like any ELF file.
use std::fs::File;

use rustix::fs::{MemfdFlags, memfd_create};

use super::{Backing, Mappings};
use crate::model::Tgid;

/// The vDSO image, copied from this process into an in-memory file. The kernel maps the same
/// image into every 64-bit process, so ours stands for the target's: symbols and CFI included.
pub(super) fn own_vdso() -> Option<File> {
    // rustix keeps the auxiliary vector's vDSO address to itself: libc's getauxval.
    // SAFETY: getauxval has no preconditions.
    let start = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let space = Mappings::read(Tgid::own()).ok()?;
    let mapping = space.find(start).filter(|m| m.backing == Backing::Pseudo("[vdso]".into()))?;
    // SAFETY: the range is our own vDSO mapping, readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, (mapping.end - start) as usize) };
    let mut file = File::from(memfd_create("vdso", MemfdFlags::CLOEXEC).ok()?);
    std::io::Write::write_all(&mut file, image).ok()?;
    Some(file)
}
