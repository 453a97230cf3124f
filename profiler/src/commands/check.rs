//! `profiler check`: every check, one line each; fails if one failed.
use anyhow::{Result, bail};

use crate::session::checks::{self, Status};

pub(super) fn run(pids: &[u32]) -> Result<()> {
    let findings = checks::all(pids);
    for finding in &findings {
        println!("{finding}");
    }
    let failed = findings.iter().filter(|f| f.status == Status::Fail).count();
    if failed > 0 {
        bail!("{failed} check{} failed", if failed == 1 { "" } else { "s" });
    }
    Ok(())
}
