//! Recorded unwinding fixtures: registers, a stack copy and a memory map saved from a real
//! process (see `tests/fixtures/unwind/snapshot.c`), replayed against the binary they came from,
//! through the same address-space lookups as a live process.
use std::{
    fs::File,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use crate::{
    address_space::{AddressSpaces, Backing, Mappings, Modules, Process, ProcessView, Tracking},
    decode::UserRegs,
    model::{Tgid, Tid},
    untrusted::StableFile,
};

/// The process id a fixture's process is known by.
pub const FIXTURE_TGID: u32 = 1;

pub struct Fixture {
    pub regs: UserRegs,
    pub stack: Vec<u8>,
    pub mappings: Mappings,
}

impl Fixture {
    /// Reads `regs` (ip sp bp, hex), `stack.bin` and `maps` from `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        let read =
            |name: &str| std::fs::read(dir.join(name)).with_context(|| format!("cannot read fixture {name}"));
        let regs = String::from_utf8(read("regs")?)?;
        let values =
            regs.split_whitespace().map(|v| u64::from_str_radix(v, 16)).collect::<Result<Vec<_>, _>>()?;
        let [ip, sp, bp] = values[..] else { anyhow::bail!("fixture regs must hold ip sp bp") };
        let maps = read("maps")?;
        Ok(Self {
            regs: UserRegs { ip, sp, bp, ..UserRegs::default() },
            stack: read("stack.bin")?,
            mappings: Mappings::parse(&maps)?,
        })
    }

    /// The fixture's process, its file-backed mappings read from `binary`.
    pub fn address_spaces(&self, binary: PathBuf) -> AddressSpaces {
        let open = move |_: Tgid, _: &_, _: &_, _: &Path| File::open(&binary).map(StableFile::unchanged);
        let modules = Modules::with_opener(Box::new(open));
        let mut spaces = AddressSpaces::with_modules(Tracking { all: false, follow_forks: false }, modules);
        let file_backed = self.mappings.mappings().any(|m| matches!(m.backing, Backing::File { .. }));
        assert!(file_backed, "a fixture maps its binary");
        spaces.insert(Process::from_mappings(Tgid(FIXTURE_TGID), "fixture", self.mappings.clone()));
        spaces
    }

    /// The fixture's process in `spaces`, at the moment of the recording.
    pub fn view(spaces: &mut AddressSpaces) -> ProcessView<'_> {
        spaces.observe(Tgid(FIXTURE_TGID), Tid(FIXTURE_TGID), "fixture", 0)
    }
}
