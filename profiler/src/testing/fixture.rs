//! Recorded unwinding fixtures: registers, a stack copy and a memory map saved from a real
//! process (see `tests/fixtures/unwind/snapshot.c`), replayed against the binary they came from.
//! Used by the unit tests and the benchmarks to run the unwinder without BPF.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::{AddressSpaceView, Location};
use crate::{
    decode::UserRegs,
    maps::{AddressSpace, Backing},
    module::ModuleId,
};

/// The one module of a fixture process.
pub const FIXTURE_MODULE: ModuleId = ModuleId::from_index(0);

pub struct Fixture {
    pub regs: UserRegs,
    pub stack: Vec<u8>,
    pub space: AddressSpace,
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
        let maps = String::from_utf8(read("maps")?)?;
        Ok(Self {
            regs: UserRegs { ip, sp, bp },
            stack: read("stack.bin")?,
            space: AddressSpace::parse(&maps)?,
        })
    }

    /// The fixture's process, with its file-backed code read from `binary`.
    pub fn space(&self, binary: PathBuf) -> FixtureSpace<'_> {
        FixtureSpace { space: &self.space, binary }
    }
}

pub struct FixtureSpace<'a> {
    space: &'a AddressSpace,
    binary: PathBuf,
}

impl AddressSpaceView for FixtureSpace<'_> {
    fn locate(&mut self, addr: u64) -> Location {
        match self.space.find(addr) {
            Some(m) if m.executable && matches!(m.backing, Backing::File { .. }) => {
                Location::Module { module: FIXTURE_MODULE, file_offset: m.file_offset(addr) }
            }
            Some(m) if m.executable => Location::Anonymous,
            _ => Location::NotCode,
        }
    }

    fn module_paths(&self, _: ModuleId) -> Option<(PathBuf, PathBuf)> {
        Some((self.binary.clone(), self.binary.clone()))
    }
}
